//! tokio-util codec over [`Frame`]: lets a TCP stream be read and written as frames.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::error::MsgrError;
use crate::frame::{Frame, Limits};

/// Encodes and decodes frames within fixed [`Limits`].
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

impl Encoder<Frame> for FrameCodec {
    type Error = MsgrError;

    fn encode(&mut self, item: Frame, dst: &mut BytesMut) -> Result<(), MsgrError> {
        item.encode(&self.limits, dst)
    }
}
