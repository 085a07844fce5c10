//! The monitor's encodings: full maps and incrementals (a checksummed envelope around JSON),
//! applying an incremental to a map, and the monitor's request and reply messages.

use cairn_clustermap::fuzzing::envelope;
use cairn_clustermap::Pool;
use cairn_clustermap::{Change, ClusterMap, Incremental, OsdEntry};
use cairn_proto::mon::{from_payload, to_payload, MonReply, MonRequest};

/// A map of three OSDs and one pool, two epochs past a new map's (built once).
pub fn sample_map() -> ClusterMap {
    static MAP: std::sync::OnceLock<ClusterMap> = std::sync::OnceLock::new();
    MAP.get_or_init(build_sample_map).clone()
}

fn build_sample_map() -> ClusterMap {
    let mut map = ClusterMap::new("fuzz-fsid").expect("an empty map");
    let osds = (0..3)
        .map(|id| Change::AddOsd {
            entry: OsdEntry::booted(
                id,
                format!("uuid-{id}"),
                format!("host{id}"),
                format!("127.0.0.1:{}", 6800 + id),
            ),
            crush_weight: 0x10000,
        })
        .collect();
    let pool = Pool::replicated(1, "data", 3, 8, 0).expect("a valid pool");
    for changes in [osds, vec![Change::CreatePool(pool)]] {
        let epoch = map.epoch + 1;
        map.apply(&Incremental { epoch, changes })
            .expect("the sample's incrementals apply");
    }
    map
}

/// The input as an encoded map, and (first byte odd) wrapped in a valid envelope first. A map
/// that decodes must encode and decode to the same map.
pub fn map(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let bytes = match which % 2 {
        0 => rest.to_vec(),
        _ => envelope(rest),
    };
    if let Ok(m) = ClusterMap::decode(&bytes) {
        let again = ClusterMap::decode(&m.encode()).expect("a re-encoded map decodes");
        assert_eq!(again.epoch, m.epoch);
        assert_eq!(again.osds, m.osds);
    }
}

/// The sample map, raw and as the JSON inside its envelope.
pub fn map_seeds() -> Vec<Vec<u8>> {
    let encoded = sample_map().encode();
    vec![
        [&[0u8][..], &encoded[..]].concat(),
        [&[1u8][..], &encoded[14..]].concat(),
    ]
}

/// The input as an encoded incremental (first byte odd: wrapped in a valid envelope), applied
/// to the sample map whatever its epoch says: it must apply or fail, never panic.
pub fn incremental(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    let bytes = match which % 2 {
        0 => rest.to_vec(),
        _ => envelope(rest),
    };
    if let Ok(mut inc) = Incremental::decode(&bytes) {
        let mut map = sample_map();
        inc.epoch = map.epoch + 1;
        if map.apply(&inc).is_ok() {
            assert_eq!(map.epoch, inc.epoch);
            let again = ClusterMap::decode(&map.encode()).expect("an applied map encodes");
            assert_eq!(again.epoch, map.epoch);
        }
    }
}

/// Incrementals marking an OSD down and out-weighted, and creating a pool.
pub fn incremental_seeds() -> Vec<Vec<u8>> {
    let incs = [
        Incremental {
            epoch: 3,
            changes: vec![
                Change::Down { id: 1, at_ms: 5 },
                Change::Reweight {
                    id: 2,
                    reweight: 0,
                    auto: false,
                },
            ],
        },
        Incremental {
            epoch: 3,
            changes: vec![Change::CreatePool(
                Pool::replicated(2, "more", 2, 16, 0).expect("a valid pool"),
            )],
        },
    ];
    incs.iter()
        .flat_map(|i| {
            let e = i.encode();
            [
                [&[0u8][..], &e[..]].concat(),
                [&[1u8][..], &e[14..]].concat(),
            ]
        })
        .collect()
}

/// The monitor's request and reply messages (JSON); one that decodes must round-trip.
pub fn messages(data: &[u8]) {
    let (which, rest) = crate::selector(data);
    if which % 2 == 0 {
        if let Ok(r) = from_payload::<MonRequest>(rest) {
            let again: MonRequest = from_payload(&to_payload(&r)).expect("re-encoded decodes");
            assert_eq!(again, r);
        }
    } else if let Ok(r) = from_payload::<MonReply>(rest) {
        let again: MonReply = from_payload(&to_payload(&r)).expect("re-encoded decodes");
        assert_eq!(again, r);
    }
}

/// A subscription request and a reply.
pub fn message_seeds() -> Vec<Vec<u8>> {
    vec![
        [
            &[0u8][..],
            br#"{"tid":3,"body":{"Subscribe":{"have_epoch":7}}}"#,
        ]
        .concat(),
        [
            &[1u8][..],
            br#"{"tid":3,"epoch":9,"osd_id":null,"error":"no such pool"}"#,
        ]
        .concat(),
    ]
}
