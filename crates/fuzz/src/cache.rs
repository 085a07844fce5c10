//! The cache device's metadata: superblock slots and line entries, each behind a magic and a
//! crc32c.

use cairn_cache::layout::{
    decode_entry, encode_entry, Decoded, Entry, SbState, Superblock, SB_SLOT_BYTES,
};

/// A superblock slot encoding.
fn template() -> Vec<u8> {
    Superblock {
        seq: 4,
        instance_id: 0xcafe,
        line_bytes: 65536,
        lines: 1024,
        core_size_bytes: 1 << 30,
        state: SbState::Running,
        config_toml: "mode = \"wb\"\n".into(),
        ioclass_csv: "IO class id,IO class name\n0,unclassified\n".into(),
    }
    .encode()
    .expect("the template fits its slot")
}

/// A superblock slot: raw (first byte even), or the fuzzer's bytes laid over a valid slot
/// after its magic with the checksum made right. One that decodes must round-trip.
pub fn superblock(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let slot = match which % 2 {
        0 => rest.to_vec(),
        _ => {
            let mut b = template();
            let room = b.len() - 12;
            let n = rest.len().min(room);
            b[8..8 + n].copy_from_slice(&rest[..n]);
            let end = b.len() - 4;
            let crc = crc_of(&b[..end]);
            b[end..].copy_from_slice(&crc.to_le_bytes());
            b
        }
    };
    if let Ok(sb) = Superblock::decode(&slot) {
        let again = Superblock::decode(&sb.encode().expect("a decoded superblock fits"));
        assert_eq!(again.expect("re-encoded superblock"), sb);
    }
}

/// The template, raw and as the bytes after its magic.
pub fn superblock_seeds() -> Vec<Vec<u8>> {
    let t = template();
    assert_eq!(t.len() as u64, SB_SLOT_BYTES);
    let used = t
        .iter()
        .rposition(|&b| b != 0)
        .unwrap_or(0)
        .min(t.len() - 4);
    vec![
        [&[0u8][..], &t[..]].concat(),
        [&[1u8][..], &t[8..used.max(8)]].concat(),
    ]
}

/// One line entry: raw (first byte even), or with its checksum made right. A decoded entry
/// must encode to a record that decodes to it.
pub fn entry(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let mut b = rest.to_vec();
    if which % 2 == 1 && b.len() >= 32 {
        b.truncate(32);
        let crc = crc_of(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
    }
    if let Decoded::Line(e) = decode_entry(&b, 0xcafe) {
        let again = encode_entry(&e, 0xcafe, 1);
        assert_eq!(decode_entry(&again, 0xcafe), Decoded::Line(e));
    }
}

/// A valid entry and one of a line holding nothing.
pub fn entry_seeds() -> Vec<Vec<u8>> {
    let e = Entry {
        core_line: 17,
        valid: 0xff,
        dirty: 0x0f,
        class: 1,
    };
    vec![
        [&[0u8][..], &encode_entry(&e, 0xcafe, 3)[..]].concat(),
        [&[1u8][..], &encode_entry(&Entry::INVALID, 0xcafe, 4)[..]].concat(),
    ]
}

/// crc32c, as the cache's formats use it.
fn crc_of(b: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(b)
}
