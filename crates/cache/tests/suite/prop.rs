//! Property test: any sequence of writes, reads, flushes, cleaning rounds, mode switches and
//! reattaches reads back exactly like a flat byte array (shrinks to a minimal failing sequence).

use crate::common;

use cairn_blockdev::BlockDevice;
use cairn_cache::{CacheDevice, CacheMode};
use common::*;
use proptest::prelude::*;

const CORE_BYTES: u64 = 128 * 1024;
const BLOCKS: u64 = CORE_BYTES / K4;

#[derive(Debug, Clone)]
enum Op {
    Write(u64, u64),
    Read(u64, u64),
    Flush,
    Clean,
    Mode(usize, bool),
    Reattach,
}

fn op() -> impl Strategy<Value = Op> {
    let range = (0..BLOCKS).prop_flat_map(|b| (Just(b), 1..=(BLOCKS - b).min(6)));
    prop_oneof![
        4 => range.clone().prop_map(|(b, n)| Op::Write(b, n)),
        3 => range.prop_map(|(b, n)| Op::Read(b, n)),
        1 => Just(Op::Flush),
        1 => Just(Op::Clean),
        1 => (0..6usize, any::<bool>()).prop_map(|(m, f)| Op::Mode(m, f)),
        1 => Just(Op::Reattach),
    ]
}

const MODES: [CacheMode; 6] = [
    CacheMode::Wt,
    CacheMode::Wb,
    CacheMode::Wa,
    CacheMode::Pt,
    CacheMode::Wo,
    CacheMode::Wi,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn cache_reads_like_a_flat_array(ops in proptest::collection::vec(op(), 1..60), line_kib in prop::sample::select(vec![4u64, 8, 16]), clean_dirty_victims in any::<bool>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let mut c = cfg(CacheMode::Wb, line_kib * 1024);
            if clean_dirty_victims {
                c.promotion.dirty_full = cairn_cache::DirtyFullPolicy::Clean;
            }
            let r = rig(c, 6, CORE_BYTES).await;
            let (cache, core) = (r.cache.clone(), r.core.clone());
            let mut dev = r.dev;
            let mut model = vec![0u8; CORE_BYTES as usize];
            for (i, op) in ops.iter().enumerate() {
                match *op {
                    Op::Write(b, n) => {
                        let data = pattern(b * K4, (n * K4) as usize, i as u32 + 1);
                        dev.write(b * K4, &data).await.unwrap();
                        model[(b * K4) as usize..((b + n) * K4) as usize].copy_from_slice(&data);
                    }
                    Op::Read(b, n) => {
                        let got = read(&dev, b * K4, (n * K4) as usize).await;
                        prop_assert!(got == model[(b * K4) as usize..((b + n) * K4) as usize], "op {}", i);
                    }
                    Op::Flush => dev.flush().await.unwrap(),
                    Op::Clean => {
                        dev.clean_step(u64::MAX / 4).await.unwrap();
                    }
                    Op::Mode(m, f) => dev.set_mode(MODES[m], f).await.unwrap(),
                    Op::Reattach => {
                        dev.flush().await.unwrap();
                        drop(dev);
                        dev = CacheDevice::attach(cache.clone(), core.clone()).await.unwrap();
                    }
                }
            }
            dev.detach().await.unwrap();
            prop_assert!(core.snapshot() == model, "core after detach");
            Ok(())
        })?;
    }
}
