//! The messenger's frames (fed in pieces, raw or validly sealed and then corrupted) and the
//! handshake's HELLO.

use arbitrary::Unstructured;
use bytes::{Bytes, BytesMut};
use cairn_msgr::frame::{Frame, Limits};

/// Frame size limit in the targets: small, so oversize handling is reached too.
const FUZZ_FRAME_LIMIT: u32 = 1 << 20;

/// A valid frame built from `u`: type, payload, data, and the pieces to feed it in.
fn built(u: &mut Unstructured<'_>) -> arbitrary::Result<Frame> {
    let msg_type: u16 = u.arbitrary()?;
    let payload_len = u.int_in_range(0..=u.len().min(4096))?;
    let payload = Bytes::copy_from_slice(u.bytes(payload_len)?);
    let data_len = u.int_in_range(0..=u.len())?;
    let data = Bytes::copy_from_slice(u.bytes(data_len)?);
    let mut f = Frame::with_data(msg_type, payload, data);
    f.header.seq = u.arbitrary()?;
    f.header.ack = u.arbitrary()?;
    Ok(f)
}

/// Frames: mode 0 decodes the raw bytes; mode 1 builds a valid frame, flips at most one byte
/// of its encoding, and decodes it fed in pieces. An intact frame must decode to itself, a
/// damaged one to an error or to the same frame (a flipped bit the checks do not cover).
pub fn frame(data: &[u8]) {
    let limits = Limits {
        max_payload_bytes: FUZZ_FRAME_LIMIT,
        ..Limits::default()
    };
    let (mode, rest) = crate::selector(data);
    let mut u = Unstructured::new(rest);
    let step = usize::from(u.arbitrary::<u8>().unwrap_or(0)) + 1;
    let (wire, sent) = match mode % 2 {
        0 => (u.take_rest().to_vec(), None),
        _ => {
            let Ok(f) = built(&mut u) else { return };
            let mut out = BytesMut::new();
            if f.encode(&limits, &mut out).is_err() {
                return;
            }
            let mut wire = out.to_vec();
            let flip: Option<(usize, u8)> = u.arbitrary().unwrap_or(None);
            let damaged = flip.is_some_and(|(at, x)| {
                x != 0 && !wire.is_empty() && {
                    let at = at % wire.len();
                    wire[at] ^= x;
                    true
                }
            });
            (wire, Some((f, damaged)))
        }
    };
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut failed = false;
    'feed: for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match Frame::decode(&mut buf, &limits) {
                Ok(Some(f)) => got.push(f),
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break 'feed;
                }
            }
        }
    }
    if let Some((f, damaged)) = sent {
        if !damaged {
            assert!(!failed, "an intact frame failed to decode");
            assert_eq!(got, vec![f], "an intact frame decoded to something else");
        } else if !failed && !got.is_empty() {
            assert_eq!(got.len(), 1);
        }
    }
}

/// Valid frames of a few shapes (the mode-1 inputs decode them intact).
pub fn frame_seeds() -> Vec<Vec<u8>> {
    let f = Frame::with_data(0x10, &b"header"[..], Bytes::from_static(b"some data"));
    let mut raw = BytesMut::new();
    f.encode(&Limits::default(), &mut raw)
        .expect("a small frame encodes");
    let mut seeds = vec![[&[0u8, 255][..], &raw[..]].concat()];
    seeds.push(vec![
        1, 7, 0x10, 0, 4, b'a', b'b', b'c', b'd', 2, b'x', b'y',
    ]);
    seeds
}

/// The HELLO's payload (session id, last received, incarnation, flags).
pub fn hello(data: &[u8]) {
    if let Ok((_, _, _, lossy)) = cairn_msgr::fuzzing::decode_hello(data) {
        assert_eq!(data.len(), 32, "a HELLO is 32 bytes");
        assert_eq!(
            u64::from_le_bytes(data[24..32].try_into().unwrap()) == 1,
            lossy
        );
    }
}

/// A lossy and a lossless HELLO.
pub fn hello_seeds() -> Vec<Vec<u8>> {
    [1u64, 0]
        .iter()
        .map(|flags| {
            [7u64, 3, 99, *flags]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect()
        })
        .collect()
}
