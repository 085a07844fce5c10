//! The scheduler's recent history: the last requests each shard released, with what the
//! policy saw of them and how long they waited (as Ceph's `dump_historic_ops`). An operator
//! reads it with `cairn tell osd.N sched history` to see which work the policy put first; the
//! tests read it to check that every path describes its work in full.

use std::collections::VecDeque;
use std::sync::Mutex;

use cairn_qos::{OpKind, QosClass};
use serde::{Deserialize, Serialize};

use crate::work::{Purpose, Work};

/// Requests each shard remembers (explicit limit; the oldest are forgotten first).
pub const HISTORY_PER_SHARD: usize = 2048;

/// One released request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedRequest {
    /// Order of release on this OSD (across shards, by the time of release).
    pub seq: u64,
    /// The shard that released it.
    pub shard: usize,
    /// Why it ran.
    pub purpose: Purpose,
    /// Its QoS class.
    pub class: QosClass,
    /// The priority it was queued with.
    pub priority: u8,
    /// What it did to the device.
    pub op: OpKind,
    /// The client it served.
    pub client_id: u64,
    /// The object it touched (its hash), if one.
    pub object_id: Option<u64>,
    /// Where in the object.
    pub offset_bytes: u64,
    /// Bytes.
    pub length_bytes: u64,
    /// Where on the device, if known when queued.
    pub physical_offset_bytes: Option<u64>,
    /// Time in the scheduler's queue, in µs.
    pub waited_us: u64,
    /// When it was queued, in µs of its shard's clock: with `seq`, which request of the shard
    /// overtook which (queued later, released sooner).
    pub queued_us: u64,
}

/// A bounded ring of [`ReleasedRequest`] requests.
#[derive(Debug, Default)]
pub struct History {
    ring: Mutex<VecDeque<ReleasedRequest>>,
}

impl History {
    /// Records that `work`, queued at `arrival_ns` of the shard's clock, was released at
    /// `released_ns`.
    pub fn record(
        &self,
        seq: u64,
        shard: usize,
        work: &Work,
        priority: u8,
        arrival_ns: u64,
        released_ns: u64,
    ) {
        let r = ReleasedRequest {
            seq,
            shard,
            purpose: work.purpose,
            class: work.purpose.class(),
            priority,
            op: work.op,
            client_id: work.client_id,
            object_id: work.object_id,
            offset_bytes: work.offset_bytes,
            length_bytes: work.length_bytes,
            physical_offset_bytes: work.physical_offset_bytes,
            waited_us: released_ns.saturating_sub(arrival_ns) / 1000,
            queued_us: arrival_ns / 1000,
        };
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == HISTORY_PER_SHARD {
            ring.pop_front();
        }
        ring.push_back(r);
        debug_assert!(ring.len() <= HISTORY_PER_SHARD);
    }

    /// What is remembered, oldest first.
    pub fn snapshot(&self) -> Vec<ReleasedRequest> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().copied().collect()
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_within_its_bound() {
        let h = History::default();
        let w = Work::new(Purpose::Recovery, 1, OpKind::Write).on("o", 0, 8192);
        for seq in 0..(HISTORY_PER_SHARD as u64 + 10) {
            h.record(seq, 0, &w, 3, seq * 1000, seq * 1000 + 5_000);
        }
        let s = h.snapshot();
        assert_eq!(s.len(), HISTORY_PER_SHARD);
        assert_eq!(s[0].seq, 10);
        assert_eq!(s.last().unwrap().seq, HISTORY_PER_SHARD as u64 + 9);
        assert_eq!(
            (s[0].class, s[0].priority, s[0].waited_us, s[0].queued_us),
            (QosClass::Recovery, 3, 5, 10)
        );
        h.clear();
        assert!(h.snapshot().is_empty());
    }
}
