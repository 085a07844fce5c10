//! The store's on-disk records: onodes, extents and the superblock (each sealed with a
//! version byte and a crc32c), and write-ahead log records and their checkpoint marker.

use cairn_store::codec::{seal, Extent, Onode, Superblock};
use cairn_store::fuzzing::{decode_wal_marker, decode_wal_record, seal_wal_record};

/// One record; the first byte picks its kind and whether the bytes are sealed first (so they
/// reach the parser behind the checksum). A record that decodes must encode and decode to
/// itself.
pub fn codec(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let bytes = match which & 1 {
        0 => rest.to_vec(),
        _ => seal(rest),
    };
    match (which >> 1) % 3 {
        0 => {
            if let Ok(o) = Onode::decode(&bytes) {
                assert_eq!(Onode::decode(&o.encode()).expect("re-encoded onode"), o);
            }
        }
        1 => {
            if let Ok(e) = Extent::decode(77, &bytes) {
                assert_eq!(
                    Extent::decode(77, &e.encode()).expect("re-encoded extent"),
                    e
                );
            }
        }
        _ => {
            let mut sb = Superblock::encode(&Superblock {
                uuid: 1,
                block_bytes: 4096,
                device_bytes: 1 << 30,
                wal_blocks: 64,
            });
            if which & 1 == 1 {
                sb.truncate(8);
                sb.extend_from_slice(&bytes);
            } else {
                sb = bytes;
            }
            if let Ok(s) = Superblock::decode(&sb) {
                assert_eq!(
                    Superblock::decode(&s.encode()).expect("re-encoded superblock"),
                    s
                );
            }
        }
    }
}

/// One of each record kind, sealed and raw.
pub fn codec_seeds() -> Vec<Vec<u8>> {
    let extent = Extent {
        lblock: 77,
        pblock: 9,
        crcs: vec![1, 2, 3],
    };
    let onode = Onode::default();
    let sb = Superblock {
        uuid: 5,
        block_bytes: 4096,
        device_bytes: 1 << 28,
        wal_blocks: 16,
    }
    .encode();
    vec![
        [&[0u8][..], &onode.encode()[..]].concat(),
        [&[2u8][..], &extent.encode()[..]].concat(),
        [&[4u8][..], &sb[..]].concat(),
        [&[5u8][..], &sb[9..sb.len() - 4]].concat(),
    ]
}

/// A WAL record: raw (first byte even) or its bytes as a record's body behind a valid header
/// and checksum; or (first byte 255) a checkpoint marker.
pub fn wal(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    if which == 255 {
        let _ = decode_wal_marker(rest);
        return;
    }
    let bytes = match which % 2 {
        0 => rest.to_vec(),
        _ => seal_wal_record(3, u32::from(which >> 1) + 1, rest),
    };
    let _ = decode_wal_record(&bytes);
}

/// A record with one change in each table and a run, behind its header.
pub fn wal_seeds() -> Vec<Vec<u8>> {
    let mut body = Vec::new();
    let put = |out: &mut Vec<u8>, b: &[u8]| {
        let len = u32::try_from(b.len()).expect("a small seed value");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(b);
    };
    for table in 0..7u8 {
        body.extend_from_slice(&1u32.to_le_bytes());
        let key: Vec<u8> = if table == 6 {
            42u64.to_le_bytes().to_vec()
        } else {
            format!("key{table}").into_bytes()
        };
        put(&mut body, &key);
        body.push(1);
        put(&mut body, b"value");
    }
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&100u64.to_le_bytes());
    body.extend_from_slice(&2u64.to_le_bytes());
    vec![[&[1u8][..], &body[..]].concat()]
}
