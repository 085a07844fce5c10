//! OSD <-> OSD control and recovery messages: heartbeats, and the requests a PG's primary sends
//! while peering, recovering and scrubbing (gather logs, list, pull, push, activate, scrub maps). Object contents travel
//! as an [`crate::image::ObjectImage`] in the message's data section.

use std::collections::BTreeMap;

use cairn_pg::log::{Eversion, PgLog};
use serde::{Deserialize, Serialize};

/// A heartbeat, echoed unchanged by the receiver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// Sender OSD.
    pub from: i32,
    /// Sender's map epoch.
    pub epoch: u64,
    /// Sender's send time (its own clock, ms), echoed so it can measure the round trip.
    pub stamp_ms: u64,
}

/// A peering or recovery request about one PG.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRequest {
    /// Request id, echoed.
    pub tid: u64,
    /// Sending OSD (the PG's primary).
    pub from: i32,
    /// Epoch of the interval the primary peers for.
    pub epoch: u64,
    /// Pool id.
    pub pool: i64,
    /// PG seed.
    pub pg_seed: u32,
    /// What is asked.
    pub body: PeerBody,
    /// Whether client I/O waits on this request (it decides the request's scheduler class
    /// on the OSD that serves it). Absent from older senders' messages: background.
    #[serde(default)]
    pub urgency: Urgency,
    /// Nonzero: a push or `Filled` of the background fill attempt of this number; the copy
    /// refuses it once a later attempt of the same interval reached it. Zero: not a fill's.
    #[serde(default)]
    pub fill: u64,
}

/// How urgently a recovery step is needed: client I/O waiting on it or not. A recovery step
/// runs through the scheduler of each OSD it touches in the class this picks, so the few
/// steps that hold a client back are not queued behind bulk recovery (Ceph recovers an object
/// a client op waits on ahead of the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Urgency {
    /// Nothing waits on it (a background fill, a scrub's repair): the recovery class.
    #[default]
    Background,
    /// Client I/O waits on it (a PG recovering before it activates, a read's repair): run as
    /// client work.
    Blocking,
}

/// The request proper.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerBody {
    /// Send your log and last epoch started for this PG (answered by [`PeerAnswer::Info`]).
    Query,
    /// Object names in order after `after` (answered by [`PeerAnswer::Names`]).
    List {
        /// Resume point (exclusive), or empty.
        after: String,
        /// Most names.
        max: u32,
    },
    /// Send the next piece of this object's image (answered by [`PeerAnswer::Object`] with the
    /// piece as data): its data from `data_offset`, then its omap after `omap_after`; the first
    /// piece (offset 0, no omap key) also carries the xattrs. Pieces keep every message well
    /// under the frame limit however large the object's omap.
    Pull {
        /// Object.
        object: String,
        /// Where the piece's data starts.
        data_offset: u64,
        /// Omap key the piece's entries follow (None: from the first).
        omap_after: Option<Vec<u8>>,
    },
    /// Install the next piece of this object: the data section is a piece of its image (data
    /// at `data_offset`, omap entries, xattrs in the first piece), or empty with
    /// `present == false` to delete it. A transfer in several pieces builds a temporary object
    /// that replaces the object at the last piece (an interrupted one changes nothing visible).
    Push {
        /// Object.
        object: String,
        /// False: remove the object.
        present: bool,
        /// Where the piece's data goes.
        data_offset: u64,
        /// The first piece of the object.
        first: bool,
        /// The last piece: the object is complete.
        last: bool,
    },
    /// Peering is done: replace your log with this one and remember the epoch as your last
    /// epoch started. With `keep`, first delete every object not named (end of a backfill).
    /// `missing` names the objects the log has that your copy lacks until the primary's
    /// background recovery pushes them (the version each needs; None: deleted): keep the list
    /// (persisted) and report it when asked for your log.
    Activate {
        /// The authoritative log (boxed: the other requests are small).
        log: Box<PgLog>,
        /// Objects that exist after a backfill, or None after log recovery.
        keep: Option<Vec<String>>,
        /// Objects this copy still lacks, recovered after activation.
        #[serde(default)]
        missing: BTreeMap<String, Option<Eversion>>,
    },
    /// From an OSD outside the PG's acting set that still holds a copy, to the primary: is the
    /// PG active+clean without it, in the map of the request's epoch, and does the PG's history
    /// include the last interval this copy was activated in? (answered by
    /// [`PeerAnswer::Clean`]; then the copy may be deleted.)
    IsClean {
        /// The copy's last epoch started.
        last_epoch_started: u64,
    },
    /// Scrub: your copy's scrub map of the objects named after `after` up to `until`
    /// (inclusive; None: to the last), answered by [`PeerAnswer::ScrubMap`]. The primary holds
    /// the PG's lock meanwhile, so no write changes them.
    ScrubMap {
        /// Range start (exclusive), or empty.
        after: String,
        /// Range end (inclusive), or None for no end.
        until: Option<String>,
        /// Read every object's data and omap too (deep scrub), not only its metadata.
        deep: bool,
    },
    /// From the primary of a temporary acting set to an up-set OSD it fills in the background:
    /// every object changed up to this log's head has been pushed to you; replace your log
    /// with it and keep your last epoch started (you serve nothing until the PG peers with you
    /// in its acting set, which recovers the rest from the log).
    Filled {
        /// The primary's log as of the start of the pass that pushed the objects.
        log: Box<PgLog>,
    },
    /// From the primary of a temporary acting set to an up-set OSD it is about to fill: may
    /// it (Ceph's remote backfill reservation, bounded by the copy's `osd_max_backfills`)?
    /// Answered by [`PeerAnswer::Reserved`].
    Reserve,
    /// The fill this primary reserved is over (done or given up): the reservation is free.
    Release,
}

/// Answer to a [`PeerRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReply {
    /// The request's id.
    pub tid: u64,
    /// The answer, or why it failed.
    pub answer: Result<PeerAnswer, String>,
}

/// The successful answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerAnswer {
    /// The PG's log on this OSD.
    Info {
        /// Last epoch in which this copy was activated.
        last_epoch_started: u64,
        /// Its log.
        log: PgLog,
        /// Objects its log names that it does not hold yet (see [`PeerBody::Activate`]).
        #[serde(default)]
        missing: BTreeMap<String, Option<Eversion>>,
    },
    /// Object names.
    Names {
        /// Names in order.
        names: Vec<String>,
        /// More follow.
        more: bool,
    },
    /// A piece of the object's image (in the data section) or its absence.
    Object {
        /// False: the object does not exist here.
        present: bool,
        /// Its version.
        version: Eversion,
        /// More pieces follow.
        more: bool,
    },
    /// Done.
    Done,
    /// The copy cannot take the pushed object: its store is out of space or past its full
    /// ratio (Ceph's recovery_toofull). The primary leaves it out of the interval.
    TooFull {
        /// Why, for the log.
        why: String,
    },
    /// A copy's scrub map of the range asked for.
    ScrubMap {
        /// Each object the copy has in the range, with its state.
        map: cairn_pg::scrub::ScrubMap,
    },
    /// Whether the PG is active+clean on this primary, in the asker's map epoch, without the
    /// asker.
    Clean {
        /// True: the asker's copy is no longer needed.
        clean: bool,
    },
    /// Whether a fill reservation was granted; refused while this OSD takes part in as many
    /// fills as its `osd_max_backfills` allows (the primary waits: `+backfill_wait`).
    Reserved {
        /// True: granted until released or the PG's interval ends.
        granted: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode};

    /// A request as senders built it before it had an urgency.
    #[derive(Serialize)]
    struct RequestWithoutUrgency {
        tid: u64,
        from: i32,
        epoch: u64,
        pool: i64,
        pg_seed: u32,
        body: PeerBody,
    }

    #[test]
    fn a_request_keeps_its_urgency_and_an_older_one_without_it_is_background() {
        let blocking = PeerRequest {
            tid: 3,
            from: 1,
            epoch: 9,
            pool: 2,
            pg_seed: 5,
            body: PeerBody::Query,
            urgency: Urgency::Blocking,
            fill: 7,
        };
        let (back, _) = decode::<PeerRequest>(&encode(&blocking, &[])).unwrap();
        assert_eq!(back, blocking);
        let older = RequestWithoutUrgency {
            tid: 3,
            from: 1,
            epoch: 9,
            pool: 2,
            pg_seed: 5,
            body: PeerBody::Query,
        };
        let (back, _) = decode::<PeerRequest>(&encode(&older, &[])).unwrap();
        assert_eq!(back.urgency, Urgency::Background);
        assert_eq!(back.fill, 0, "not a fill's");
        assert_eq!(back.tid, 3);
    }
}
