//! Who may do what in a cluster, as Ceph's cephx answers it: every daemon and client is an
//! *entity* ([`EntityName`]: `mon.`, `osd.N`, `client.NAME`) with a secret [`SecretKey`] kept
//! in a [`Keyring`] file and [`Caps`] saying what it may do. The monitor knows every entity's
//! key and checks a connecting entity against it directly; for the OSDs it issues [`Ticket`]s
//! sealed with a service secret only OSDs hold, so an OSD checks a client without knowing the
//! client's key. [`handshake`] holds the pure parts of the messenger's mutual authentication:
//! the proofs each end computes and the per-connection keys both derive.
//!
//! Pure: no sockets, no clocks (times are passed in); the only side effects are reading the
//! operating system's random source and keyring files.

// A narrowing cast in a byte format would silently write a wrong length: conversions here
// are checked (`try_from`), and this crate keeps them so.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod caps;
pub mod entity;
pub mod error;
pub mod handshake;
pub mod key;
pub mod keyring;
pub mod seal;
pub mod ticket;

pub use caps::{Caps, MonAccess, OsdAccess};
pub use entity::EntityName;
pub use error::AuthError;
pub use key::SecretKey;
pub use keyring::{Keyring, KeyringEntry};
pub use ticket::Ticket;
