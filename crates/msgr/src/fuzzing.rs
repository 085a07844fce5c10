//! Internal decoders exposed to the fuzz targets (`crates/fuzz`), behind the `fuzzing` feature.

use bytes::Bytes;

use crate::error::MsgrError;
use crate::frame::Frame;
use crate::session::MSG_HELLO;

/// Decodes a HELLO frame's payload as the handshake does: `(session id, last received,
/// incarnation, lossy)`, or the error that closes the connection.
pub fn decode_hello(payload: &[u8]) -> Result<(u64, u64, u64, bool), MsgrError> {
    let frame = Frame::new(MSG_HELLO, Bytes::copy_from_slice(payload));
    crate::session::parse_hello(&frame).map(|h| {
        (
            h.id,
            h.last_received,
            h.incarnation,
            h.policy == crate::session::Policy::Lossy,
        )
    })
}
