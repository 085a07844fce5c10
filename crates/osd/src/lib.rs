//! The OSD daemon: stores PGs' objects in a local [`cairn_store::Store`], runs every client op
//! and every replica write through one QoS scheduler ([`sched`]), and replicates primary-copy:
//! the primary applies a write durably, forwards it to the rest of the acting set and
//! acknowledges the client only when every copy has committed (invariant 1). Maps come from the
//! monitor; sockets only through `cairn-msgr`; disks only through `cairn-blockdev`.
#![warn(missing_docs)]

pub mod daemon;
pub mod error;
pub mod sched;

pub use daemon::{OsdConfig, OsdDaemon};
pub use error::OsdError;
