//! The messenger: the only crate that touches sockets (invariant 4).
//!
//! Messages travel as frames: a fixed little-endian header (magic, protocol version, message
//! type, flags, sequence number, segment lengths, header crc32c) followed by a payload and a data
//! segment, each with its crc32c ([`frame`]). [`conn`] runs one TCP connection: a reader that
//! reads large data segments into direct-I/O-aligned buffers of their own, and a writer task that
//! sends them from their own buffers, with many messages in flight; [`session`] keeps a lossless
//! session to a peer across reconnects by resending what the peer has not acknowledged, with a
//! bound on bytes in flight (backpressure). Nothing here interprets payloads.
#![deny(clippy::cast_possible_truncation)]
#![warn(missing_docs)]

pub mod bench;
pub mod blockcrc;
pub mod bufs;
pub mod conn;
pub mod error;
pub mod frame;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod handshake;
pub mod http;
pub mod protect;
pub mod session;
pub mod transport;

pub use error::MsgrError;
pub use frame::{Frame, FrameHeader, Limits, PROTOCOL_VERSION};
