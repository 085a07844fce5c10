#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]
//! cairn-qos: the OSD request scheduler.
//!
//! Pure: no async, no clock, no I/O and no randomness of its own. Time (`now_ns`) and any seed
//! are passed in, which is what lets `sim` prove QoS properties in virtual time. It never touches a
//! device (the OSD and blockdev do).
//!
//! * `request`, `cost`: what a request is and what it costs the device.
//! * `scheduler`: the one `Scheduler` trait; `policy::*`: fifo, wpq, mclock, crrn, orr, trr, tbf.
//! * `config`: selecting and reconfiguring policies by name; Ceph's mClock profiles.
//! * `queue`: `QosQueue`, the front (FIFO fallback, hot swap, counters).
//! * `shard`: N queues whose reservations and limits hold for the OSD as a whole.
//! * `capacity`: turning device measurements into a pinned capacity and cost model.
//! * `sim`: the deterministic virtual-time simulator and the seed-000 replay.

pub mod capacity;
pub mod config;
mod convert;
pub mod cost;
pub mod counters;
pub mod error;
pub mod fasthash;
pub mod heap;
pub mod hist;
pub mod policy;
pub mod queue;
pub mod request;
pub mod scheduler;
pub mod shard;
pub mod sim;

pub use config::{build_policy, MClockConfig, PolicyConfig, Profile};
pub use cost::{CostModel, DeviceCapacity};
pub use error::QosError;
pub use queue::QosQueue;
pub use request::{OpKind, QosClass, Request};
pub use scheduler::{Dequeued, Dispatch, Phase, Refused, Scheduler};
pub use shard::ShardLink;
