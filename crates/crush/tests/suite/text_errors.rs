//! Malformed map text gets an error naming line and column, never a panic; mutated maps are
//! either parsed or rejected; our own output reads back identically.

use cairn_crush::{text, CrushError};
use proptest::prelude::*;

const EQ60: &str = include_str!("../vectors/map-eq60.txt");

fn error_at(src: &str) -> (usize, usize, String) {
    match text::parse(src) {
        Err(CrushError::Parse {
            line,
            column,
            message,
        }) => (line, column, message),
        other => panic!("expected a parse error for {src:?}, got {other:?}"),
    }
}

#[test]
fn errors_name_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("tunable bogus 1\n", 1, 1, "unknown tunable"),
        ("type 0 osd\n\ndevice x osd.0\n", 3, 8, "integer"),
        ("type 0 osd\ntype 1 host\nhost h {\n\tid 1\n}\n", 4, 5, "negative"),
        ("type 0 osd\ntype 1 host\nhost h {\n\titem osd.9\n}\n", 4, 2, "not defined"),
        ("type 0 osd\ntype 1 host\nhost h {\n\talg magic\n}\n", 4, 6, "unknown bucket algorithm"),
        ("type 0 osd\nrack r {\n}\n", 2, 1, "unknown section"),
        ("type 0 osd\ntype 1 host\nhost h {\n\tid -1\n", 4, 1, "end of input"),
        ("rule r {\n\tid 0\n\tstep take nowhere\n\tstep emit\n}\n", 3, 12, "not defined"),
        ("rule r {\n\tid 0\n\tstep chooseleaf sideways 0 type host\n}\n", 3, 18, "firstn or indep"),
        ("device 0 osd.0\ndevice 0 osd.1\n", 2, 10, "defined twice"),
        ("type 0 osd\ntype 1 host\nhost h {\n\tid -1\n\titem osd.0 weight -1\n}\ndevice 0 osd.0\n", 5, 20, "non-negative"),
    ];
    for &(src, line, column, needle) in cases {
        let (l, c, m) = error_at(src);
        assert_eq!((l, c), (line, column), "{src:?}: {m}");
        assert!(
            m.contains(needle),
            "{src:?}: message {m:?} lacks {needle:?}"
        );
    }
}

#[test]
fn bucket_cycles_and_bad_positions_are_rejected() {
    let cyclic =
        "type 0 osd\ntype 1 host\nhost a {\n\tid -1\n\titem b\n}\nhost b {\n\tid -2\n\titem a\n}\n";
    assert!(text::parse(cyclic).is_err());
    let bad_pos = "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost a {\n\tid -1\n\talg tree\n\titem osd.0 pos 5\n}\n";
    assert!(text::parse(bad_pos).is_err());
}

#[test]
fn written_maps_read_back_identically() {
    let map = text::parse(EQ60).unwrap();
    let again = text::parse(&text::write(&map)).unwrap();
    assert_eq!(map, again);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn mutated_maps_never_panic(edits in prop::collection::vec((0usize..8000, any::<u8>(), 0u8..3), 1..6)) {
        let mut bytes = EQ60.as_bytes().to_vec();
        for (pos, byte, kind) in edits {
            if bytes.is_empty() { break; }
            let pos = pos % bytes.len();
            match kind {
                0 => bytes[pos] = byte,
                1 => { bytes.remove(pos); }
                _ => bytes.truncate(pos),
            }
        }
        let src = String::from_utf8_lossy(&bytes);
        if let Ok(map) = text::parse(&src) {
            // Anything accepted must also map without panicking and write back.
            let reweights = map.default_reweights();
            for rule in map.rules.keys() {
                for x in 0..20 {
                    let _ = map.map_x(*rule, x, 3, &reweights);
                }
            }
            let _ = text::parse(&text::write(&map));
        }
    }

    #[test]
    fn random_text_never_panics(src in "[a-z0-9{}\\[\\] \\n#.~-]{0,400}") {
        let _ = text::parse(&src);
    }
}
