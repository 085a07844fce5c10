//! The monitor's core: the authoritative cluster map and the rules that change it.
//!
//! [`map`] is the cluster map (CRUSH, OSD identities and states, pools, exceptions, epoch) and
//! its versioned, checksummed encoding; [`incremental`] is one epoch's change set, applied the
//! same way on the monitor and on every subscriber; [`monitor`] turns events (OSD boot, failure
//! reports, beacons, operator commands, clock ticks) into incrementals and keeps placement
//! balanced after every change. These three are sans-IO (time is passed in). [`daemon`] serves
//! the core over messenger sessions ([`proto`] is the wire protocol) and [`client`] talks to it;
//! sockets are only ever touched through `cairn-msgr`. [`metrics`] is its Prometheus page;
//! [`flags`] names the cluster flags an operator sets in the map (`noout`, `norecover`, ...);
//! [`quota`] holds pool quotas and the PG usage the OSDs report to judge them.
#![warn(missing_docs)]

pub mod client;
pub mod daemon;
pub mod error;
pub mod flags;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod history;
pub mod incremental;
pub mod map;
pub mod metrics;
pub mod monitor;
pub mod proto;
pub mod quota;
pub mod store;

pub use error::MonError;
pub use flags::MapFlag;
pub use history::MapHistory;
pub use incremental::{Change, Incremental};
pub use map::{ClusterMap, OsdEntry};
pub use monitor::{MonConfig, Monitor, Reply, Request};
pub use quota::{PgUsage, PoolQuota};
