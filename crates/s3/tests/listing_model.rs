//! Property test: listing over randomly sharded index objects equals a BTreeSet model page by
//! page (prefix, delimiter, marker, page size), and following markers visits every item once.

use std::collections::BTreeSet;

use cairn_s3::backend::{Backend, MemBackend};
use cairn_s3::listing::{common_prefix, list, Item, ListQuery};
use proptest::prelude::*;

fn model(keys: &BTreeSet<String>, q: &ListQuery) -> (Vec<String>, bool) {
    let mut out: Vec<String> = Vec::new();
    for k in keys.iter().filter(|k| k.as_str() > q.marker.as_str()) {
        if !k.starts_with(&q.prefix) {
            continue;
        }
        let item = match common_prefix(k, &q.prefix, q.delimiter.as_deref()) {
            Some(cp) if cp <= q.marker.as_str() => continue,
            Some(cp) if out.last().map(String::as_str) == Some(cp) => continue,
            Some(cp) => cp.to_string(),
            None => k.clone(),
        };
        out.push(item);
    }
    // max-keys=0 answers an empty, untruncated page (a paginator must not spin on it).
    let truncated = q.max > 0 && out.len() > q.max;
    out.truncate(q.max);
    (out, truncated)
}

fn key() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop::sample::select(vec!['a', 'b', '/', 'é', '-']), 1..7)
        .prop_map(|c| c.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn listing_matches_model(
        keys in proptest::collection::btree_set(key(), 0..60),
        shards in 1usize..6,
        prefix in prop::sample::select(vec!["", "a", "a/", "b", "é/", "/"]),
        delimiter in prop::sample::select(vec![None, Some("/"), Some("a/"), Some("-")]),
        marker in prop::option::of(key()),
        max in 0usize..12,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mem = MemBackend::default();
            let names: Vec<String> = (0..shards).map(|i| format!("idx.{i}")).collect();
            for k in &keys {
                let shard = crc_fast::crc32_iscsi(k.as_bytes()) as usize % shards;
                mem.omap_set(&names[shard], &[(k.as_bytes().to_vec(), b"v".to_vec())]).await.unwrap();
            }
            let mut q = ListQuery {
                prefix: prefix.to_string(),
                delimiter: delimiter.map(str::to_string),
                marker: marker.unwrap_or_default(),
                max,
                versioned: false,
            };
            let mut seen = 0;
            loop {
                let page = list(&mem, &names, &q).await.unwrap();
                let got: Vec<String> = page.items.iter().map(|i| i.marker().to_string()).collect();
                let (want, truncated) = model(&keys, &q);
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(page.truncated, truncated);
                for i in &page.items {
                    if let Item::Object(k, v) = i {
                        prop_assert!(keys.contains(k));
                        prop_assert_eq!(v.as_slice(), b"v");
                    }
                }
                seen += got.len();
                prop_assert!(seen <= keys.len());
                if !page.truncated || max == 0 {
                    break;
                }
                q.marker = got.last().unwrap().clone();
            }
            Ok(())
        })?;
    }
}
