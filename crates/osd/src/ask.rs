//! Requests to other OSDs about one PG: the peering, recovery, scrub and stray-deletion
//! paths all ask through here, so each request carries the PG's interval epoch and urgency,
//! and stops waiting as soon as the map shows the asked OSD down or booted again.

use std::time::Duration;

use bytes::Bytes;
use cairn_pg::PeerLog;
use cairn_proto::peer::{PeerAnswer, PeerBody, PeerReply, PeerRequest, Urgency};
use cairn_proto::{decode, encode, MSG_PEER_REQUEST};

use crate::error::OsdError;
use crate::pgs::Pg;
use crate::shared::Shared;

/// How long one peering request may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends one peering request about `pg` (in the map of `epoch`) to `osd` and waits for its
/// answer.
pub(crate) async fn ask(
    s: &Shared,
    pg: &Pg,
    epoch: u64,
    osd: i32,
    body: PeerBody,
    data: Bytes,
) -> Result<(PeerAnswer, Bytes), OsdError> {
    ask_as(s, pg, epoch, osd, body, data, Urgency::Background.into()).await
}

/// How a recovery step is asked for: its urgency, which picks its scheduler class on the OSD
/// asked, and the background fill attempt it belongs to (0: none).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asking {
    /// Whether client I/O waits on it.
    pub urgency: Urgency,
    /// The fill attempt whose push or `Filled` it is (0: not a fill's).
    pub fill: u64,
}

impl From<Urgency> for Asking {
    fn from(urgency: Urgency) -> Asking {
        Asking { urgency, fill: 0 }
    }
}

/// [`ask`] for a recovery step asked for as `how` says.
pub(crate) async fn ask_as(
    s: &Shared,
    pg: &Pg,
    epoch: u64,
    osd: i32,
    body: PeerBody,
    data: Bytes,
    how: Asking,
) -> Result<(PeerAnswer, Bytes), OsdError> {
    let Asking { urgency, fill } = how;
    let addr = s.addr_of(osd).ok_or_else(|| OsdError::Peer {
        osd,
        reason: "no address in the map".into(),
    })?;
    let tid = s.peers.tid();
    let req = PeerRequest {
        tid,
        from: s.id,
        epoch,
        pool: pg.id.pool,
        pg_seed: pg.id.seed,
        body,
        urgency,
        fill,
    };
    let call = s.peers.call(
        osd,
        &addr,
        MSG_PEER_REQUEST,
        tid,
        encode(&req, &data),
        PEER_TIMEOUT,
    );
    // An up peer that goes down or boots again meanwhile will not answer: stop waiting then
    // instead of after the timeout (the PG's lock may be held meanwhile).
    let raw = match s.incarnation_of(osd) {
        Some(up_from) => tokio::select! {
            r = call => r?,
            _ = s.until_gone(osd, up_from) => {
                return Err(OsdError::Peer {
                    osd,
                    reason: "down or booted again while asked".into(),
                })
            }
        },
        None => call.await?,
    };
    let (reply, body) = decode::<PeerReply>(&raw)?;
    match reply.answer {
        Ok(a) => Ok((a, body)),
        Err(reason) => Err(OsdError::Peer { osd, reason }),
    }
}

/// Asks `osd` for its copy's log and last epoch started.
pub(crate) async fn query_log(
    s: &Shared,
    pg: &Pg,
    epoch: u64,
    osd: i32,
) -> Result<PeerLog, OsdError> {
    match ask(s, pg, epoch, osd, PeerBody::Query, Bytes::new()).await? {
        (
            PeerAnswer::Info {
                last_epoch_started,
                log,
                missing,
            },
            _,
        ) => Ok(PeerLog {
            osd,
            last_epoch_started,
            log,
            missing,
        }),
        _ => Err(OsdError::Peer {
            osd,
            reason: "unexpected answer to a log query".into(),
        }),
    }
}
