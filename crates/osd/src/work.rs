//! What one piece of OSD work is, as the scheduler's policies see it: why it runs (which sets
//! its QoS class and Ceph's priority), the client, the op kind, the object and the byte range,
//! and the physical offset when the store knows it. Every path into the scheduler (client ops,
//! replica writes, recovery and backfill, scrub, stray deletion) describes its work this way,
//! so WPQ tells recovery from clients by priority, ORR orders by object and offset, and TBF
//! rules on op, class or object match on a running OSD as they do in the simulator.

use std::sync::atomic::{AtomicU8, Ordering};

use cairn_qos::{OpKind, QosClass};
use serde::{Deserialize, Serialize};

/// Ceph's `osd_client_op_priority`.
pub const DEFAULT_CLIENT_OP_PRIORITY: u8 = 63;
/// Ceph's `osd_recovery_op_priority`.
pub const DEFAULT_RECOVERY_OP_PRIORITY: u8 = 3;
/// Ceph's `osd_scrub_priority`.
pub const DEFAULT_SCRUB_PRIORITY: u8 = 5;
/// Ceph's `osd_pg_delete_priority`.
pub const DEFAULT_PG_DELETE_PRIORITY: u8 = 5;
/// `osd_cache_clean_priority` (cairn's own): a cached OSD's write-back, as low as scrub.
pub const DEFAULT_CACHE_CLEAN_PRIORITY: u8 = 5;
/// `osd_background_op_priority` (cairn's own): a client's background ops (the S3 gateway's
/// lifecycle pass), as low as scrub.
pub const DEFAULT_BACKGROUND_OP_PRIORITY: u8 = 5;

/// Why the OSD runs a piece of work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A client's op, or a replica's part of one.
    ClientOp,
    /// Recovery a client op waits on: Ceph runs it at the client's class and priority.
    BlockingRecovery,
    /// Recovery or backfill nothing waits on.
    Recovery,
    /// Scrub and deep scrub.
    Scrub,
    /// Deleting a stray PG copy (Ceph's PG deletion).
    PgDelete,
    /// A cached OSD's cache writing dirty lines back to its HDD.
    CacheClean,
    /// A client's op marked as background work (and its replica writes).
    BackgroundOp,
}

impl Purpose {
    /// The QoS class the policies serve it in.
    pub fn class(self) -> QosClass {
        match self {
            Purpose::ClientOp | Purpose::BlockingRecovery => QosClass::Client,
            Purpose::Recovery => QosClass::Recovery,
            Purpose::Scrub | Purpose::PgDelete | Purpose::CacheClean | Purpose::BackgroundOp => {
                QosClass::BestEffort
            }
        }
    }
}

/// One request's description for the scheduler. `Copy`, as the request it becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// Why it runs.
    pub purpose: Purpose,
    /// The client it serves (for the OSD's own work: its id, or the peer that asked).
    pub client_id: u64,
    /// What it does to the device.
    pub op: OpKind,
    /// The object it touches (Ceph's object hash of its name), when it touches one.
    pub object_id: Option<u64>,
    /// Where in the object it starts.
    pub offset_bytes: u64,
    /// How many bytes it moves (its cost counts at least 4 KiB).
    pub length_bytes: u64,
    /// Where on the device it starts, when the store knows without I/O.
    pub physical_offset_bytes: Option<u64>,
}

impl Work {
    /// `purpose` work of `op` for `client_id`, on no particular object, of 4 KiB.
    pub fn new(purpose: Purpose, client_id: u64, op: OpKind) -> Work {
        Work {
            purpose,
            client_id,
            op,
            object_id: None,
            offset_bytes: 0,
            length_bytes: 4096,
            physical_offset_bytes: None,
        }
    }

    /// The same work on bytes `offset_bytes..offset_bytes + length_bytes` of object `name`.
    pub fn on(self, name: &str, offset_bytes: u64, length_bytes: u64) -> Work {
        Work {
            object_id: Some(object_id(name)),
            offset_bytes,
            length_bytes,
            ..self
        }
    }

    /// The same work of `length_bytes`, on no particular range.
    pub fn sized(self, length_bytes: u64) -> Work {
        Work {
            length_bytes,
            ..self
        }
    }

    /// The same work starting at device byte `physical` (if known).
    pub fn at_physical(self, physical: Option<u64>) -> Work {
        Work {
            physical_offset_bytes: physical,
            ..self
        }
    }
}

/// The id the scheduler and TBF rules know an object by: Ceph's object hash of its name
/// (`ceph_str_hash_rjenkins`, the hash `ceph osd map` prints), so a rule's `object=` value can
/// be computed by any tool that knows the name.
pub fn object_id(name: &str) -> u64 {
    u64::from(cairn_clustermap::Pool::hash_key(name, ""))
}

/// Ceph's op priorities by purpose, settable while the OSD runs (`cairn tell osd.N config set
/// osd_recovery_op_priority 10`). WPQ serves priorities at or above its cut-off strictly, and
/// below it in proportion to their values.
#[derive(Debug)]
pub struct Priorities {
    client: AtomicU8,
    recovery: AtomicU8,
    scrub: AtomicU8,
    pg_delete: AtomicU8,
    cache_clean: AtomicU8,
    background: AtomicU8,
}

impl Default for Priorities {
    fn default() -> Self {
        Priorities {
            client: AtomicU8::new(DEFAULT_CLIENT_OP_PRIORITY),
            recovery: AtomicU8::new(DEFAULT_RECOVERY_OP_PRIORITY),
            scrub: AtomicU8::new(DEFAULT_SCRUB_PRIORITY),
            pg_delete: AtomicU8::new(DEFAULT_PG_DELETE_PRIORITY),
            cache_clean: AtomicU8::new(DEFAULT_CACHE_CLEAN_PRIORITY),
            background: AtomicU8::new(DEFAULT_BACKGROUND_OP_PRIORITY),
        }
    }
}

/// The configuration keys of [`Priorities`], as Ceph names them (the last is cairn's own).
pub const PRIORITY_KEYS: [&str; 6] = [
    "osd_client_op_priority",
    "osd_recovery_op_priority",
    "osd_scrub_priority",
    "osd_pg_delete_priority",
    "osd_cache_clean_priority",
    "osd_background_op_priority",
];

impl Priorities {
    /// The priority work of `purpose` runs at now: recovery a client waits on runs at the
    /// client's.
    pub fn of(&self, purpose: Purpose) -> u8 {
        let slot = match purpose {
            Purpose::ClientOp | Purpose::BlockingRecovery => &self.client,
            Purpose::Recovery => &self.recovery,
            Purpose::Scrub => &self.scrub,
            Purpose::PgDelete => &self.pg_delete,
            Purpose::CacheClean => &self.cache_clean,
            Purpose::BackgroundOp => &self.background,
        };
        slot.load(Ordering::Relaxed)
    }

    fn slot(&self, key: &str) -> Option<&AtomicU8> {
        Some(match key {
            "osd_client_op_priority" => &self.client,
            "osd_recovery_op_priority" => &self.recovery,
            "osd_scrub_priority" => &self.scrub,
            "osd_pg_delete_priority" => &self.pg_delete,
            "osd_cache_clean_priority" => &self.cache_clean,
            "osd_background_op_priority" => &self.background,
            _ => return None,
        })
    }

    /// The value of one of [`PRIORITY_KEYS`] (None: not such a key).
    pub fn get(&self, key: &str) -> Option<u8> {
        self.slot(key).map(|s| s.load(Ordering::Relaxed))
    }

    /// Sets one of [`PRIORITY_KEYS`] to `value` (1..=255, as text). Requests already queued
    /// keep the priority they were queued with.
    pub fn set(&self, key: &str, value: &str) -> Result<(), String> {
        let slot = self
            .slot(key)
            .ok_or_else(|| format!("`{key}` is not a priority"))?;
        let v: u8 = value
            .trim()
            .parse()
            .ok()
            .filter(|&v| v >= 1)
            .ok_or_else(|| format!("{key} must be a whole number in 1..=255, not `{value}`"))?;
        slot.store(v, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_ceph_and_change_live() {
        let p = Priorities::default();
        assert_eq!(p.of(Purpose::ClientOp), 63);
        assert_eq!(p.of(Purpose::BlockingRecovery), 63);
        assert_eq!(p.of(Purpose::Recovery), 3);
        assert_eq!(p.of(Purpose::Scrub), 5);
        assert_eq!(p.of(Purpose::PgDelete), 5);
        p.set("osd_recovery_op_priority", "10").unwrap();
        assert_eq!(p.of(Purpose::Recovery), 10);
        assert_eq!(p.get("osd_recovery_op_priority"), Some(10));
        p.set("osd_client_op_priority", "200").unwrap();
        assert_eq!(p.of(Purpose::BlockingRecovery), 200);
        for bad in ["0", "256", "-1", "high", ""] {
            let e = p.set("osd_scrub_priority", bad).unwrap_err();
            assert!(e.contains("1..=255"), "{bad}: {e}");
        }
        assert_eq!(p.of(Purpose::Scrub), 5, "a refused value changes nothing");
        assert!(p.set("osd_other_priority", "5").is_err());
        assert_eq!(p.get("osd_other_priority"), None);
    }

    #[test]
    fn work_carries_its_object_and_range() {
        let w = Work::new(Purpose::ClientOp, 7, OpKind::Read).on("obj", 8192, 4096);
        assert_eq!(w.object_id, Some(object_id("obj")));
        assert_ne!(object_id("obj"), object_id("obk"));
        assert_eq!((w.offset_bytes, w.length_bytes), (8192, 4096));
        assert_eq!(w.purpose.class(), QosClass::Client);
        assert_eq!(Purpose::Recovery.class(), QosClass::Recovery);
        assert_eq!(Purpose::PgDelete.class(), QosClass::BestEffort);
        let moved = w.at_physical(Some(1 << 20)).sized(512);
        assert_eq!(moved.physical_offset_bytes, Some(1 << 20));
        assert_eq!(moved.length_bytes, 512);
    }
}
