use super::*;
use crate::backend::MemBackend;
use crate::entry::Entry;

fn bucket(state: Versioning) -> BucketInfo {
    BucketInfo {
        versioning: state,
        ..BucketInfo::for_tests(3)
    }
}

fn object(body: &[u8], mtime_ms: i64) -> Entry {
    Entry {
        size: body.len() as u64,
        etag: crate::data::hex(body),
        mtime_ms,
        headers: Default::default(),
        loc: DataLoc::Inline,
        parts: 0,
        acl: Default::default(),
        checksum: None,
        version_id: None,
        delete_marker: false,
        null_rank: None,
        storage_class: None,
        tags: Default::default(),
        retention: None,
        legal_hold: false,
        inline: body.to_vec(),
    }
}

/// Every version of `key`, newest first: (version id, delete marker, body).
async fn versions_of(
    backend: &Arc<dyn Backend>,
    b: &BucketInfo,
    key: &str,
) -> Vec<(String, bool, Vec<u8>)> {
    let (page, _) = backend
        .omap_list(&shard_of(b, key), &[], &key_prefix(key), 1000)
        .await
        .unwrap();
    page.iter()
        .map(|(_, v)| {
            let e = decode_version(v).unwrap();
            (e.version_id.unwrap(), e.delete_marker, e.inline)
        })
        .collect()
}

async fn current(backend: &Arc<dyn Backend>, b: &BucketInfo, key: &str) -> Option<Vec<u8>> {
    buckets::get_entry(backend, b, key)
        .await
        .unwrap()
        .map(|e| e.inline)
}

#[test]
fn version_ids_rank_newest_first_and_garbage_is_refused() {
    let a = fresh_version_id();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let b = fresh_version_id();
    assert!(b < a, "a newer id sorts first");
    assert!(valid_version_id(&a) && valid_version_id(NULL_VERSION));
    for bad in [
        "",
        "nul",
        "ABCDEF0123456789abcdef01",
        "0123",
        "g123456789abcdef01234567",
    ] {
        assert!(!valid_version_id(bad), "{bad}");
    }
    let k = index_key("photos/a.jpg", &object(b"x", 5));
    let (key, place) = split_index_key(&k).unwrap();
    assert_eq!(key, "photos/a.jpg");
    assert!(place.ends_with(NULL_VERSION));
}

#[tokio::test]
async fn enabled_keeps_every_version_and_a_delete_leaves_a_marker() {
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
    let off = bucket(Versioning::Off);
    buckets::put_entry(&backend, &off, "k", &object(b"v0", 1_000))
        .await
        .unwrap();
    let b = bucket(Versioning::Enabled);
    let mut ids = Vec::new();
    for body in [b"v1".as_slice(), b"v2"] {
        let mut e = object(body, buckets::now_ms());
        let r = commit(&backend, &b, "k", &mut e, Versioning::Enabled)
            .await
            .unwrap();
        assert!(r.orphans.is_empty(), "enabled versioning removes no data");
        ids.push(e.version_id.unwrap());
    }
    assert_eq!(
        current(&backend, &b, "k").await.as_deref(),
        Some(b"v2".as_slice())
    );
    let all = versions_of(&backend, &b, "k").await;
    let bodies: Vec<&[u8]> = all.iter().map(|v| v.2.as_slice()).collect();
    assert_eq!(
        bodies,
        vec![b"v2".as_slice(), b"v1", b"v0"],
        "newest first, the old object as null"
    );
    assert_eq!(all[2].0, NULL_VERSION);

    let d = delete_current(&backend, &b, "k", Versioning::Enabled)
        .await
        .unwrap();
    assert!(d.delete_marker && d.orphans.is_empty());
    assert_eq!(
        current(&backend, &b, "k").await,
        None,
        "a marker hides the key"
    );
    assert_eq!(versions_of(&backend, &b, "k").await.len(), 4);

    // Deleting the marker by its id brings the newest version back.
    let marker = d.version_id.unwrap();
    let d = delete_version(&backend, &b, "k", &marker, None)
        .await
        .unwrap();
    assert!(d.delete_marker && d.orphans.is_empty());
    assert_eq!(
        current(&backend, &b, "k").await.as_deref(),
        Some(b"v2".as_slice())
    );

    // Deleting the current version makes the one before it current; its data is the caller's
    // to remove.
    let d = delete_version(&backend, &b, "k", &ids[1], None)
        .await
        .unwrap();
    assert!(!d.delete_marker);
    assert_eq!(d.orphans.len(), 1);
    assert_eq!(
        current(&backend, &b, "k").await.as_deref(),
        Some(b"v1".as_slice())
    );
    // An older one goes without touching the current.
    delete_version(&backend, &b, "k", NULL_VERSION, None)
        .await
        .unwrap();
    assert_eq!(
        current(&backend, &b, "k").await.as_deref(),
        Some(b"v1".as_slice())
    );
    let (_, found) = get_version(&backend, &b, "k", &ids[0])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.inline, b"v1");
    assert!(get_version(&backend, &b, "k", NULL_VERSION)
        .await
        .unwrap()
        .is_none());
    // The last version goes: nothing is current, nothing is listed, a missing id succeeds.
    delete_version(&backend, &b, "k", &ids[0], None)
        .await
        .unwrap();
    assert_eq!(current(&backend, &b, "k").await, None);
    assert!(!has_versions(&backend, &b).await.unwrap());
    let d = delete_version(&backend, &b, "k", &ids[0], None)
        .await
        .unwrap();
    assert!(d.orphans.is_empty());
    assert!(
        get_version(&backend, &b, "k", "zz").await.is_err(),
        "a malformed id is refused"
    );
}

#[tokio::test]
async fn suspended_writes_and_deletes_replace_the_null_version_only() {
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
    let b = bucket(Versioning::Enabled);
    let mut kept = object(b"kept", buckets::now_ms());
    commit(&backend, &b, "k", &mut kept, Versioning::Enabled)
        .await
        .unwrap();
    let s = bucket(Versioning::Suspended);
    let mut first = object(b"null-1", buckets::now_ms());
    let r = commit(&backend, &s, "k", &mut first, Versioning::Suspended)
        .await
        .unwrap();
    assert!(r.orphans.is_empty());
    assert_eq!(first.version_id.as_deref(), Some(NULL_VERSION));
    let mut second = object(b"null-2", buckets::now_ms() + 1);
    let r = commit(&backend, &s, "k", &mut second, Versioning::Suspended)
        .await
        .unwrap();
    assert_eq!(r.orphans.len(), 1, "the first null version's data goes");
    assert_eq!(r.orphans[0].inline, b"null-1");
    let all = versions_of(&backend, &s, "k").await;
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].0.as_str(), all[0].2.as_slice()),
        (NULL_VERSION, b"null-2".as_slice())
    );
    let d = delete_current(&backend, &s, "k", Versioning::Suspended)
        .await
        .unwrap();
    assert_eq!(d.version_id.as_deref(), Some(NULL_VERSION));
    assert_eq!(
        d.orphans.len(),
        1,
        "a null delete marker replaces the null version"
    );
    let all = versions_of(&backend, &s, "k").await;
    assert_eq!(all.len(), 2);
    assert!(all[0].1, "the marker is newest");
    assert_eq!(all[1].2, b"kept");
    assert_eq!(current(&backend, &s, "k").await, None);
}

#[tokio::test]
async fn enabling_records_every_existing_object_once() {
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::default());
    let off = bucket(Versioning::Off);
    for i in 0..300 {
        let key = format!("k{i}");
        buckets::put_entry(&backend, &off, &key, &object(key.as_bytes(), 1_000 + i))
            .await
            .unwrap();
    }
    let on = bucket(Versioning::Enabled);
    assert_eq!(keep_all_unversioned(&backend, &on).await.unwrap(), 300);
    // Again (a retried request): the same index keys, no second copy.
    keep_all_unversioned(&backend, &on).await.unwrap();
    for i in [0, 150, 299] {
        let key = format!("k{i}");
        let all = versions_of(&backend, &on, &key).await;
        assert_eq!(
            all,
            vec![(NULL_VERSION.to_string(), false, key.into_bytes())]
        );
    }
}
