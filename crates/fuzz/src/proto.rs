//! The wire messages between clients and OSDs and between OSDs (MessagePack headers with
//! inline data), key/value pair lists and object images.

use std::fmt::Debug;

use bytes::Bytes;
use cairn_pg::{Eversion, LogEntry, OpKind as LogOp};
use cairn_proto::admin::{AdminReply, AdminRequest};
use cairn_proto::image::ObjectImage;
use cairn_proto::pairs::{decode_pairs, encode_pairs};
use cairn_proto::peer::{PeerAnswer, PeerBody, PeerReply, PeerRequest, Urgency};
use cairn_proto::{
    decode, decode_with_data, encode, OpHeader, OpKind, OpResult, RepOpHeader, ReplyHeader,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Decodes a `T` message; one that decodes must encode and decode again to itself.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(payload: &Bytes) {
    if let Ok((header, data)) = decode::<T>(payload) {
        let again = encode(&header, &data);
        let (h2, d2) = decode::<T>(&again).expect("a re-encoded message decodes");
        assert_eq!(header, h2, "a message changed on its way through encode");
        assert_eq!(data, d2);
    }
}

/// One message; the first byte picks its type.
pub fn messages(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let payload = Bytes::copy_from_slice(rest);
    match which % 8 {
        0 => round_trip::<OpHeader>(&payload),
        1 => round_trip::<ReplyHeader>(&payload),
        2 => round_trip::<RepOpHeader>(&payload),
        3 => round_trip::<PeerRequest>(&payload),
        4 => round_trip::<PeerReply>(&payload),
        5 => round_trip::<AdminRequest>(&payload),
        6 => round_trip::<AdminReply>(&payload),
        _ => {
            let segment = Bytes::from_static(b"segment");
            let crc = 0x1234_5678;
            if let Ok((_, d, c)) = decode_with_data::<OpHeader>(&payload, &segment, crc) {
                assert!(d == segment && c == crc || d.len() <= payload.len());
            }
        }
    }
}

/// One valid message of each type, behind its selector byte.
pub fn message_seeds() -> Vec<Vec<u8>> {
    let entry = LogEntry {
        version: Eversion::new(3, 7),
        object: "obj".into(),
        op: LogOp::Modify,
        prior: Eversion::new(3, 6),
        reqid: None,
    };
    let op = OpHeader {
        tid: 1,
        epoch: 3,
        pool: 1,
        pg_seed: 5,
        object: "obj".into(),
        kind: OpKind::Write { offset: 4096 },
        data_crc: 0,
        reqid: Some(cairn_proto::ReqId { client: 9, seq: 1 }),
        assert_version: None,
        background: false,
        client: 9,
        instance: 9,
        full_force: false,
    };
    let rep = RepOpHeader {
        tid: 2,
        epoch: 3,
        pool: 1,
        pg_seed: 5,
        object: "obj".into(),
        kind: OpKind::WriteFull,
        entry,
        data_crc: 0,
        background: false,
        client: 9,
        fill: 0,
    };
    let peer = PeerRequest {
        tid: 4,
        from: 1,
        epoch: 3,
        pool: 1,
        pg_seed: 5,
        body: PeerBody::Query,
        urgency: Urgency::Blocking,
        fill: 0,
    };
    let answer = PeerReply {
        tid: 4,
        answer: Ok(PeerAnswer::Names {
            names: vec!["a".into(), "b".into()],
            more: true,
        }),
    };
    let messages = [
        encode(&op, b"data"),
        encode(&ReplyHeader::bare(1, 3, OpResult::NotFound), b""),
        encode(&rep, b"data"),
        encode(&peer, b""),
        encode(&answer, b""),
        encode(
            &AdminRequest {
                tid: 5,
                args: vec!["df".into()],
            },
            b"",
        ),
        encode(
            &AdminReply {
                tid: 5,
                result: Err("no".into()),
            },
            b"",
        ),
        encode(&op, b""),
    ];
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| [&[u8::try_from(i).expect("a few seed messages")][..], &m[..]].concat())
        .collect()
}

/// Key/value pair lists (omap batches, xattr lists) and object images (recovery's unit).
pub fn pairs_and_images(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    if which % 2 == 0 {
        if let Ok(pairs) = decode_pairs(rest) {
            assert_eq!(encode_pairs(&pairs), rest, "pairs re-encode to their bytes");
        }
    } else if let Ok(image) = ObjectImage::decode(&Bytes::copy_from_slice(rest)) {
        let again = ObjectImage::decode(&image.encode()).expect("a re-encoded image decodes");
        assert_eq!(image, again);
    }
}

/// A pair list and an object image.
pub fn pairs_seeds() -> Vec<Vec<u8>> {
    let pairs = encode_pairs(&[(b"k1".to_vec(), b"v1".to_vec()), (b"k2".to_vec(), vec![])]);
    let image = ObjectImage {
        data: Bytes::from_static(b"bytes"),
        xattrs: vec![("attr".into(), b"x".to_vec())],
        omap: vec![(b"key".to_vec(), b"value".to_vec())],
    };
    vec![
        [&[0u8][..], &pairs[..]].concat(),
        [&[1u8][..], &image.encode()[..]].concat(),
    ]
}
