//! The OSD daemon: stores PGs' objects in a local [`cairn_store::Store`], runs every client op,
//! replica write and recovery transfer through one QoS scheduler ([`sched`]), replicates
//! primary-copy (the primary orders writes with a PG version and acknowledges only when every
//! copy of the acting set has committed, invariant 1), keeps a PG log per PG in the store, and
//! peers on every interval change: the authoritative log is chosen, missing objects are
//! recovered from the log (or the PG is copied whole when a copy is beyond it), and only then is
//! the PG active. Once a PG is active+clean without a copy this OSD still holds, that copy is
//! deleted ([`strays`]). Maps come from the monitor; sockets only through `cairn-msgr`; disks only
//! through `cairn-blockdev`.
#![warn(missing_docs)]
#![deny(clippy::cast_possible_truncation)]

pub mod admin;
pub mod ask;
pub mod auth;
pub mod cached;
pub mod capacity;
pub mod config;
mod convert;
pub mod daemon;
pub mod db_device;
pub mod error;
pub mod failstop;
pub mod fence;
pub mod fillhold;
pub mod fillwrites;
pub mod forward;
pub mod heartbeat;
pub mod history;
pub mod inflight;
pub mod metrics;
pub mod misplaced;
pub mod missing;
pub mod objects;
pub mod pacing;
pub mod past;
pub mod payload;
pub mod peering;
pub mod peers;
pub mod pgmeta;
pub mod pgs;
pub mod pgtemp;
pub mod primary;
pub mod reboot;
pub mod recovery;
pub mod remap;
pub mod repair;
pub mod replica;
pub mod repop;
pub mod resolve;
pub mod sched;
pub mod scrub;
pub mod shared;
pub mod side_device;
pub mod strays;
pub mod throttle;
pub mod transfer;
pub mod turns;
pub mod txns;
pub mod usage;
pub mod work;

pub use config::{
    OsdConfig, DEFAULT_DEEP_SCRUB_INTERVAL_S, DEFAULT_MAX_INFLIGHT_COST_MS, DEFAULT_OP_SHARDS,
    DEFAULT_RECOVERY_CHUNK_BYTES, DEFAULT_RECOVERY_CHUNK_BYTES_SSD, DEFAULT_REMAP_MIN_OBJECTS,
    DEFAULT_SCRUB_INTERVAL_S,
};
pub use daemon::OsdDaemon;
pub use error::OsdError;
