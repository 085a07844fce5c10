//! One framed TCP connection: a split stream of frames with the codec's limits.
//!
//! Owns socket setup (no Nagle delay) and the framing; reconnect and resend belong to
//! [`crate::session`].

use futures::stream::{SplitSink, SplitStream};
use futures::StreamExt;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use crate::codec::FrameCodec;
use crate::frame::{Frame, Limits};

/// Write half of a framed connection.
pub type FrameSink = SplitSink<Framed<TcpStream, FrameCodec>, Frame>;
/// Read half of a framed connection.
pub type FrameStream = SplitStream<Framed<TcpStream, FrameCodec>>;

/// Frames a connected socket.
pub fn framed(stream: TcpStream, limits: Limits) -> (FrameSink, FrameStream) {
    let _ = stream.set_nodelay(true);
    Framed::new(stream, FrameCodec { limits }).split()
}
