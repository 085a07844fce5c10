//! The cluster's shared vocabulary: the cluster map (`ClusterMap`: OSDs, pools, flags, quotas
//! and placement), its incrementals and their history, and the placement layer beneath it:
//! pools, placement groups and OSD states on top of a CRUSH map, with Ceph-compatible object ->
//! PG -> OSD mapping, upmap exceptions, spread analysis, movement diffs and a balancer. The
//! monitor changes the map; every daemon and client reads it. Pure: no I/O, no clock, no
//! randomness.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod analysis;
pub mod balance;
pub mod cluster_map;
pub mod diff;
pub mod error;
pub mod exceptions;
pub mod flags;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod history;
pub mod incremental;
pub mod osdmap;
pub mod pool;
pub mod quota;
pub mod shape;

pub use cluster_map::{ClusterMap, OsdEntry};
pub use error::MapError;
pub use exceptions::Exceptions;
pub use flags::MapFlag;
pub use history::MapHistory;
pub use incremental::{Change, Incremental};
pub use osdmap::{MappingCache, OsdMap, OsdState, PgMapping};
pub use pool::{PgId, Pool};
pub use quota::{PgUsage, PoolQuota};
