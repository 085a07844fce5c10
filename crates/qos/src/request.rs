//! The request model: what the scheduler knows about one I/O.
//!
//! Owns the `Request` record and its attribute enums. It never computes costs (see `cost`) and
//! never allocates: a `Request` is a plain `Copy` value so queues hold it inline.

use serde::{Deserialize, Serialize};

/// The service class of a request. mClock gives each class its own reservation, weight and limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QosClass {
    /// External client I/O (including replica sub-ops of client writes).
    Client,
    /// Recovery and backfill pushes/pulls.
    Recovery,
    /// Background best-effort work: scrub, snap trim, PG deletion.
    BestEffort,
    /// Must be served before anything else (peering-critical ops); never throttled.
    Immediate,
}

impl QosClass {
    /// All classes, in index order.
    pub const ALL: [QosClass; 4] = [
        QosClass::Client,
        QosClass::Recovery,
        QosClass::BestEffort,
        QosClass::Immediate,
    ];

    /// Dense index (0..4) for per-class arrays.
    pub fn index(self) -> usize {
        match self {
            QosClass::Client => 0,
            QosClass::Recovery => 1,
            QosClass::BestEffort => 2,
            QosClass::Immediate => 3,
        }
    }

    /// Lower-case name, as used in configs and rules.
    pub fn name(self) -> &'static str {
        match self {
            QosClass::Client => "client",
            QosClass::Recovery => "recovery",
            QosClass::BestEffort => "best_effort",
            QosClass::Immediate => "immediate",
        }
    }

    /// Parses a class name (`client`, `recovery`, `best_effort`, `immediate`).
    pub fn parse(s: &str) -> Option<QosClass> {
        QosClass::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// What the request does to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Data read.
    Read,
    /// Data write.
    Write,
    /// Anything else (metadata, stat, delete).
    Other,
}

impl OpKind {
    /// Lower-case name, as used in configs and rules.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Other => "other",
        }
    }

    /// Parses `read`, `write` or `other`.
    pub fn parse(s: &str) -> Option<OpKind> {
        [OpKind::Read, OpKind::Write, OpKind::Other]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// One schedulable I/O. `Copy` so that queues store it inline (no allocation per request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Caller-assigned unique id (used to check that nothing is lost or reordered).
    pub id: u64,
    /// Service class.
    pub class: QosClass,
    /// Issuing client (for recovery/best-effort: the PG or job that issued it).
    pub client_id: u64,
    /// Operation kind.
    pub op: OpKind,
    /// Target device (OSD/OST index).
    pub target: u32,
    /// Object the request touches, when it touches one.
    pub object_id: Option<u64>,
    /// Logical offset inside the object.
    pub offset_bytes: u64,
    /// Physical device offset, when known (from the store's extent map).
    pub physical_offset_bytes: Option<u64>,
    /// Payload length.
    pub length_bytes: u64,
    /// Optional job id (for TBF rules).
    pub job_id: Option<u32>,
    /// Priority for `wpq` (Ceph convention: client 63, recovery 3, >= cut-off is strict).
    pub priority: u8,
    /// Cost in device nanoseconds, from `cost::CostModel::cost_ns`.
    pub cost_ns: u64,
    /// Time the request reached the scheduler (`QosQueue::enqueue` sets it; its wait times
    /// count from it).
    pub arrival_ns: u64,
    /// dmClock delta: requests this client completed at other servers since its last request here.
    pub dmclock_delta: u16,
    /// dmClock rho: of those, how many were served in the reservation phase.
    pub dmclock_rho: u16,
    /// Bookkeeping of `QosQueue` (scheduler-wide throttled time at enqueue); callers leave 0.
    pub throttle_mark_ns: u64,
}

impl Request {
    /// A request with the given identity and cost; other attributes take neutral defaults
    /// (write, target 0, no object, priority 63) and can be set with struct update syntax.
    pub fn new(id: u64, class: QosClass, client_id: u64, cost_ns: u64) -> Request {
        Request {
            id,
            class,
            client_id,
            op: OpKind::Write,
            target: 0,
            object_id: None,
            offset_bytes: 0,
            physical_offset_bytes: None,
            length_bytes: 4096,
            job_id: None,
            priority: 63,
            cost_ns,
            arrival_ns: 0,
            dmclock_delta: 0,
            dmclock_rho: 0,
            throttle_mark_ns: 0,
        }
    }
}
