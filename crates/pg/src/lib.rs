//! Placement-group logic without I/O: events in, actions out.
//!
//! [`log`] is the PG log (ordered versioned entries per PG, bounded, trimmed); [`peering`]
//! decides, from the logs of the OSDs that may hold a PG, which log is authoritative and what
//! each replica must recover (objects newer elsewhere, divergent entries to roll back) or
//! whether it is beyond the log's reach and needs backfill; [`intervals`] says which OSDs must
//! be heard from first (and when a PG is down); [`acting`] chooses who serves while copies
//! are recovered; [`machine`] is a primary's whole peering of one interval, which the OSD
//! drives step by step; [`scrub`] compares the copies' scrub maps and names the
//! authoritative state of each object they disagree on. Nothing here reads a clock, touches a disk or a socket.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`), and this crate keeps them so.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod acting;
pub mod error;
pub mod intervals;
pub mod log;
pub mod machine;
pub mod peering;
pub mod scrub;

pub use acting::{ActingSet, Hold, Holds, Missing};
pub use error::PgError;
pub use intervals::{intervals, prior_set, EpochPlacement, PastInterval, Prior};
pub use log::{Dup, Eversion, LogEntry, ObjectId, OpKind, PgLog, ReqId, PRIOR_UNKNOWN};
pub use peering::{plan, PeerLog, PeeringPlan, Recovery};
