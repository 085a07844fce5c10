//! tokio-util decoder over [`Frame`]: lets a TCP stream be read as frames (writing is
//! [`crate::conn`]'s, which sends large data segments uncopied).

use bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::error::MsgrError;
use crate::frame::{Frame, Limits};

/// Decodes frames within fixed [`Limits`].
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameCodec {
    /// Limits applied to every frame.
    pub limits: Limits,
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = MsgrError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, MsgrError> {
        Frame::decode(src, &self.limits)
    }
}
