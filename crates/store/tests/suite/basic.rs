//! Functional tests of the store: every operation, limits, listing, stats, remount, fatal errors.

use crate::common;

use cairn_blockdev::{FaultRule, IoKind, MemDevice};
use cairn_store::{DataCrcs, KvLocation, Store, StoreError, Transaction};
use common::gated::GatedDevice;
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

async fn rig() -> Rig {
    Rig::mount(&fresh_images().await, cfg()).await.unwrap()
}

/// Cuts power to `r` (unflushed device writes and unsynced KV writes lost) and mounts what
/// survived with the default test configuration.
async fn power_cut_and_mount(r: Rig) -> Rig {
    let img = r
        .crash(
            cairn_blockdev::PowerLossMode::DropUnflushed,
            cairn_store::KvLossMode::DropUnsynced,
        )
        .await;
    Rig::mount(&img, cfg()).await.unwrap()
}

async fn apply(s: &Store, m: &mut Model, t: &Transaction) {
    s.queue_transaction(t).await.unwrap();
    *m = model_apply(m, t).unwrap();
    assert_eq!(&dump(s).await, m);
}

#[tokio::test]
async fn every_operation_matches_the_model() {
    let r = rig().await;
    let s = r.store();
    let mut m = Model::new();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, 10_000))
        .setattr("c", "a", "x", b"1")
        .omap_set("c", "a", b"k1", b"v1");
    apply(s, &mut m, &t).await;
    let mut t = Transaction::new();
    t.write("c", "a", 100, &pattern(2, 50));
    apply(s, &mut m, &t).await;
    let mut t = Transaction::new();
    t.write("c", "a", 4096, &pattern(3, 8192))
        .truncate("c", "a", 9000);
    apply(s, &mut m, &t).await;
    let mut t = Transaction::new();
    t.zero("c", "a", 10, 5000).truncate("c", "a", 20_000);
    apply(s, &mut m, &t).await;
    let mut t = Transaction::new();
    t.clone_object("c", "a", "b")
        .omap_set("c", "b", b"k2", b"v2")
        .rename("c", "a", "z");
    apply(s, &mut m, &t).await;
    let mut t = Transaction::new();
    t.omap_remove("c", "b", b"k1")
        .push(cairn_store::Op::RmAttr {
            coll: "c".into(),
            obj: "b".into(),
            name: "x".into(),
        });
    apply(s, &mut m, &t).await;
    let mut t = Transaction::new();
    t.remove("c", "z").write("c", "y", 3 << 20, b"tail");
    apply(s, &mut m, &t).await;
    assert_eq!(s.read("c", "y", 0, 10).await.unwrap(), vec![0u8; 10]);
    assert_eq!(
        s.read("c", "y", (3 << 20) + 2, 100).await.unwrap(),
        b"il".to_vec()
    );
    assert_eq!(
        s.getattr("c", "b", "x").await.unwrap_err().to_string(),
        StoreError::NoSuchAttr("x".into()).to_string()
    );
    assert!(s.fsck(true).await.unwrap().is_clean());
}

#[tokio::test]
async fn reads_are_bounded() {
    let img = fresh_images().await;
    let small = cairn_store::StoreConfig {
        max_read_bytes: 8192,
        ..cfg()
    };
    let r = Rig::mount(&img, small).await.unwrap();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, 20_000));
    r.store().queue_transaction(&t).await.unwrap();
    assert!(matches!(
        r.store().read("c", "a", 0, u64::MAX).await,
        Err(StoreError::Limit(_))
    ));
    assert_eq!(
        r.store().read("c", "a", 12_000, 8192).await.unwrap(),
        pattern(1, 20_000)[12_000..].to_vec()
    );
    assert_eq!(
        r.store().read("c", "a", 30_000, 10).await.unwrap(),
        Vec::<u8>::new()
    );
}

#[tokio::test]
async fn failed_transactions_change_nothing() {
    let r = rig().await;
    let s = r.store();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, 20_000));
    s.queue_transaction(&t).await.unwrap();
    let before = dump(s).await;
    let stats_before = s.stats().await;
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(9, 30_000))
        .remove("c", "missing");
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::NoSuchObject { .. })
    ));
    let mut t = Transaction::new();
    t.write("nope", "a", 0, b"x");
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::NoSuchCollection(_))
    ));
    let mut t = Transaction::new();
    t.create_collection("c");
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::CollectionExists(_))
    ));
    let mut t = Transaction::new();
    t.write("c", "", 0, b"x");
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::Limit(_))
    ));
    let mut t = Transaction::new();
    t.write("c", "big", 0, &vec![0u8; 8 << 20]);
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::NoSpace { .. })
    ));
    assert_eq!(dump(s).await, before);
    assert_eq!(s.stats().await.free_bytes, stats_before.free_bytes);
    assert!(s.fsck(true).await.unwrap().is_clean());
}

#[tokio::test]
async fn big_writes_are_written_once_and_small_ones_are_deferred() {
    let r = rig().await;
    let s = r.store();
    let before = s.stats().await;
    let mut t = Transaction::new();
    t.write("c", "big", 0, &pattern(1, 1 << 20));
    s.queue_transaction(&t).await.unwrap();
    let after = s.stats().await;
    let data_written =
        |st: &cairn_store::StoreStats| st.device_bytes_written - st.wal_bytes_written;
    assert_eq!(
        data_written(&after) - data_written(&before),
        1 << 20,
        "one write of the data, no journal"
    );
    assert_eq!(
        after.wal_bytes_written - before.wal_bytes_written,
        4096,
        "plus one block of metadata in the log"
    );
    assert_eq!(after.wal_records - before.wal_records, 1);
    assert_eq!(after.kv_syncs, before.kv_syncs, "no KV sync to commit");
    assert_eq!(after.device_flushes - before.device_flushes, 1, "one flush");
    assert_eq!(after.deferred_pending_bytes, 0);
    let mut t = Transaction::new();
    t.write("c", "big", 10, b"hello");
    s.queue_transaction(&t).await.unwrap();
    let small = s.stats().await;
    assert_eq!(
        data_written(&small),
        data_written(&after),
        "small overwrite goes to the log first, not to its block"
    );
    assert_eq!(small.deferred_pending_bytes, 4096);
    let mut expected = pattern(1, 1 << 20);
    expected[10..15].copy_from_slice(b"hello");
    assert_eq!(
        s.read("c", "big", 8, 9).await.unwrap(),
        expected[8..17].to_vec()
    );
    s.sync().await.unwrap();
    let applied = s.stats().await;
    assert_eq!(applied.deferred_pending_bytes, 0);
    assert_eq!(data_written(&applied) - data_written(&small), 4096);
    assert!(s.fsck(true).await.unwrap().is_clean());
    let st = s.stats().await;
    assert_eq!(st.objects, 1);
    assert_eq!(st.stored_bytes, 1 << 20);
    assert_eq!(st.allocated_bytes, 1 << 20);
}

#[tokio::test]
async fn listing_is_ordered_and_paged() {
    let r = rig().await;
    let s = r.store();
    let mut t = Transaction::new();
    t.create_collection("d");
    for i in (0..50).rev() {
        t.push(cairn_store::Op::Touch {
            coll: "c".into(),
            obj: format!("obj{i:03}"),
        });
    }
    t.push(cairn_store::Op::Touch {
        coll: "d".into(),
        obj: "other".into(),
    });
    s.queue_transaction(&t).await.unwrap();
    let first = s.list_objects("c", None, 20).await.unwrap();
    assert_eq!(first.len(), 20);
    assert_eq!(first[0], "obj000");
    let rest = s
        .list_objects("c", Some(first.last().unwrap()), 1000)
        .await
        .unwrap();
    assert_eq!(rest.len(), 30);
    assert_eq!(rest[0], "obj020");
    assert_eq!(
        s.list_objects("d", None, 10).await.unwrap(),
        vec!["other".to_string()]
    );
    assert_eq!(
        s.list_collections().await.unwrap(),
        vec!["c".to_string(), "d".to_string()]
    );
    let mut t = Transaction::new();
    t.push(cairn_store::Op::RemoveCollection { coll: "d".into() });
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::CollectionNotEmpty(_))
    ));
    assert!(s.list_objects("c", None, 1 << 30).await.is_err());
}

/// A sized listing pages as the plain one and gives each object's logical size as `stat`
/// does: before and after a remount (KV and log), after a truncate and an extension.
#[tokio::test]
async fn a_sized_listing_gives_each_objects_size() {
    let r = rig().await;
    let s = r.store();
    let mut t = Transaction::new();
    for i in 0..30u64 {
        t.write(
            "c",
            &format!("o{i:02}"),
            0,
            &vec![i as u8; (i * 1000) as usize],
        );
    }
    s.queue_transaction(&t).await.unwrap();
    let mut t = Transaction::new();
    t.truncate("c", "o29", 7);
    t.write("c", "o01", 1 << 20, b"far");
    s.queue_transaction(&t).await.unwrap();
    let want = |i: u64| match i {
        29 => 7,
        1 => (1 << 20) + 3,
        i => i * 1000,
    };
    let check = |listed: Vec<(String, u64)>| {
        let names: Vec<String> = (0..30).map(|i| format!("o{i:02}")).collect();
        assert_eq!(
            listed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            names
        );
        for (i, (_, size)) in listed.iter().enumerate() {
            assert_eq!(*size, want(i as u64), "o{i:02}");
        }
    };
    let mut listed = s.list_objects_sized("c", None, 12).await.unwrap();
    assert_eq!(listed.len(), 12);
    let rest = s
        .list_objects_sized("c", Some(&listed.last().unwrap().0), 100)
        .await
        .unwrap();
    listed.extend(rest);
    check(listed);
    let mut hinted = 0;
    for (name, size) in s.list_objects_sized("c", None, 30).await.unwrap() {
        assert_eq!(s.stat("c", &name).await.unwrap().size_bytes, size);
        if let Some(hint) = s.size_hint("c", &name) {
            assert_eq!(hint, size, "{name}'s size from the onode cache");
            hinted += 1;
        }
    }
    assert!(
        hinted > 0,
        "objects just committed and read are in the onode cache"
    );
    assert_eq!(s.size_hint("c", "absent"), None);
    let r = power_cut_and_mount(r).await;
    check(r.store().list_objects_sized("c", None, 30).await.unwrap());
    assert!(r
        .store()
        .list_objects_sized("c", None, 1 << 30)
        .await
        .is_err());
    assert!(matches!(
        r.store().list_objects_sized("nope", None, 10).await,
        Err(StoreError::NoSuchCollection(_))
    ));
    let total: u64 = (0..30).map(want).sum();
    assert_eq!(
        r.store().collection_usage("c").await.unwrap(),
        cairn_store::CollectionUsage {
            objects: 30,
            bytes: total
        },
        "the usage counted again at mount"
    );
    assert!(matches!(
        r.store().collection_usage("nope").await,
        Err(StoreError::NoSuchCollection(_))
    ));
}

#[tokio::test]
async fn remount_keeps_everything_and_replays_deferred_writes() {
    let img = fresh_images().await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let mut m = Model::new();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, 20_480))
        .write("c", "a", 5, b"xyz")
        .setattr("c", "a", "n", b"v");
    r.store().queue_transaction(&t).await.unwrap();
    m = model_apply(&m, &t).unwrap();
    assert_eq!(
        r.store().stats().await.deferred_pending_bytes,
        0,
        "a block written in the same transaction is not deferred"
    );
    let mut t = Transaction::new();
    t.write("c", "a", 4100, b"deferred");
    r.store().queue_transaction(&t).await.unwrap();
    m = model_apply(&m, &t).unwrap();
    assert!(r.store().stats().await.deferred_pending_bytes > 0);
    let r = power_cut_and_mount(r).await;
    assert_eq!(
        r.store().stats().await.deferred_pending_bytes,
        0,
        "replayed at mount"
    );
    assert_eq!(dump(r.store()).await, m);
    assert!(r.store().fsck(true).await.unwrap().is_clean());
}

/// Objects whose onodes are only in redb (checkpointed, then the store remounted) are found
/// again by writes and reads, as are objects removed and written anew; absent objects stay
/// absent.
#[tokio::test]
async fn objects_in_the_checkpointed_kv_are_found_by_writes_after_remount() {
    let img = fresh_images().await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let mut m = Model::new();
    let name = |i: usize| format!("o{i}");
    let mut t = Transaction::new();
    for i in 0..200 {
        t.write("c", &name(i), 0, &pattern(i as u8, 4096 + i));
    }
    r.store().queue_transaction(&t).await.unwrap();
    m = model_apply(&m, &t).unwrap();
    r.store().sync().await.unwrap();
    let r = power_cut_and_mount(r).await;
    for round in 0..2u8 {
        let mut t = Transaction::new();
        for i in (0..200).step_by(3) {
            t.write("c", &name(i), 100, &pattern(round ^ 0x33, 50));
        }
        t.remove("c", &name(1));
        r.store().queue_transaction(&t).await.unwrap();
        m = model_apply(&m, &t).unwrap();
        let mut t = Transaction::new();
        t.write("c", &name(1), 10, b"again");
        r.store().queue_transaction(&t).await.unwrap();
        m = model_apply(&m, &t).unwrap();
        r.store().sync().await.unwrap();
    }
    for i in (0..200).step_by(7) {
        assert_eq!(
            r.store().stat("c", &name(i)).await.unwrap().size_bytes,
            m[&("c".to_string(), name(i))].data.len() as u64
        );
    }
    for absent in ["o200", "o-1", "x"] {
        assert!(!r.store().exists("c", absent).await.unwrap());
    }
    assert_eq!(dump(r.store()).await, m);
    assert!(r.store().fsck(true).await.unwrap().is_clean());
}

#[tokio::test]
async fn device_errors_fail_the_store_for_good() {
    let r = rig().await;
    let s = r.store();
    r.fault
        .add_rule(FaultRule::Nth {
            kind: IoKind::Flush,
            nth: 0,
        })
        .await;
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, 8192));
    let err = s.queue_transaction(&t).await.unwrap_err();
    assert!(err.is_fatal(), "{err}");
    r.fault.clear_rules().await;
    assert!(matches!(
        s.queue_transaction(&t).await,
        Err(StoreError::Failed(_))
    ));
    assert!(matches!(
        s.read("c", "a", 0, 1).await,
        Err(StoreError::Failed(_))
    ));
    assert!(s.failure().is_some());
}

#[tokio::test]
async fn mount_refuses_a_foreign_kv_or_geometry() {
    let a = fresh_images().await;
    let b = fresh_images().await;
    let mixed = Images {
        dev: a.dev.clone(),
        kv: b.kv.clone(),
        fast: None,
        cache: None,
    };
    assert!(matches!(
        Rig::mount(&mixed, cfg()).await,
        Err(StoreError::Config(_))
    ));
    let other_block = cairn_store::StoreConfig {
        block_bytes: 8192,
        ..cfg()
    };
    assert!(matches!(
        Rig::mount(&a, other_block).await,
        Err(StoreError::Config(_))
    ));
    for nice in [-1, 20] {
        let bad_nice = cairn_store::StoreConfig {
            checkpoint_nice: nice,
            ..cfg()
        };
        let refused = Rig::mount(&a, bad_nice).await.err();
        assert!(
            matches!(&refused, Some(StoreError::Config(m)) if m.contains("checkpoint_nice")),
            "{refused:?}"
        );
    }
    for depth in [0, 65] {
        let bad_depth = cairn_store::StoreConfig {
            checkpoint_io_depth: depth,
            ..cfg()
        };
        let refused = Rig::mount(&a, bad_depth).await.err();
        assert!(
            matches!(&refused, Some(StoreError::Config(m)) if m.contains("checkpoint_io_depth")),
            "{refused:?}"
        );
    }
    let blank = Images {
        dev: vec![0; a.dev.len()],
        kv: a.kv.clone(),
        fast: None,
        cache: None,
    };
    assert!(matches!(
        Rig::mount(&blank, cfg()).await,
        Err(StoreError::Corrupt(_))
    ));
    let dev = Arc::new(MemDevice::new(1 << 20, 512).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let err = Store::mount(dev, KvLocation::File(dir.path().join("missing.kv")), cfg())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Config(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_backed_store_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let dev_path = dir.path().join("dev");
    let kv_path = dir.path().join("dev.kv");
    let opts = cairn_blockdev::FileDeviceOptions {
        size_bytes: Some(16 << 20),
        ..Default::default()
    };
    let dev: Arc<dyn cairn_blockdev::BlockDevice> =
        Arc::new(cairn_blockdev::FileDevice::open(&dev_path, &opts).unwrap());
    Store::mkfs(dev.clone(), KvLocation::File(kv_path.clone()), &cfg())
        .await
        .unwrap();
    let s = Arc::new(
        Store::mount(dev.clone(), KvLocation::File(kv_path.clone()), cfg())
            .await
            .unwrap(),
    );
    let mut t = Transaction::new();
    t.create_collection("p")
        .write("p", "o", 0, &pattern(4, 300_000));
    s.queue_transaction(&t).await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..4 {
        let s = s.clone();
        readers.push(tokio::spawn(async move {
            s.read("p", "o", 4096, 100_000).await.unwrap()
        }));
    }
    for h in readers {
        assert_eq!(
            h.await.unwrap(),
            pattern(4, 300_000)[4096..104_096].to_vec()
        );
    }
    // A second mount of the same KV while the store is open is refused as locked (a typed
    // error a restarting daemon can wait on), and the open store goes on unharmed.
    let second = Store::mount(dev.clone(), KvLocation::File(kv_path.clone()), cfg()).await;
    assert!(
        matches!(&second, Err(StoreError::Locked(p)) if p.ends_with("dev.kv")),
        "{:?}",
        second.err()
    );
    assert_eq!(
        s.read("p", "o", 0, 300_000).await.unwrap(),
        pattern(4, 300_000)
    );
    Arc::try_unwrap(s).unwrap().umount().await.unwrap();
    let s = Store::mount(dev, KvLocation::File(kv_path), cfg())
        .await
        .unwrap();
    assert_eq!(
        s.read("p", "o", 0, 300_000).await.unwrap(),
        pattern(4, 300_000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_are_group_committed_and_stay_atomic() {
    let img = fresh_images().await;
    // The first commit's flush waits at the gate, so that commit is provably in progress
    // while the other submitters queue (group commit without relying on timing).
    let mem = Arc::new(MemDevice::from_image(img.dev.clone(), 512).unwrap());
    let dev = GatedDevice::new(mem, u64::MAX);
    let kv = cairn_store::CrashableKv::new(img.kv.clone(), cairn_blockdev::CrashSwitch::new());
    let s = Arc::new(
        Store::mount(dev.clone(), KvLocation::Backend(Box::new(kv)), cfg())
            .await
            .unwrap(),
    );
    dev.close_gate();
    let queued = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..64u8 {
        let s = s.clone();
        let queued = queued.clone();
        tasks.push(tokio::spawn(async move {
            let mut t = Transaction::new();
            t.write("c", &format!("o{i}"), 0, &pattern(i, 5000))
                .setattr("c", &format!("o{i}"), "i", &[i]);
            if i % 8 == 0 {
                t.remove("c", "never-existed");
            }
            // The transaction is queued before this task first waits inside the call.
            queued.fetch_add(1, Ordering::SeqCst);
            s.queue_transaction_owned(t).await
        }));
    }
    while queued.load(Ordering::SeqCst) < 64 {
        tokio::task::yield_now().await;
    }
    dev.open_gate();
    for (i, t) in tasks.into_iter().enumerate() {
        let res = t.await.unwrap();
        assert_eq!(res.is_err(), i % 8 == 0, "txn {i}: {res:?}");
        if let Err(e) = res {
            assert!(matches!(e, StoreError::NoSuchObject { .. }), "{e}");
        }
    }
    for i in 0..64u8 {
        let name = format!("o{i}");
        assert_eq!(s.exists("c", &name).await.unwrap(), i % 8 != 0, "{name}");
        if i % 8 != 0 {
            assert_eq!(s.read("c", &name, 0, 5000).await.unwrap(), pattern(i, 5000));
            assert_eq!(s.getattr("c", &name, "i").await.unwrap(), vec![i]);
        }
    }
    let st = s.stats().await;
    assert_eq!(st.commits, 56);
    assert!(
        st.group_commits < st.commits,
        "{} group commits for {} transactions",
        st.group_commits,
        st.commits
    );
    assert!(s.fsck(true).await.unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_submitters_than_one_group_all_complete() {
    let img = fresh_images().await;
    let small_groups = cairn_store::StoreConfig {
        max_group_txns: 3,
        ..cfg()
    };
    let Rig {
        store,
        switch,
        fault,
        mem,
        kv,
        ..
    } = Rig::mount(&img, small_groups).await.unwrap();
    let s = Arc::new(store.unwrap());
    let mut tasks = Vec::new();
    for i in 0..40u8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut t = Transaction::new();
            t.write("c", &format!("g{i}"), 0, &[i; 100]);
            s.queue_transaction_owned(t).await
        }));
    }
    for t in tasks {
        tokio::time::timeout(std::time::Duration::from_secs(60), t)
            .await
            .expect("a submitter hung")
            .unwrap()
            .unwrap();
    }
    assert_eq!(s.list_objects("c", None, 100).await.unwrap().len(), 40);
    let _ = (switch, fault, mem, kv);
}

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// What one omap page must hold: the model's entries filtered and cut the same way.
fn expected_page(
    all: &[(Vec<u8>, Vec<u8>)],
    after: &[u8],
    prefix: &[u8],
    max: usize,
) -> (Pairs, bool) {
    let mut hit: Vec<_> = all
        .iter()
        .filter(|(k, _)| (after.is_empty() || k.as_slice() > after) && k.starts_with(prefix))
        .cloned()
        .collect();
    let more = hit.len() > max;
    hit.truncate(max);
    (hit, more)
}

async fn check_pages(s: &Store, all: &[(Vec<u8>, Vec<u8>)]) {
    let afters: [&[u8]; 7] = [b"", b"a", b"b1", b"b15", b"b9", b"c", b"\xff"];
    let prefixes: [&[u8]; 4] = [b"", b"b", b"b1", b"zz"];
    for after in afters {
        for prefix in prefixes {
            for max in [1, 3, 1000] {
                let page = s.omap_page("c", "idx", after, prefix, max).await.unwrap();
                let (want, more) = expected_page(all, after, prefix, max);
                assert_eq!(
                    page.entries, want,
                    "after {after:?} prefix {prefix:?} max {max}"
                );
                assert_eq!(
                    page.more, more,
                    "after {after:?} prefix {prefix:?} max {max}"
                );
            }
        }
    }
    // Walking page by page returns every entry once, in order.
    let mut walked = Vec::new();
    let mut after = Vec::new();
    loop {
        let page = s.omap_page("c", "idx", &after, b"", 4).await.unwrap();
        if let Some((k, _)) = page.entries.last() {
            after = k.clone();
        }
        walked.extend(page.entries);
        if !page.more {
            break;
        }
    }
    assert_eq!(walked, all);
}

#[tokio::test]
async fn omap_pages_and_single_attributes_read_only_what_they_need() {
    let img = fresh_images().await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let s = r.store();
    let mut t = Transaction::new();
    for i in 0..20u32 {
        let k = format!("b{i}");
        t.omap_set("c", "idx", k.as_bytes(), format!("v{i}").as_bytes());
    }
    t.omap_set("c", "idx", b"a", b"first")
        .omap_set("c", "idx", b"c", b"last")
        .omap_set("c", "other", b"b0", b"not this object")
        .setattr("c", "idx", "_v", b"7")
        .setattr("c", "idx", "x", b"8");
    s.queue_transaction(&t).await.unwrap();
    let mut t = Transaction::new();
    t.omap_remove("c", "idx", b"b3")
        .omap_set("c", "idx", b"b7", b"changed");
    s.queue_transaction(&t).await.unwrap();
    let all = s.omap_get("c", "idx").await.unwrap();
    assert_eq!(all.len(), 21);
    // Changes still in the log's overlay, then checkpointed into the KV.
    check_pages(s, &all).await;
    s.sync().await.unwrap();
    check_pages(s, &all).await;
    assert_eq!(s.getattr("c", "idx", "_v").await.unwrap(), b"7".to_vec());
    assert_eq!(s.getattr("c", "idx", "x").await.unwrap(), b"8".to_vec());
    assert!(matches!(
        s.getattr("c", "idx", "nope").await,
        Err(StoreError::NoSuchAttr(_))
    ));
    assert!(matches!(
        s.getattr("c", "missing", "_v").await,
        Err(StoreError::NoSuchObject { .. })
    ));
    assert!(matches!(
        s.omap_page("c", "missing", b"", b"", 10).await,
        Err(StoreError::NoSuchObject { .. })
    ));
    assert!(matches!(
        s.omap_page("nocoll", "idx", b"", b"", 10).await,
        Err(StoreError::NoSuchCollection(_))
    ));
    let empty = s.omap_page("c", "idx", b"", b"", 0).await.unwrap();
    assert_eq!(
        empty.entries.len(),
        1,
        "max is clamped to at least one entry"
    );
}

#[tokio::test]
async fn aligned_caller_bytes_are_written_uncopied_and_never_modified() {
    let r = rig().await;
    let s = r.store();
    let mut m = Model::new();
    let data = pattern(7, 64 << 10);
    let shared = cairn_blockdev::AlignedBuf::from_parts(&[&data], 4096)
        .map(bytes::Bytes::from_owner)
        .unwrap();
    // The aligned bytes become copy-on-write runs of their own; later operations of the same
    // transaction patch one of their blocks in place and free others (splitting the run).
    let mut t = Transaction::new();
    t.write_bytes("c", "z", 0, shared.clone())
        .write("c", "z", 5000, &pattern(8, 100))
        .zero("c", "z", 16384, 8192)
        .write_bytes("c", "y", 4096, shared.slice(4096..))
        .write("c", "y", 4096 + 10, &pattern(9, 20));
    apply(s, &mut m, &t).await;
    assert_eq!(
        &shared[..],
        &data[..],
        "the caller's bytes are never written to"
    );
    drop(t);
    let (z, y) = (
        s.read("c", "z", 0, 64 << 10).await.unwrap(),
        s.read("c", "y", 4096, 60 << 10).await.unwrap(),
    );
    assert_eq!(
        crc_fast::crc32_iscsi(&z[16384..24576]),
        crc_fast::crc32_iscsi(&[0u8; 8192])
    );
    assert_eq!(&y[..10], &data[4096..4106]);
    assert_eq!(&y[30..], &data[4126..]);
    let r = power_cut_and_mount(r).await;
    assert_eq!(
        &dump(r.store()).await,
        &m,
        "acknowledged, so it survives a power cut"
    );
}

#[tokio::test]
async fn block_checksums_given_with_a_write_are_kept_when_they_fit() {
    let r = rig().await;
    let s = r.store();
    let data = pattern(3, 64 << 10);
    let aligned = |bytes: &[u8]| {
        cairn_blockdev::AlignedBuf::from_parts(&[bytes], 4096)
            .map(bytes::Bytes::from_owner)
            .unwrap()
    };
    let crcs: Vec<u32> = data.chunks(4096).map(crc_fast::crc32_iscsi).collect();
    let given = |crcs: &[u32]| DataCrcs {
        block_bytes: 4096,
        crcs: crcs.into(),
    };
    let mut wrong = crcs.clone();
    wrong[3] ^= 1;
    let mut t = Transaction::new();
    t.write_checksummed("c", "right", 0, aligned(&data), given(&crcs))
        .write_checksummed("c", "wrong", 0, aligned(&data), given(&wrong))
        .write_checksummed("c", "short", 0, aligned(&data), given(&crcs[1..]))
        .write_checksummed("c", "offset", 100, aligned(&data), given(&wrong));
    s.queue_transaction(&t).await.unwrap();
    let len = data.len() as u64;
    let read = |obj: &'static str, off: u64| s.read("c", obj, off, len);
    assert_eq!(read("right", 0).await.unwrap(), data);
    assert_eq!(
        read("short", 0).await.unwrap(),
        data,
        "count mismatch: ignored"
    );
    assert_eq!(
        read("offset", 100).await.unwrap(),
        data,
        "unaligned: ignored"
    );
    // A wrong checksum was kept as given: the block can never be read as data.
    assert!(matches!(
        read("wrong", 0).await,
        Err(StoreError::ChecksumMismatch { block_index: 3, .. })
    ));
    assert_eq!(
        s.read("c", "wrong", 0, 3 * 4096).await.unwrap(),
        &data[..3 * 4096]
    );
    let report = s.fsck(true).await.unwrap();
    assert_eq!(
        report.damaged_objects.into_iter().collect::<Vec<_>>(),
        vec![("c".to_string(), "wrong".to_string())]
    );
}

#[tokio::test]
async fn checksummed_reads_return_the_verified_crc_of_each_whole_leading_block() {
    let r = rig().await;
    let s = r.store();
    let data = pattern(5, 64 << 10);
    let mut t = Transaction::new();
    t.write("c", "run", 0, &data)
        .write("c", "holes", 0, &data[..4096])
        .write("c", "holes", 16384, &data[..4096])
        .write("c", "short", 0, &data[..5000]);
    s.queue_transaction(&t).await.unwrap();
    let crcs_of = |b: &[u8]| {
        b.chunks_exact(4096)
            .map(crc_fast::crc32_iscsi)
            .collect::<Vec<_>>()
    };
    let cases: [(&str, u64, u64, usize); 5] = [
        ("run", 0, 64 << 10, 16),
        ("run", 4096, 10_000, 2),
        ("run", 100, 20_000, 0),
        ("holes", 0, 20_480, 5),
        ("short", 0, 8192, 1),
    ];
    for (obj, off, len, whole) in cases {
        let (bytes, crcs) = s.read_checksummed("c", obj, off, len).await.unwrap();
        assert_eq!(bytes, s.read("c", obj, off, len).await.unwrap());
        assert_eq!(crcs.block_bytes, 4096);
        assert_eq!(crcs.crcs.len(), whole, "{obj} at {off}");
        assert_eq!(&crcs.crcs[..], &crcs_of(&bytes)[..whole], "{obj} at {off}");
    }
    let (holes, _) = s.read_checksummed("c", "holes", 0, 20_480).await.unwrap();
    assert!(
        holes[4096..16384].iter().all(|&b| b == 0),
        "holes read as zeros"
    );
    assert_eq!(&holes[16384..], &data[..4096]);
}

#[tokio::test]
async fn attributes_read_through_the_onode_cache_follow_every_commit() {
    let r = rig().await;
    let s = r.store();
    let mut t = Transaction::new();
    t.write("c", "o", 0, &pattern(1, 5000));
    s.queue_transaction(&t).await.unwrap();
    let get = |name: &'static str| s.getattr("c", "o", name);
    assert!(matches!(get("v").await, Err(StoreError::NoSuchAttr(_))));
    s.read("c", "o", 0, 10).await.unwrap();
    for value in [&b"one"[..], b"two", b""] {
        let mut t = Transaction::new();
        t.setattr("c", "o", "v", value);
        s.queue_transaction(&t).await.unwrap();
        assert_eq!(get("v").await.unwrap(), value, "after setattr");
        assert_eq!(get("v").await.unwrap(), value, "again, from the cache");
    }
    let mut t = Transaction::new();
    t.push(cairn_store::Op::RmAttr {
        coll: "c".into(),
        obj: "o".into(),
        name: "v".into(),
    });
    s.queue_transaction(&t).await.unwrap();
    assert!(matches!(get("v").await, Err(StoreError::NoSuchAttr(_))));
    let mut t = Transaction::new();
    t.clone_object("c", "o", "p")
        .setattr("c", "o", "v", b"back");
    s.queue_transaction(&t).await.unwrap();
    assert_eq!(get("v").await.unwrap(), b"back");
    assert!(matches!(
        s.getattr("c", "p", "v").await,
        Err(StoreError::NoSuchAttr(_))
    ));
    let mut t = Transaction::new();
    t.remove("c", "o");
    s.queue_transaction(&t).await.unwrap();
    assert!(matches!(
        get("v").await,
        Err(StoreError::NoSuchObject { .. })
    ));
}

#[tokio::test]
async fn read_buffers_come_back_for_reuse_up_to_the_pool_budget() {
    const OBJ: usize = 256 << 10;
    const OBJECTS: usize = 8;
    for budget in [64 << 20, 2 * OBJ] {
        let conf = cairn_store::StoreConfig {
            io_buffer_pool_bytes: budget,
            ..cfg()
        };
        let r = Rig::mount(&fresh_images_with(&conf).await, conf.clone())
            .await
            .unwrap();
        let s = r.store();
        for i in 0..OBJECTS {
            let mut t = Transaction::new();
            t.write("c", &format!("o{i}"), 0, &pattern(i as u8, OBJ));
            s.queue_transaction(&t).await.unwrap();
        }
        // Every read's buffer is lent out at once, then all come back together.
        let mut held = Vec::new();
        for i in 0..OBJECTS {
            let got = s.read("c", &format!("o{i}"), 0, OBJ as u64).await.unwrap();
            assert_eq!(
                crc_fast::crc32_iscsi(&got),
                crc_fast::crc32_iscsi(&pattern(i as u8, OBJ)),
                "object o{i} read back"
            );
            held.push(got);
        }
        drop(held);
        let kept = s.stats().await.io_buffers_free_bytes as usize;
        assert!(
            kept <= budget,
            "{kept} bytes kept over a {budget}-byte budget"
        );
        if budget >= OBJECTS * OBJ {
            assert!(
                kept >= OBJECTS * OBJ,
                "all {OBJECTS} read buffers kept for reuse within the budget: {kept} bytes"
            );
        }
    }
}

#[tokio::test]
async fn a_read_with_an_attribute_sees_both_from_one_committed_state() {
    let r = rig().await;
    let s = r.store();
    let data = pattern(3, 3 * 4096 + 100);
    let mut t = Transaction::new();
    t.write("c", "o", 0, &data).setattr("c", "o", "_v", b"v1");
    s.queue_transaction(&t).await.unwrap();
    for round in 0..2 {
        let (bytes, crcs, v) = s
            .read_checksummed_with_attr("c", "o", 4096, 8192, "_v")
            .await
            .unwrap();
        assert_eq!(&bytes[..], &data[4096..12288], "round {round}");
        assert_eq!(crcs.crcs.len(), 2);
        assert_eq!(crcs.crcs[0], crc_fast::crc32_iscsi(&data[4096..8192]));
        assert_eq!(v.as_deref(), Some(&b"v1"[..]), "round {round}: attr");
        let (_, _, none) = s
            .read_checksummed_with_attr("c", "o", 0, 10, "missing")
            .await
            .unwrap();
        assert_eq!(none, None, "round {round}: an absent attribute");
    }
    let mut t = Transaction::new();
    t.write("c", "o", 0, b"new").setattr("c", "o", "_v", b"v2");
    s.queue_transaction(&t).await.unwrap();
    let (bytes, _, v) = s
        .read_checksummed_with_attr("c", "o", 0, 3, "_v")
        .await
        .unwrap();
    assert_eq!((&bytes[..], v.as_deref()), (&b"new"[..], Some(&b"v2"[..])));
    assert!(matches!(
        s.read_checksummed_with_attr("c", "gone", 0, 3, "_v").await,
        Err(StoreError::NoSuchObject { .. })
    ));
}

#[tokio::test]
async fn objects_a_commit_creates_are_read_from_the_cache_exactly_as_written() {
    let r = rig().await;
    let s = r.store();
    let small = pattern(5, 3 * 4096 + 17);
    let mut t = Transaction::new();
    t.write("c", "new", 0, &small)
        .setattr("c", "new", "_v", b"1")
        .write("c", "gone", 0, b"short-lived")
        .remove("c", "gone")
        .push(cairn_store::Op::Touch {
            coll: "c".into(),
            obj: "empty".into(),
        });
    s.queue_transaction(&t).await.unwrap();
    let before = s.stats().await;
    let (bytes, crcs, v) = s
        .read_checksummed_with_attr("c", "new", 0, 1 << 20, "_v")
        .await
        .unwrap();
    assert_eq!(crc_fast::crc32_iscsi(&bytes), crc_fast::crc32_iscsi(&small));
    assert_eq!(crcs.crcs.len(), 3, "whole blocks' crcs");
    assert_eq!(v.as_deref(), Some(&b"1"[..]));
    assert_eq!(s.stat("c", "empty").await.unwrap().size_bytes, 0);
    let after = s.stats().await;
    assert_eq!(
        (
            after.onode_cache_hits - before.onode_cache_hits,
            after.onode_cache_misses - before.onode_cache_misses
        ),
        (2, 0),
        "objects the commit created are cached"
    );
    assert!(matches!(
        s.read("c", "gone", 0, 10).await,
        Err(StoreError::NoSuchObject { .. })
    ));
    // Changed by a later commit: its entry is dropped, and the read sees the change.
    let mut t = Transaction::new();
    t.write("c", "new", 4096, b"changed")
        .setattr("c", "new", "_v", b"2");
    s.queue_transaction(&t).await.unwrap();
    let mut want = small.clone();
    want[4096..4103].copy_from_slice(b"changed");
    let (bytes, _, v) = s
        .read_checksummed_with_attr("c", "new", 0, 1 << 20, "_v")
        .await
        .unwrap();
    assert_eq!(crc_fast::crc32_iscsi(&bytes), crc_fast::crc32_iscsi(&want));
    assert_eq!(v.as_deref(), Some(&b"2"[..]));
    // Created by concurrent submitters (one group or several): each read back exactly.
    let write = |i: u8| async move {
        let mut t = Transaction::new();
        t.write(
            "c",
            &format!("par{i}"),
            0,
            &pattern(i, 4096 * (i as usize + 1)),
        )
        .setattr("c", &format!("par{i}"), "_v", &[i]);
        s.queue_transaction(&t).await
    };
    let (a, b, c, d) = tokio::join!(write(0), write(1), write(2), write(3));
    let (e, f, g, h) = tokio::join!(write(4), write(5), write(6), write(7));
    for r in [a, b, c, d, e, f, g, h] {
        r.unwrap();
    }
    for i in 0..8u8 {
        let (bytes, _, v) = s
            .read_checksummed_with_attr("c", &format!("par{i}"), 0, 1 << 20, "_v")
            .await
            .unwrap();
        assert_eq!(
            crc_fast::crc32_iscsi(&bytes),
            crc_fast::crc32_iscsi(&pattern(i, 4096 * (i as usize + 1)))
        );
        assert_eq!(v, Some(vec![i]));
    }
}

/// Small attributes live in the onode (no xattr record); a long one goes to the xattr table and
/// comes back into the onode when set short again; every read path, a remount, a rename and a
/// clone see one value per name, and fsck finds the table and the onodes consistent.
#[tokio::test]
async fn attributes_move_between_the_onode_and_the_xattr_table() {
    let r = rig().await;
    let s = r.store();
    let long = vec![7u8; cairn_store::codec::INLINE_ATTR_MAX_BYTES + 1];
    let xattr_records = |s: &Store| {
        s.kv_record_counts()
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == "xattrs")
            .unwrap()
            .1
    };
    let mut t = Transaction::new();
    t.write("c", "o", 0, b"data")
        .setattr("c", "o", "_v", b"1")
        .setattr("c", "o", "ct", b"text/plain");
    s.queue_transaction(&t).await.unwrap();
    s.sync().await.unwrap();
    assert_eq!(xattr_records(s), 0, "small attributes are inside the onode");

    let mut t = Transaction::new();
    t.setattr("c", "o", "big", &long)
        .setattr("c", "o", "ct", &long);
    s.queue_transaction(&t).await.unwrap();
    s.sync().await.unwrap();
    assert_eq!(xattr_records(s), 2, "long values go to the table");
    assert_eq!(s.getattr("c", "o", "ct").await.unwrap(), long);
    let all = s.getattrs("c", "o").await.unwrap();
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["_v", "big", "ct"], "one entry per name, sorted");

    let mut t = Transaction::new();
    t.setattr("c", "o", "ct", b"short again");
    s.queue_transaction(&t).await.unwrap();
    assert_eq!(s.getattr("c", "o", "ct").await.unwrap(), b"short again");
    let (_, _, v) = s
        .read_checksummed_with_attr("c", "o", 0, 4, "big")
        .await
        .unwrap();
    assert_eq!(
        v,
        Some(long.clone()),
        "a table attribute through the read path"
    );
    s.sync().await.unwrap();
    assert_eq!(xattr_records(s), 1, "the short value left the table");
    assert!(s.fsck(true).await.unwrap().is_clean());

    let mut t = Transaction::new();
    t.clone_object("c", "o", "copy");
    t.push(cairn_store::Op::Rename {
        coll: "c".into(),
        src: "o".into(),
        dst: "moved".into(),
    });
    s.queue_transaction(&t).await.unwrap();
    let r = power_cut_and_mount(r).await;
    let s = r.store();
    for obj in ["copy", "moved"] {
        let all = s.getattrs("c", obj).await.unwrap();
        assert_eq!(
            all,
            vec![
                ("_v".to_string(), b"1".to_vec()),
                ("big".to_string(), long.clone()),
                ("ct".to_string(), b"short again".to_vec()),
            ],
            "{obj} after a power cut"
        );
    }
    assert!(matches!(
        s.getattrs("c", "o").await,
        Err(StoreError::NoSuchObject { .. })
    ));
    let mut t = Transaction::new();
    t.remove("c", "copy").remove("c", "moved");
    s.queue_transaction(&t).await.unwrap();
    s.sync().await.unwrap();
    assert_eq!(xattr_records(s), 0, "removal takes the table's records too");
    assert!(s.fsck(true).await.unwrap().is_clean());
}

/// An xattr too long for the onode (stored in the xattr table) set in its own transaction, as
/// an OSD's setxattr is, survives a power cut right after it is acknowledged, and every kind
/// of later write to the object, each followed by a power cut.
#[tokio::test]
async fn a_long_xattr_survives_power_cuts_after_every_kind_of_write() {
    let long = vec![3u8; 280];
    let version = |t: &mut Transaction, v: u64| {
        t.setattr("c", "o", "_v", &v.to_le_bytes());
    };
    let mut r = rig().await;
    let mut t = Transaction::new();
    t.write("c", "o", 0, &pattern(1, 61_473));
    t.setattr("c", "o", "attr0", &[2u8; 220]);
    version(&mut t, 1);
    r.store().queue_transaction(&t).await.unwrap();
    let mut t = Transaction::new();
    t.setattr("c", "o", "attr4", &long);
    version(&mut t, 2);
    r.store().queue_transaction(&t).await.unwrap();
    r = power_cut_and_mount(r).await;
    assert_eq!(r.store().getattr("c", "o", "attr4").await.unwrap(), long);
    for (i, kind) in ["write", "truncate", "omap", "small xattr"]
        .iter()
        .enumerate()
    {
        let mut t = Transaction::new();
        match *kind {
            "write" => {
                t.write("c", "o", 100, &pattern(9, 5000));
            }
            "truncate" => {
                t.truncate("c", "o", 30_000);
            }
            "omap" => {
                t.push(cairn_store::Op::OmapSet {
                    coll: "c".into(),
                    obj: "o".into(),
                    entries: vec![(b"k".to_vec(), b"v".to_vec())],
                });
            }
            _ => {
                t.setattr("c", "o", "attr1", b"x");
            }
        }
        version(&mut t, 3 + i as u64);
        r.store().queue_transaction(&t).await.unwrap();
        r = power_cut_and_mount(r).await;
        assert_eq!(
            r.store().getattr("c", "o", "attr4").await.unwrap(),
            long,
            "after a {kind} and a power cut"
        );
    }
}

#[tokio::test]
async fn reads_count_their_time_on_the_device_under_the_state_lock() {
    let r = rig().await;
    let s = r.store();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(7, 64 << 10));
    s.queue_transaction(&t).await.unwrap();
    let before = s.stats().await.read_device_ns;
    let data = s.read("c", "a", 0, 64 << 10).await.unwrap();
    assert_eq!(&data[..], &pattern(7, 64 << 10)[..]);
    let after = s.stats().await.read_device_ns;
    assert!(
        after > before,
        "a read from the device is counted ({before} -> {after} ns)"
    );
    // An empty range reads nothing from the device.
    let none = s.read("c", "a", 64 << 10, 4096).await.unwrap();
    assert!(none.is_empty());
    assert_eq!(s.stats().await.read_device_ns, after);
}
