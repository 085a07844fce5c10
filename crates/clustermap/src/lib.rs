//! The cluster map's placement layer: pools, placement groups and OSD states on top of a CRUSH
//! map, with Ceph-compatible object -> PG -> OSD mapping, upmap exceptions, spread analysis,
//! movement diffs and a balancer. Pure: no I/O, no clock, no randomness.
#![warn(missing_docs)]

pub mod analysis;
pub mod balance;
pub mod diff;
pub mod error;
pub mod exceptions;
pub mod osdmap;
pub mod pool;
pub mod shape;

pub use error::MapError;
pub use exceptions::Exceptions;
pub use osdmap::{MappingCache, OsdMap, OsdState, PgMapping};
pub use pool::{PgId, Pool};
