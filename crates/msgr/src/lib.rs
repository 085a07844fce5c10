//! The messenger: the only crate that touches sockets (invariant 4).
//!
//! Messages travel as frames: a fixed little-endian header (magic, protocol version, message
//! type, flags, sequence number, payload length, header crc32c) followed by the payload and its
//! crc32c ([`frame`]). [`codec`] adapts frames to tokio streams with an explicit maximum frame
//! size; [`conn`] runs one TCP connection with many messages in flight and a bound on bytes in
//! flight (backpressure); [`session`] keeps a lossless session to a peer across reconnects by
//! resending what the peer has not acknowledged. Nothing here interprets payloads.
#![warn(missing_docs)]

pub mod codec;
pub mod conn;
pub mod error;
pub mod frame;
pub mod http;
pub mod session;

pub use error::MsgrError;
pub use frame::{Frame, FrameHeader, Limits, PROTOCOL_VERSION};
