//! Shared test support: a crashable rig (fault device + crashable KV on one power switch, and
//! optionally a fast log device or a cache in front of the data device on the same switch), a
//! reference model of the store, and state dumps to compare the two.
#![allow(dead_code)]

pub mod gated;

use cairn_blockdev::{
    BlockDevice, CrashSwitch, FaultDevice, MemDevice, PowerLossMode, SplitDevice,
};
use cairn_cache::{CacheConfig, CacheDevice, IoClassTable};
use cairn_store::{CrashableKv, KvLocation, KvLossMode, Op, Store, StoreConfig, Transaction};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const DEV_BYTES: u64 = 4 << 20;

/// Durable images of a data device and its KV, of the fast device holding the superblock and
/// log when the store runs on a [`SplitDevice`], and of the cache device when the store runs
/// on a [`CacheDevice`] in front of the data device (an OSD's SSD-cached HDD).
#[derive(Clone)]
pub struct Images {
    pub dev: Vec<u8>,
    pub kv: Vec<u8>,
    pub fast: Option<Vec<u8>>,
    pub cache: Option<Vec<u8>>,
}

/// Armed power cuts of cached rigs, and those among them that came after the cache had
/// written dirty lines back to the data device (by cleaning or to evict them).
pub static CACHED_CRASHES: AtomicU64 = AtomicU64::new(0);
/// See [`CACHED_CRASHES`].
pub static CACHED_CRASHES_AFTER_WRITE_BACK: AtomicU64 = AtomicU64::new(0);

/// A cache in front of a rig's data device: its fault wrapper and memory, and the cache.
pub struct CacheParts {
    pub fault: Arc<FaultDevice>,
    pub mem: Arc<MemDevice>,
    pub device: Arc<CacheDevice>,
}

pub struct Rig {
    pub switch: Arc<CrashSwitch>,
    pub fault: Arc<FaultDevice>,
    pub mem: Arc<MemDevice>,
    /// The fast device of a split store (its fault wrapper and memory), on the same switch.
    pub fast: Option<(Arc<FaultDevice>, Arc<MemDevice>)>,
    /// The cache the store runs on, in front of the data device, on the same switch.
    pub cache: Option<CacheParts>,
    pub kv: CrashableKv,
    pub store: Option<Store>,
}

pub fn cfg() -> StoreConfig {
    StoreConfig {
        deferred_batch_bytes: 16 * 1024,
        kv_cache_bytes: 1 << 20,
        ..StoreConfig::default()
    }
}

/// Makes (mkfs) a store on `dev`, mounts it, creates collection "c" and syncs; returns its
/// KV's durable image.
async fn mkfs_with_collection(dev: Arc<dyn BlockDevice>, conf: &StoreConfig) -> Vec<u8> {
    let kv = CrashableKv::new(Vec::new(), CrashSwitch::new());
    Store::mkfs(dev.clone(), KvLocation::Backend(Box::new(kv.clone())), conf)
        .await
        .unwrap();
    let store = Store::mount(dev, KvLocation::Backend(Box::new(kv.clone())), conf.clone())
        .await
        .unwrap();
    let mut t = Transaction::new();
    t.create_collection("c");
    store.queue_transaction(&t).await.unwrap();
    store.sync().await.unwrap();
    kv.power_loss(KvLossMode::DropUnsynced)
}

/// A freshly made store with one collection "c".
pub async fn fresh_images() -> Images {
    fresh_images_with(&cfg()).await
}

/// A freshly made store with one collection "c", made (mkfs) and mounted with `conf` (the
/// log's size is fixed at mkfs).
pub async fn fresh_images_with(conf: &StoreConfig) -> Images {
    fresh_images_on(conf, false).await
}

/// Bytes of the fast device of a split store of [`DEV_BYTES`] made with `conf`: the
/// superblock and the log ring.
pub fn split_bytes(conf: &StoreConfig) -> u64 {
    conf.block_bytes * (1 + conf.wal_blocks_for(DEV_BYTES))
}

/// As [`fresh_images_with`]; with `split`, the superblock and log on a fast device of their
/// own ([`SplitDevice`]), the data on the main one.
pub async fn fresh_images_on(conf: &StoreConfig, split: bool) -> Images {
    let mem = Arc::new(MemDevice::new(DEV_BYTES, 512).unwrap());
    let fast = split.then(|| Arc::new(MemDevice::new(split_bytes(conf), 512).unwrap()));
    let dev: Arc<dyn BlockDevice> = match &fast {
        Some(fast) => {
            Arc::new(SplitDevice::new(fast.clone(), mem.clone(), split_bytes(conf)).unwrap())
        }
        None => mem.clone(),
    };
    Images {
        kv: mkfs_with_collection(dev, conf).await,
        dev: mem.snapshot(),
        fast: fast.map(|f| f.snapshot()),
        cache: None,
    }
}

/// A freshly made store with one collection "c", on a cache of `cache_bytes` made with
/// `cache_cfg` in front of the data device.
pub async fn fresh_cached_images(
    conf: &StoreConfig,
    cache_cfg: CacheConfig,
    cache_bytes: u64,
) -> Images {
    let mem = Arc::new(MemDevice::new(DEV_BYTES, 512).unwrap());
    let cache_mem = Arc::new(MemDevice::new(cache_bytes, 512).unwrap());
    let cache = Arc::new(
        CacheDevice::create(
            cache_mem.clone(),
            mem.clone(),
            cache_cfg,
            IoClassTable::default(),
        )
        .await
        .unwrap(),
    );
    Images {
        kv: mkfs_with_collection(cache, conf).await,
        dev: mem.snapshot(),
        fast: None,
        cache: Some(cache_mem.snapshot()),
    }
}

impl Rig {
    /// Mounts a store from durable images, on a new power switch (both devices of a split
    /// store, or the cache and the data device of a cached one, on it).
    pub async fn mount(img: &Images, cfg: StoreConfig) -> Result<Rig, cairn_store::StoreError> {
        let switch = CrashSwitch::new();
        let mem = Arc::new(MemDevice::from_image(img.dev.clone(), 512).unwrap());
        let fault = Arc::new(FaultDevice::new(mem.clone(), switch.clone()));
        let fast = img.fast.as_ref().map(|image| {
            let mem = Arc::new(MemDevice::from_image(image.clone(), 512).unwrap());
            (Arc::new(FaultDevice::new(mem.clone(), switch.clone())), mem)
        });
        assert!(
            fast.is_none() || img.cache.is_none(),
            "a rig has a fast log device or a cache, not both"
        );
        let cache = match &img.cache {
            Some(image) => {
                let cache_mem = Arc::new(MemDevice::from_image(image.clone(), 512).unwrap());
                let cache_fault = Arc::new(FaultDevice::new(cache_mem.clone(), switch.clone()));
                let device = CacheDevice::attach(cache_fault.clone(), fault.clone())
                    .await
                    .unwrap_or_else(|e| panic!("the cache does not attach: {e}"));
                Some(CacheParts {
                    fault: cache_fault,
                    mem: cache_mem,
                    device: Arc::new(device),
                })
            }
            None => None,
        };
        let dev: Arc<dyn BlockDevice> = match (&fast, &cache) {
            (Some((fast, fast_mem)), _) => {
                let split_bytes = fast_mem.properties().size_bytes;
                Arc::new(SplitDevice::new(fast.clone(), fault.clone(), split_bytes).unwrap())
            }
            (None, Some(cache)) => cache.device.clone(),
            (None, None) => fault.clone(),
        };
        let kv = CrashableKv::new(img.kv.clone(), switch.clone());
        let store = Store::mount(dev, KvLocation::Backend(Box::new(kv.clone())), cfg).await?;
        Ok(Rig {
            switch,
            fault,
            mem,
            fast,
            cache,
            kv,
            store: Some(store),
        })
    }

    pub fn store(&self) -> &Store {
        self.store.as_ref().unwrap()
    }

    /// Cuts power and returns what survives.
    pub async fn crash(mut self, dev_mode: PowerLossMode, kv_mode: KvLossMode) -> Images {
        if let Some(cache) = self.cache.as_ref().filter(|_| self.switch.crashed()) {
            let stats = cache.device.stats();
            CACHED_CRASHES.fetch_add(1, Ordering::Relaxed);
            let written_back =
                stats.cleaned_lines + stats.victims_cleaned_ahead + stats.victims_cleaned_blocking;
            if written_back > 0 {
                CACHED_CRASHES_AFTER_WRITE_BACK.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.switch.crash_now();
        let kv = self.kv.power_loss(kv_mode);
        self.fault.power_loss(dev_mode).await.unwrap();
        if let Some((fast, _)) = &self.fast {
            fast.power_loss(dev_mode).await.unwrap();
        }
        if let Some(cache) = &self.cache {
            // Its own survivors: the two devices lose power together, not in step.
            let cache_mode = match dev_mode {
                PowerLossMode::RandomSubset { seed } => PowerLossMode::RandomSubset {
                    seed: seed ^ 0xcac4e,
                },
                other => other,
            };
            cache.fault.power_loss(cache_mode).await.unwrap();
        }
        drop(self.store.take());
        Images {
            dev: self.mem.snapshot(),
            kv,
            fast: self.fast.as_ref().map(|(_, mem)| mem.snapshot()),
            cache: self.cache.as_ref().map(|c| c.mem.snapshot()),
        }
    }
}

/// Reference model of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjModel {
    pub data: Vec<u8>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    pub omap: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Reference model of a store: (collection, object) -> object.
pub type Model = BTreeMap<(String, String), ObjModel>;

fn obj<'a>(m: &'a mut Model, c: &str, o: &str) -> &'a mut ObjModel {
    m.entry((c.to_string(), o.to_string())).or_default()
}

/// Applies a transaction to the model; None if the store must reject it (then the model is
/// unchanged).
pub fn model_apply(m: &Model, t: &Transaction) -> Option<Model> {
    let mut m = m.clone();
    for op in &t.ops {
        match op {
            Op::Touch { coll, obj: o } => {
                obj(&mut m, coll, o);
            }
            Op::Write {
                coll,
                obj: o,
                offset_bytes,
                data,
                ..
            } => {
                let x = obj(&mut m, coll, o);
                let end = *offset_bytes as usize + data.len();
                if x.data.len() < end && !data.is_empty() {
                    x.data.resize(end, 0);
                }
                if !data.is_empty() {
                    x.data[*offset_bytes as usize..end].copy_from_slice(data);
                }
            }
            Op::Zero {
                coll,
                obj: o,
                offset_bytes,
                len_bytes,
            } => {
                let x = obj(&mut m, coll, o);
                let end = (*offset_bytes + *len_bytes) as usize;
                if x.data.len() < end {
                    x.data.resize(end, 0);
                }
                x.data[*offset_bytes as usize..end].fill(0);
            }
            Op::Truncate {
                coll,
                obj: o,
                size_bytes,
            } => {
                obj(&mut m, coll, o).data.resize(*size_bytes as usize, 0);
            }
            Op::Remove { coll, obj: o } => {
                m.remove(&(coll.clone(), o.clone()))?;
            }
            Op::Clone { coll, src, dst } => {
                let s = m.get(&(coll.clone(), src.clone()))?.clone();
                m.insert((coll.clone(), dst.clone()), s);
            }
            Op::Rename { coll, src, dst } => {
                let s = m.get(&(coll.clone(), src.clone()))?.clone();
                if src != dst {
                    m.remove(&(coll.clone(), src.clone()));
                    m.insert((coll.clone(), dst.clone()), s);
                }
            }
            Op::SetAttr {
                coll,
                obj: o,
                name,
                value,
            } => {
                obj(&mut m, coll, o)
                    .xattrs
                    .insert(name.clone(), value.clone());
            }
            Op::RmAttr { coll, obj: o, name } => {
                m.get_mut(&(coll.clone(), o.clone()))?.xattrs.remove(name);
            }
            Op::OmapSet {
                coll,
                obj: o,
                entries,
            } => {
                let x = obj(&mut m, coll, o);
                for (k, v) in entries {
                    x.omap.insert(k.clone(), v.clone());
                }
            }
            Op::OmapRemove { coll, obj: o, keys } => {
                let x = m.get_mut(&(coll.clone(), o.clone()))?;
                for k in keys {
                    x.omap.remove(k);
                }
            }
            Op::CreateCollection { .. } | Op::RemoveCollection { .. } => {}
        }
    }
    Some(m)
}

/// Everything the store holds, in model form.
pub async fn dump(s: &Store) -> Model {
    let mut m = Model::new();
    for c in s.list_collections().await.unwrap() {
        let mut listed = cairn_store::CollectionUsage::default();
        for o in s.list_objects(&c, None, 100_000).await.unwrap() {
            let size = s.stat(&c, &o).await.unwrap().size_bytes;
            let data = s.read(&c, &o, 0, size).await.unwrap().to_vec();
            assert_eq!(data.len() as u64, size);
            listed.objects += 1;
            listed.bytes += size;
            let xattrs = s.getattrs(&c, &o).await.unwrap().into_iter().collect();
            let omap = s.omap_get(&c, &o).await.unwrap().into_iter().collect();
            m.insert((c.clone(), o), ObjModel { data, xattrs, omap });
        }
        assert_eq!(
            s.collection_usage(&c).await.unwrap(),
            listed,
            "collection {c}: the usage the store keeps against its listing"
        );
    }
    m
}

/// Deterministic bytes for a (seed, length).
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
