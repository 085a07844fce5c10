//! Corruption: flipped bytes in data blocks are caught by the per-block crc32c on every read
//! (typed error, never bad bytes), and `fsck --deep` names exactly the damaged objects.

use crate::common;

use cairn_store::{StoreError, Transaction};
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_fsck_lists_exactly_the_damaged_objects() {
    let img = fresh_images().await;
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let r = Rig::mount(&img, cfg()).await.unwrap();
        let s = r.store();
        let names: Vec<String> = (0..12).map(|i| format!("obj{i}")).collect();
        let mut t = Transaction::new();
        for (i, n) in names.iter().enumerate() {
            let len = rng.random_range(1..40_000);
            t.write("c", n, 0, &pattern(i as u8, len));
        }
        t.write("c", "obj0", 7, b"deferred small write");
        s.queue_transaction(&t).await.unwrap();
        // Apply deferred writes: a block whose committed contents still sit in the KV is
        // rewritten from there, so damage to its device copy is (correctly) never seen.
        s.sync().await.unwrap();
        let mut damaged = BTreeSet::new();
        for _ in 0..rng.random_range(1..5) {
            let victim = &names[rng.random_range(0..names.len())];
            let ext = s.extents("c", victim).await.unwrap();
            let (idx, pblock) = ext[rng.random_range(0..ext.len())];
            let byte = pblock * s.block_bytes() + rng.random_range(0..s.block_bytes());
            if !damaged.insert(("c".to_string(), victim.clone())) {
                continue;
            }
            assert!(r.mem.corrupt_byte(byte));
            let err = s
                .read("c", victim, idx * s.block_bytes(), 1)
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ChecksumMismatch { block_index, .. } if block_index == idx),
                "{err}"
            );
            assert!(!err.is_fatal());
        }
        assert!(
            s.fsck(false).await.unwrap().is_clean(),
            "shallow fsck does not read data"
        );
        let rep = s.fsck(true).await.unwrap();
        assert_eq!(
            rep.damaged_objects, damaged,
            "seed {seed}: {:?}",
            rep.errors
        );
        for n in &names {
            let key = ("c".to_string(), n.clone());
            let size = s.stat("c", n).await.unwrap().size_bytes;
            let res = s.read("c", n, 0, size).await;
            assert_eq!(res.is_err(), damaged.contains(&key), "{n}");
        }
        let mut t = Transaction::new();
        for (_, n) in &damaged {
            t.remove("c", n);
        }
        s.queue_transaction(&t).await.unwrap();
        assert!(
            s.fsck(true).await.unwrap().is_clean(),
            "removing damaged objects repairs the store"
        );
        r.crash(
            cairn_blockdev::PowerLossMode::DropUnflushed,
            cairn_store::KvLossMode::DropUnsynced,
        )
        .await;
    }
}

#[tokio::test]
async fn corrupt_metadata_is_reported_not_panicked_on() {
    let img = fresh_images().await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let mut t = Transaction::new();
    t.write("c", "x", 0, &pattern(1, 9000));
    r.store().queue_transaction(&t).await.unwrap();
    let ext = r.store().extents("c", "x").await.unwrap();
    assert_eq!(ext.len(), 3);
    let mut bad = img.clone();
    bad.dev[..8].copy_from_slice(b"garbage!");
    assert!(matches!(
        Rig::mount(&bad, cfg()).await,
        Err(StoreError::Corrupt(_))
    ));
    r.crash(
        cairn_blockdev::PowerLossMode::DropUnflushed,
        cairn_store::KvLossMode::DropUnsynced,
    )
    .await;
}

/// An attribute record in the xattr table for an object whose onode holds all of its attributes
/// (never spilled) is reported by fsck, and so is a name both inside an onode and in the table.
#[tokio::test]
async fn fsck_reports_table_records_the_onode_does_not_account_for() {
    use cairn_store::codec::{object_prefix, seal, sub_key};
    let img = fresh_images().await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let mut t = Transaction::new();
    t.write("c", "inline", 0, b"x")
        .setattr("c", "inline", "_v", b"1")
        .write("c", "spilled", 0, b"y")
        .setattr("c", "spilled", "_v", b"1")
        .setattr("c", "spilled", "big", &[5u8; 300]);
    r.store().queue_transaction(&t).await.unwrap();
    r.store().sync().await.unwrap();
    assert!(r.store().fsck(false).await.unwrap().is_clean());
    // A free block in the data area, a few past the last one written.
    let free = r.store().extents("c", "spilled").await.unwrap()[0].1 + 8;
    let mut img = r
        .crash(
            cairn_blockdev::PowerLossMode::DropUnflushed,
            cairn_store::KvLossMode::DropUnsynced,
        )
        .await;
    // Write the stray records straight into the KV image, as a bug or bit rot could leave them.
    let switch = cairn_blockdev::CrashSwitch::new();
    let kv = cairn_store::CrashableKv::new(img.kv.clone(), switch);
    {
        let db = redb::Database::builder()
            .create_with_backend(kv.clone())
            .unwrap();
        let wtx = db.begin_write().unwrap();
        {
            let mut xattrs = wtx.open_table(cairn_store::kv::XATTRS).unwrap();
            // Collection "c" is the store's first: id 1.
            for (obj, name) in [("inline", "stray"), ("spilled", "_v")] {
                let key = sub_key(&object_prefix(1, obj), name.as_bytes());
                xattrs
                    .insert(key.as_slice(), seal(b"v").as_slice())
                    .unwrap();
            }
        }
        {
            // An extent record for an object whose onode holds its extent map itself.
            let mut extents = wtx.open_table(cairn_store::kv::EXTENTS).unwrap();
            let stray = cairn_store::codec::Extent {
                lblock: 0,
                pblock: free,
                crcs: vec![0],
            };
            let key = cairn_store::codec::block_key(&object_prefix(1, "inline"), 0);
            extents
                .insert(key.as_slice(), stray.encode().as_slice())
                .unwrap();
        }
        wtx.commit().unwrap();
    }
    img.kv = kv.power_loss(cairn_store::KvLossMode::DropUnsynced);
    let r = Rig::mount(&img, cfg()).await.unwrap();
    let report = r.store().fsck(false).await.unwrap();
    let errors = report.errors.join("\n");
    assert!(
        errors.contains("c/inline in the table, but its onode is not marked spilled"),
        "{errors}"
    );
    assert!(
        errors.contains("extent record at block 0 of c/inline, whose onode holds its map"),
        "{errors}"
    );
    assert!(
        errors.contains("xattr \"_v\" of c/spilled both in its onode and in the table"),
        "{errors}"
    );
    assert_eq!(report.errors.len(), 3, "{errors}");
}
