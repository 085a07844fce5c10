//! Extent maps at their edges: overwrites spanning extents, partial-block writes, truncate and
//! zero in the middle of an extent, clone then overwrite, records longer than one extent, and
//! failures half way through (checksum errors during read-modify-write, rejected transactions),
//! each checked against the model, the physical layout, the allocator and fsck --deep.

use crate::common;

use cairn_blockdev::PowerLossMode;
use cairn_store::{KvLossMode, StoreConfig, StoreError, Transaction};
use common::*;
use std::collections::BTreeSet;

const BS: u64 = 4096;

/// A store where every write of a whole block or more is copy-on-write (the extent edges under
/// test), and only sub-block writes are deferred.
async fn rig() -> Rig {
    let cow = StoreConfig {
        deferred_max_bytes: BS,
        ..cfg()
    };
    Rig::mount(&fresh_images().await, cow).await.unwrap()
}

async fn apply(r: &Rig, m: &mut Model, t: &Transaction) {
    r.store().queue_transaction(t).await.unwrap();
    *m = model_apply(m, t).unwrap();
    assert_eq!(&dump(r.store()).await, m);
    let rep = r.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
}

fn pblocks(ext: &[(u64, u64)], from: u64, to: u64) -> Vec<u64> {
    ext.iter()
        .filter(|(l, _)| (from..to).contains(l))
        .map(|e| e.1)
        .collect()
}

/// Object "a" of 6 blocks in three extents that are not physically contiguous.
async fn three_extents(r: &Rig, m: &mut Model) {
    for (i, at) in [0u64, 2, 4].into_iter().enumerate() {
        let mut t = Transaction::new();
        t.write("c", "a", at * BS, &pattern(i as u8, 2 * BS as usize))
            .write("c", &format!("spacer{i}"), 0, &pattern(9, BS as usize));
        apply(r, m, &t).await;
    }
}

#[tokio::test]
async fn overwrite_spanning_extents_moves_only_the_covered_blocks() {
    let r = rig().await;
    let mut m = Model::new();
    three_extents(&r, &mut m).await;
    let before = r.store().extents("c", "a").await.unwrap();
    let allocated = r.store().stats().await.allocated_bytes;
    let mut t = Transaction::new();
    t.write("c", "a", BS + 100, &pattern(7, (3 * BS) as usize));
    apply(&r, &mut m, &t).await;
    let after = r.store().extents("c", "a").await.unwrap();
    assert_eq!(after.len(), 6);
    assert_eq!(
        pblocks(&after, 0, 1),
        pblocks(&before, 0, 1),
        "block 0 untouched"
    );
    assert_eq!(
        pblocks(&after, 5, 6),
        pblocks(&before, 5, 6),
        "block 5 untouched"
    );
    let moved: BTreeSet<u64> = pblocks(&after, 1, 5).into_iter().collect();
    let old: BTreeSet<u64> = pblocks(&before, 1, 5).into_iter().collect();
    assert!(moved.is_disjoint(&old), "covered blocks are copy-on-write");
    assert_eq!(
        r.store().stats().await.allocated_bytes,
        allocated,
        "old blocks freed"
    );
}

#[tokio::test]
async fn partial_block_writes_change_blocks_in_place_and_survive_a_crash() {
    let r = rig().await;
    let mut m = Model::new();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, (300 * BS) as usize));
    apply(&r, &mut m, &t).await;
    let before = r.store().extents("c", "a").await.unwrap();
    let mut t = Transaction::new();
    t.write(
        "c",
        "a",
        255 * BS + 4090,
        b"across the extent record boundary",
    )
    .write("c", "a", 7, b"head");
    apply(&r, &mut m, &t).await;
    assert_eq!(
        r.store().extents("c", "a").await.unwrap(),
        before,
        "deferred: same blocks"
    );
    assert!(r.store().stats().await.deferred_pending_bytes >= 3 * BS);
    let img = r
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    assert_eq!(dump(r.store()).await, m, "replayed at mount");
    assert!(r.store().fsck(true).await.unwrap().is_clean());
}

#[tokio::test]
async fn truncate_and_zero_in_the_middle_of_an_extent() {
    let r = rig().await;
    let mut m = Model::new();
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(1, (10 * BS) as usize));
    apply(&r, &mut m, &t).await;
    let mut t = Transaction::new();
    t.truncate("c", "a", 4 * BS + 1000);
    apply(&r, &mut m, &t).await;
    assert_eq!(r.store().extents("c", "a").await.unwrap().len(), 5);
    assert_eq!(r.store().stats().await.allocated_bytes, 5 * BS);
    let mut t = Transaction::new();
    t.truncate("c", "a", 10 * BS);
    apply(&r, &mut m, &t).await;
    let mut t = Transaction::new();
    t.write("c", "b", 0, &pattern(2, (10 * BS) as usize))
        .zero("c", "b", 2 * BS + 5, 5 * BS);
    apply(&r, &mut m, &t).await;
    let lblocks: Vec<u64> = r
        .store()
        .extents("c", "b")
        .await
        .unwrap()
        .iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        lblocks,
        vec![0, 1, 2, 7, 8, 9],
        "whole blocks 3..7 deallocated"
    );
    let mut t = Transaction::new();
    t.zero("c", "b", 0, 20 * BS);
    apply(&r, &mut m, &t).await;
    assert!(r.store().extents("c", "b").await.unwrap().is_empty());
}

#[tokio::test]
async fn clone_then_overwrite_keeps_the_copies_apart() {
    let r = rig().await;
    let mut m = Model::new();
    three_extents(&r, &mut m).await;
    let mut t = Transaction::new();
    t.clone_object("c", "a", "b")
        .write("c", "b", 3 * BS, &pattern(5, (2 * BS) as usize))
        .write("c", "a", 10, b"small");
    apply(&r, &mut m, &t).await;
    let a: BTreeSet<u64> = r
        .store()
        .extents("c", "a")
        .await
        .unwrap()
        .iter()
        .map(|e| e.1)
        .collect();
    let b: BTreeSet<u64> = r
        .store()
        .extents("c", "b")
        .await
        .unwrap()
        .iter()
        .map(|e| e.1)
        .collect();
    assert!(a.is_disjoint(&b));
    let mut t = Transaction::new();
    t.clone_object("c", "b", "a").rename("c", "a", "z");
    apply(&r, &mut m, &t).await;
    let st = r.store().stats().await;
    let blocks: u64 = m.values().map(|o| (o.data.len() as u64).div_ceil(BS)).sum();
    assert_eq!(st.allocated_bytes, blocks * BS, "no leaked blocks");
}

#[tokio::test]
async fn a_checksum_error_during_read_modify_write_rejects_the_transaction() {
    let r = rig().await;
    let mut m = Model::new();
    three_extents(&r, &mut m).await;
    let ext = r.store().extents("c", "a").await.unwrap();
    assert!(r.mem.corrupt_byte(ext[1].1 * BS + 17));
    let before = r.store().stats().await;
    let mut t = Transaction::new();
    t.write("c", "a", BS + 100, &pattern(7, (3 * BS) as usize));
    let err = r.store().queue_transaction(&t).await.unwrap_err();
    assert!(
        matches!(err, StoreError::ChecksumMismatch { block_index: 1, .. }),
        "{err}"
    );
    assert!(!err.is_fatal());
    assert_eq!(r.store().extents("c", "a").await.unwrap(), ext);
    assert_eq!(r.store().stats().await.free_bytes, before.free_bytes);
    let mut t = Transaction::new();
    t.write("c", "a", 0, &pattern(8, (3 * BS) as usize));
    apply(&r, &mut m, &t).await;
    assert_ne!(
        r.store().extents("c", "a").await.unwrap()[1].1,
        ext[1].1,
        "whole-block overwrite needs no read and replaces the damaged block"
    );
}

#[tokio::test]
async fn a_rejected_transaction_leaves_split_extents_unsplit() {
    let r = rig().await;
    let mut m = Model::new();
    three_extents(&r, &mut m).await;
    let ext = r.store().extents("c", "a").await.unwrap();
    let before = r.store().stats().await;
    let mut t = Transaction::new();
    t.write("c", "a", BS / 2, &pattern(3, (4 * BS) as usize))
        .truncate("c", "a", 3 * BS + 1)
        .zero("c", "a", 10, 100)
        .clone_object("c", "a", "copy")
        .remove("c", "missing");
    assert!(matches!(
        r.store().queue_transaction(&t).await,
        Err(StoreError::NoSuchObject { .. })
    ));
    assert_eq!(r.store().extents("c", "a").await.unwrap(), ext);
    assert_eq!(dump(r.store()).await, m);
    let after = r.store().stats().await;
    assert_eq!(
        (after.free_bytes, after.deferred_pending_bytes),
        (before.free_bytes, before.deferred_pending_bytes)
    );
    assert!(r.store().fsck(true).await.unwrap().is_clean());
}

#[tokio::test]
async fn an_older_format_is_refused_with_a_clear_error() {
    // 1: per-block records; 2: extent records without the write-ahead log.
    for generation in [b'1', b'2'] {
        let mut img = fresh_images().await;
        img.dev[7] = generation;
        let Err(err) = Rig::mount(&img, cfg()).await else {
            panic!("a format {} store was mounted", generation as char);
        };
        assert!(matches!(err, StoreError::UnsupportedFormat { .. }), "{err}");
        assert!(err.to_string().contains("mkfs"), "{err}");
    }
}

/// Extent records of the object's map in the KV's extents table, after a checkpoint.
async fn table_records(r: &Rig) -> u64 {
    r.store().sync().await.unwrap();
    let counts = r.store().kv_record_counts().unwrap();
    counts.iter().find(|(n, _)| *n == "extents").unwrap().1
}

#[tokio::test]
async fn a_small_map_lives_in_the_onode_and_a_large_one_in_the_table() {
    let r = rig().await;
    let mut m = Model::new();
    let mut t = Transaction::new();
    t.write("c", "small", 0, &pattern(1, BS as usize)).write(
        "c",
        "big",
        0,
        &pattern(2, (300 * BS) as usize),
    );
    apply(&r, &mut m, &t).await;
    assert_eq!(
        table_records(&r).await,
        2,
        "big's two records; small's map is inline"
    );

    // Scattered blocks: one extent each, until the map outgrows the onode and moves.
    for i in 1..=30u64 {
        let mut t = Transaction::new();
        t.write("c", "small", 2 * i * BS, &pattern(i as u8, BS as usize));
        apply(&r, &mut m, &t).await;
    }
    assert_eq!(r.store().extents("c", "small").await.unwrap().len(), 31);
    assert_eq!(
        table_records(&r).await,
        2 + 31,
        "small's map moved to the table"
    );

    // Clones and renames carry a map from either place; emptied, a map comes back inline.
    let mut t = Transaction::new();
    t.clone_object("c", "small", "copy")
        .clone_object("c", "big", "big2")
        .rename("c", "big2", "big3")
        .write("c", "copy", 3 * BS, &pattern(7, BS as usize));
    apply(&r, &mut m, &t).await;
    assert!(table_records(&r).await >= 2 + 31 + 2);
    let mut t = Transaction::new();
    t.truncate("c", "small", 0)
        .write("c", "small", 0, &pattern(9, 100))
        .remove("c", "copy");
    apply(&r, &mut m, &t).await;
    let mut t = Transaction::new();
    t.write("c", "small", BS, &pattern(10, BS as usize));
    apply(&r, &mut m, &t).await;
    let records = table_records(&r).await;
    assert_eq!(
        records, 4,
        "big's and big3's only: small's map is back inline"
    );

    let img = r
        .crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
    let r = Rig::mount(&img, cfg()).await.unwrap();
    assert_eq!(
        dump(r.store()).await,
        m,
        "both kinds of map survive a crash"
    );
    assert!(r.store().fsck(true).await.unwrap().is_clean());
    assert_eq!(table_records(&r).await, records);
}
