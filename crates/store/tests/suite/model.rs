//! Property test: a state machine of random transactions, remounts and crashes checked step by
//! step against the in-memory reference model.

use crate::common;

use cairn_blockdev::PowerLossMode;
use cairn_store::{KvLossMode, Op, Transaction};
use common::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    Txn(Vec<Op>),
    Sync,
    Remount,
    CrashAfterAck,
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("c".to_string())
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let c = || Just("c".to_string());
    prop_oneof![
        // Lengths on both sides of what the onode holds of an extent map (a write of 500 KB or
        // more needs more, as do many scattered small ones): maps move between the onode and the
        // extents table, and back when the object is emptied.
        3 => (c(), name(), 0..40_000u64, prop_oneof![4 => 1..300usize, 4 => 3000..20_000usize, 1 => 500_000..520_000usize], any::<u8>()).prop_map(|(coll, obj, off, len, seed)| Op::Write {
            coll,
            obj,
            offset_bytes: off,
            data: pattern(seed, len).into(),
            crcs: None,
        }),
        1 => (c(), name(), 0..40_000u64, 0..12_000u64).prop_map(|(coll, obj, o, l)| Op::Zero { coll, obj, offset_bytes: o, len_bytes: l }),
        1 => (c(), name(), prop_oneof![Just(0u64), 0..45_000u64]).prop_map(|(coll, obj, s)| Op::Truncate { coll, obj, size_bytes: s }),
        1 => (c(), name()).prop_map(|(coll, obj)| Op::Remove { coll, obj }),
        1 => (c(), name(), name()).prop_map(|(coll, src, dst)| Op::Clone { coll, src, dst }),
        1 => (c(), name(), name()).prop_map(|(coll, src, dst)| Op::Rename { coll, src, dst }),
        // Values on both sides of the onode's inline limit (255 bytes): an attribute moves
        // between the onode and the xattr table as it is set again.
        1 => (c(), name(), 0..3u8, any::<u8>(), prop_oneof![Just(3usize), 250..300usize]).prop_map(|(coll, obj, n, v, len)| Op::SetAttr { coll, obj, name: format!("x{n}"), value: vec![v; len] }),
        1 => (c(), name(), 0..3u8).prop_map(|(coll, obj, n)| Op::RmAttr { coll, obj, name: format!("x{n}") }),
        1 => (c(), name(), 0..4u8, any::<u8>()).prop_map(|(coll, obj, k, v)| Op::OmapSet { coll, obj, entries: vec![(vec![k], vec![v])] }),
        1 => (c(), name(), 0..4u8).prop_map(|(coll, obj, k)| Op::OmapRemove { coll, obj, keys: vec![vec![k]] }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => prop::collection::vec(op(), 1..4).prop_map(Step::Txn),
        1 => Just(Step::Sync),
        1 => Just(Step::Remount),
        1 => Just(Step::CrashAfterAck),
    ]
}

async fn run(steps: Vec<Step>) {
    let img = fresh_images().await;
    let mut rig = Rig::mount(&img, cfg()).await.unwrap();
    let mut model = Model::new();
    for (i, st) in steps.into_iter().enumerate() {
        match st {
            Step::Txn(ops) => {
                let t = Transaction { ops };
                let res = rig.store().queue_transaction(&t).await;
                match model_apply(&model, &t) {
                    Some(m) => {
                        res.unwrap_or_else(|e| {
                            panic!("step {i}: store rejected a valid transaction: {e}")
                        });
                        model = m;
                    }
                    None => {
                        let e = res.expect_err("store accepted a transaction the model rejects");
                        assert!(!e.is_fatal(), "{e}");
                    }
                }
            }
            Step::Sync => rig.store().sync().await.unwrap(),
            Step::Remount => {
                let Rig {
                    store,
                    mem,
                    kv,
                    switch,
                    fault,
                    ..
                } = rig;
                store.unwrap().umount().await.unwrap();
                let _ = (switch, fault);
                let img = Images {
                    dev: mem.snapshot(),
                    kv: kv.power_loss(KvLossMode::DropUnsynced),
                    fast: None,
                    cache: None,
                };
                rig = Rig::mount(&img, cfg()).await.unwrap();
            }
            Step::CrashAfterAck => {
                let img = rig
                    .crash(
                        PowerLossMode::RandomSubset { seed: i as u64 },
                        KvLossMode::RandomSubset { seed: i as u64 },
                    )
                    .await;
                rig = Rig::mount(&img, cfg()).await.unwrap();
            }
        }
        assert_eq!(dump(rig.store()).await, model, "after step {i}");
    }
    let rep = rig.store().fsck(true).await.unwrap();
    assert!(rep.is_clean(), "{:?}", rep.errors);
    let st = rig.store().stats().await;
    assert_eq!(st.objects, model.len() as u64);
    assert_eq!(
        st.stored_bytes,
        model.values().map(|o| o.data.len() as u64).sum::<u64>()
    );
    rig.crash(PowerLossMode::DropUnflushed, KvLossMode::DropUnsynced)
        .await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model_across_remounts(steps in prop::collection::vec(step(), 1..25)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(steps));
    }
}
