//! Frame protection after an authenticated handshake: every frame carries a keyed MAC, and in
//! secure mode its body is encrypted too.
//!
//! Each direction of a connection has its own keys (derived in the handshake) and counts its
//! frames; a frame's counter is never sent but goes into its MAC and, in secure mode, its
//! nonce, so a frame replayed, reordered, dropped or moved to another connection fails its
//! check. The MAC is keyed BLAKE3 over the counter, the 36-byte header and every byte after it
//! (payload, its crc32c, data, its crc32c), truncated to [`TAG_BYTES`] and sent after the
//! frame. In secure mode everything after the header is encrypted with ChaCha20 first
//! (encrypt-then-MAC, with independent keys); the crc32c fields are encrypted with the rest,
//! so they reveal nothing about the plaintext, and the receiver checks them after decrypting
//! as it always does. The header (type, lengths, sequence numbers) stays readable.
//!
//! Both are streaming: a receiver hashes and decrypts a large data segment piece by piece as
//! it arrives, and a frame is handed up only after its tag matched.

use chacha20::cipher::{KeyIvInit, StreamCipher};
use chacha20::ChaCha20;
use subtle::ConstantTimeEq;

use crate::error::MsgrError;
use crate::frame::HEADER_BYTES;

/// Bytes of the tag after each protected frame.
pub const TAG_BYTES: usize = 16;

/// How frames are protected on an authenticated connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WireMode {
    /// Every frame authenticated (keyed MAC); contents readable on the wire.
    Mac,
    /// Every frame authenticated and its contents encrypted (msgr2's secure mode).
    Secure,
}

impl WireMode {
    /// Its code in the handshake.
    pub fn code(self) -> u8 {
        match self {
            WireMode::Mac => 1,
            WireMode::Secure => 2,
        }
    }

    /// The mode of a handshake code.
    pub fn from_code(code: u8) -> Option<WireMode> {
        match code {
            1 => Some(WireMode::Mac),
            2 => Some(WireMode::Secure),
            _ => None,
        }
    }
}

impl std::str::FromStr for WireMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mac" => Ok(WireMode::Mac),
            "secure" => Ok(WireMode::Secure),
            other => Err(format!("unknown wire mode {other:?} (mac or secure)")),
        }
    }
}

impl std::fmt::Display for WireMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WireMode::Mac => "mac",
            WireMode::Secure => "secure",
        })
    }
}

/// One direction's keys and frame counter.
#[derive(Clone)]
pub struct FrameKeys {
    mode: WireMode,
    mac_key: [u8; 32],
    cipher_key: [u8; 32],
    counter: u64,
}

impl FrameKeys {
    /// Keys for one direction of a connection in `mode`.
    pub fn new(mode: WireMode, keys: &cairn_auth::handshake::DirectionKeys) -> FrameKeys {
        FrameKeys {
            mode,
            mac_key: keys.mac,
            cipher_key: keys.cipher,
            counter: 0,
        }
    }

    /// The mode.
    pub fn mode(&self) -> WireMode {
        self.mode
    }

    /// Starts the next frame: its MAC and (in secure mode) its cipher.
    pub(crate) fn start(&mut self) -> FrameCrypt {
        let counter = self.counter;
        self.counter += 1;
        let mut mac = blake3::Hasher::new_keyed(&self.mac_key);
        mac.update(&counter.to_le_bytes());
        let cipher = (self.mode == WireMode::Secure).then(|| {
            let mut nonce = [0u8; 12];
            nonce[4..].copy_from_slice(&counter.to_le_bytes());
            ChaCha20::new(&self.cipher_key.into(), &nonce.into())
        });
        FrameCrypt { mac, cipher }
    }
}

/// The protection of one frame in progress, fed its bytes in wire order.
pub(crate) struct FrameCrypt {
    mac: blake3::Hasher,
    cipher: Option<ChaCha20>,
}

impl FrameCrypt {
    /// Sender: takes the header (authenticated, never encrypted).
    pub(crate) fn header(&mut self, header: &[u8]) {
        debug_assert_eq!(header.len(), HEADER_BYTES);
        self.mac.update(header);
    }

    /// Sender: encrypts `bytes` in place (secure mode) and authenticates what goes on the wire.
    pub(crate) fn seal(&mut self, bytes: &mut [u8]) {
        if let Some(c) = self.cipher.as_mut() {
            c.apply_keystream(bytes);
        }
        self.mac.update(bytes);
    }

    /// Sender: authenticates bytes sent as they are (mac mode only: secure mode never sends
    /// plaintext).
    pub(crate) fn seal_plain(&mut self, bytes: &[u8]) {
        assert!(
            self.cipher.is_none(),
            "secure mode sends nothing unencrypted"
        );
        self.mac.update(bytes);
    }

    /// Receiver: authenticates what arrived and decrypts it in place (secure mode).
    pub(crate) fn open(&mut self, bytes: &mut [u8]) {
        self.mac.update(bytes);
        if let Some(c) = self.cipher.as_mut() {
            c.apply_keystream(bytes);
        }
    }

    /// The frame's tag.
    pub(crate) fn tag(&self) -> [u8; TAG_BYTES] {
        let full = self.mac.finalize();
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full.as_bytes()[..TAG_BYTES]);
        tag
    }

    /// Receiver: checks the tag that arrived (in constant time).
    pub(crate) fn verify(&self, received: &[u8], seq: u64) -> Result<(), MsgrError> {
        if received.len() == TAG_BYTES && bool::from(self.tag().ct_eq(received)) {
            Ok(())
        } else {
            Err(MsgrError::BadTag { seq })
        }
    }
}

/// Protects a whole encoded frame in place (`wire` = header, payload, crc, data, crc) and
/// returns its tag.
pub(crate) fn seal_frame(keys: &mut FrameKeys, wire: &mut [u8]) -> [u8; TAG_BYTES] {
    let mut c = keys.start();
    let (header, body) = wire.split_at_mut(HEADER_BYTES);
    c.header(header);
    c.seal(body);
    c.tag()
}

/// Checks and opens a whole received frame in place (`wire` as [`seal_frame`] took it).
pub(crate) fn open_frame(
    keys: &mut FrameKeys,
    wire: &mut [u8],
    tag: &[u8],
    seq: u64,
) -> Result<(), MsgrError> {
    let mut c = keys.start();
    let (header, body) = wire.split_at_mut(HEADER_BYTES);
    c.header(header);
    // Check before decrypting: nothing unauthenticated is ever decrypted or parsed.
    c.mac.update(body);
    c.verify(tag, seq)?;
    if let Some(cipher) = c.cipher.as_mut() {
        cipher.apply_keystream(body);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_auth::handshake::DirectionKeys;

    fn keys(mode: WireMode) -> FrameKeys {
        FrameKeys::new(
            mode,
            &DirectionKeys {
                mac: [7; 32],
                cipher: [9; 32],
            },
        )
    }

    #[test]
    fn frames_open_once_in_order_and_any_change_is_caught() {
        for mode in [WireMode::Mac, WireMode::Secure] {
            let plain: Vec<u8> = (0..200u8).collect();
            let (mut tx, mut rx) = (keys(mode), keys(mode));
            let mut first = plain.clone();
            let tag1 = seal_frame(&mut tx, &mut first);
            let mut second = plain.clone();
            let tag2 = seal_frame(&mut tx, &mut second);
            assert_eq!(
                first[..HEADER_BYTES],
                plain[..HEADER_BYTES],
                "header in clear"
            );
            assert_eq!(
                first[HEADER_BYTES..] == plain[HEADER_BYTES..],
                mode == WireMode::Mac
            );
            assert_ne!(tag1, tag2, "the counter makes equal frames differ");
            // Reordered: the second frame where the first is expected fails.
            let mut r = rx.clone();
            assert!(open_frame(&mut r, &mut second.clone(), &tag2, 2).is_err());
            for i in [0, 40, 199] {
                let mut t = first.clone();
                t[i] ^= 1;
                assert!(
                    open_frame(&mut rx.clone(), &mut t, &tag1, 1).is_err(),
                    "byte {i}"
                );
            }
            let mut ok = first.clone();
            open_frame(&mut rx, &mut ok, &tag1, 1).unwrap();
            assert_eq!(ok, plain);
            // Replayed: the first frame again, where the second is expected, fails.
            assert!(open_frame(&mut rx.clone(), &mut first.clone(), &tag1, 1).is_err());
            let mut ok2 = second.clone();
            open_frame(&mut rx, &mut ok2, &tag2, 2).unwrap();
            assert_eq!(ok2, plain);
        }
    }

    #[test]
    fn streaming_in_pieces_matches_the_whole() {
        let plain: Vec<u8> = (0..5000u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
        let mut tx = keys(WireMode::Secure);
        let mut wire = plain.clone();
        let tag = seal_frame(&mut tx, &mut wire);
        let mut rx = keys(WireMode::Secure);
        let mut c = rx.start();
        c.header(&wire[..HEADER_BYTES]);
        let mut body = wire[HEADER_BYTES..].to_vec();
        for piece in body.chunks_mut(333) {
            c.open(piece);
        }
        c.verify(&tag, 1).unwrap();
        assert_eq!(body, plain[HEADER_BYTES..]);
    }
}
