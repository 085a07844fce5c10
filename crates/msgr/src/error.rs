//! Typed errors of the messenger.

use thiserror::Error;

/// Everything that can go wrong encoding, decoding or moving frames.
#[derive(Debug, Error)]
pub enum MsgrError {
    /// The stream does not start with cairn's magic: not a cairn peer, or garbage.
    #[error("bad magic {found:#010x}: not a cairn messenger stream")]
    BadMagic {
        /// What was read instead.
        found: u32,
    },
    /// The peer speaks a protocol version we do not.
    #[error("unsupported protocol version {found} (this side speaks {supported})")]
    UnsupportedVersion {
        /// Version in the frame.
        found: u8,
        /// Version we speak.
        supported: u8,
    },
    /// The header's checksum does not match its contents.
    #[error("frame header checksum mismatch")]
    HeaderChecksum,
    /// The payload's checksum does not match: corrupted in transit.
    #[error("payload checksum mismatch on message seq {seq}")]
    PayloadChecksum {
        /// Sequence number of the damaged frame.
        seq: u64,
    },
    /// A protected frame's tag does not match: altered, replayed, reordered, or from another
    /// connection.
    #[error("frame authentication failed on message seq {seq}")]
    BadTag {
        /// Sequence number in the frame's (unverified) header.
        seq: u64,
    },
    /// The peer refused our authentication, or we refused the peer's; the text says why.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// A frame announces (or a caller tries to send) more than the configured limit.
    #[error("frame of {len_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge {
        /// Payload length.
        len_bytes: u64,
        /// Configured maximum.
        limit_bytes: u64,
    },
    /// The connection or session is closed.
    #[error("connection closed")]
    Closed,
    /// A send that may not wait found the session's window full: the peer has not taken
    /// what it was sent (it is slow, stalled or gone).
    #[error("the session's send window is full ({held_bytes} bytes unacknowledged)")]
    Busy {
        /// Bytes queued or sent and not yet acknowledged on the session.
        held_bytes: u64,
    },
    /// Waiting exceeded the caller's deadline.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// An operating-system I/O error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl MsgrError {
    /// A [`MsgrError::Timeout`] after waiting `waited` (in whole milliseconds, saturating).
    pub fn timed_out(waited: std::time::Duration) -> Self {
        MsgrError::Timeout(cairn_convert::millis(waited))
    }

    /// Whether a received frame failed its integrity check (its tag, or a checksum): altered on
    /// the way, replayed, reordered, or forged. Worth an operator's attention, unlike a
    /// connection that merely closed.
    pub fn is_integrity_failure(&self) -> bool {
        matches!(
            self,
            MsgrError::BadTag { .. }
                | MsgrError::PayloadChecksum { .. }
                | MsgrError::HeaderChecksum
                | MsgrError::BadMagic { .. }
        )
    }
}
