//! The metadata KV: redb table layout and the storage backends redb runs on.
//!
//! Owns the table definitions, a byte/sync-counting wrapper (for write-amplification figures),
//! and [`CrashableKv`], an in-memory backend that shares a [`CrashSwitch`] with a
//! [`cairn_blockdev::FaultDevice`] so crash tests cut power to data and metadata at one point.
//! A redb commit with `Durability::Immediate` is the store's atomic commit point.
//! This module must never interpret table contents (that is `codec`'s job).

use crate::error::{kv, Result};
use crate::keyfilter::KeyFilter;
use cairn_blockdev::CrashSwitch;
use cairn_convert::usize_of;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redb::{Database, ReadOnlyTable, StorageBackend, TableDefinition};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Store identity and counters: name -> sealed value.
pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Collections: name -> sealed u32 id.
pub const COLLS: TableDefinition<&str, &[u8]> = TableDefinition::new("collections");
/// Objects: onode key -> sealed onode.
pub const ONODES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("onodes");
/// Object data: extent key (object prefix ++ first logical block) -> sealed extent
/// (physical start, length, crc32c per block).
pub const EXTENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("extents");
/// Extended attributes: object prefix ++ name -> sealed value.
pub const XATTRS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("xattrs");
/// Object maps: object prefix ++ key -> sealed value.
pub const OMAP: TableDefinition<&[u8], &[u8]> = TableDefinition::new("omap");
/// Deferred block writes (the KV is their write-ahead log): physical block -> sealed contents.
pub const DEFERRED: TableDefinition<u64, &[u8]> = TableDefinition::new("deferred");

/// One redb read snapshot with every table open. Staging and reads share it until the overlay
/// next drops a layer (see `overlay::Overlay::snapshot`), instead of opening a transaction and
/// seven tables for every group and every cache miss. Each table keeps the snapshot alive.
pub(crate) struct KvSnapshot {
    pub(crate) meta: ReadOnlyTable<&'static str, &'static [u8]>,
    pub(crate) colls: ReadOnlyTable<&'static str, &'static [u8]>,
    pub(crate) onodes: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(crate) extents: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(crate) xattrs: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(crate) omap: ReadOnlyTable<&'static [u8], &'static [u8]>,
    pub(crate) deferred: ReadOnlyTable<u64, &'static [u8]>,
    /// Values of `colls` found in this snapshot so far (every write looks its collection up).
    pub(crate) colls_found: FoundMemo,
    /// Values of `onodes` found in this snapshot so far (a PG's meta object, whose onode every
    /// OSD write of that PG looks up for its log entry, is read from here, not from redb).
    pub(crate) onodes_found: FoundMemo,
    /// Every key `onodes` may hold (see [`KeyFilter`]): a key it does not hold is not looked
    /// up in redb.
    pub(crate) onode_keys: Arc<KeyFilter>,
}

/// Most entries a [`FoundMemo`] holds before it starts afresh (explicit memory limit).
const FOUND_MEMO_ENTRIES: usize = 4096;
/// Longest value a [`FoundMemo`] keeps, bytes.
const FOUND_MEMO_VALUE_BYTES: usize = 256;

/// Values found in one table of an immutable snapshot, kept so that keys looked up again and
/// again skip redb's B-tree search. Always right: the snapshot never changes, and the memo is
/// dropped with it. Keeps only keys that were found (a miss is usually a new object, looked up
/// once), values of at most `FOUND_MEMO_VALUE_BYTES`, and at most `FOUND_MEMO_ENTRIES`.
#[derive(Debug, Default)]
pub(crate) struct FoundMemo(Mutex<std::collections::HashMap<Vec<u8>, Vec<u8>>>);

impl FoundMemo {
    /// The value found for `key` earlier, if any.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Remembers that `key` holds `value` in the snapshot, within the limits.
    pub(crate) fn found(&self, key: &[u8], value: &[u8]) {
        if value.len() > FOUND_MEMO_VALUE_BYTES {
            return;
        }
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= FOUND_MEMO_ENTRIES {
            m.clear();
        }
        m.insert(key.to_vec(), value.to_vec());
    }
}

impl KvSnapshot {
    /// The KV as its latest commit left it; `onode_keys` covers its onode table.
    pub(crate) fn open(db: &Database, onode_keys: &Arc<KeyFilter>) -> Result<Self> {
        let r = db.begin_read().map_err(kv)?;
        Ok(Self {
            meta: r.open_table(META).map_err(kv)?,
            colls: r.open_table(COLLS).map_err(kv)?,
            onodes: r.open_table(ONODES).map_err(kv)?,
            extents: r.open_table(EXTENTS).map_err(kv)?,
            xattrs: r.open_table(XATTRS).map_err(kv)?,
            omap: r.open_table(OMAP).map_err(kv)?,
            deferred: r.open_table(DEFERRED).map_err(kv)?,
            colls_found: FoundMemo::default(),
            onodes_found: FoundMemo::default(),
            onode_keys: onode_keys.clone(),
        })
    }
}

impl std::fmt::Debug for KvSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvSnapshot")
    }
}

/// Bytes and syncs the KV has issued to its storage.
#[derive(Debug, Default)]
pub struct KvCounters {
    /// Bytes written.
    pub bytes_written: AtomicU64,
    /// `sync_data` calls.
    pub syncs: AtomicU64,
}

/// Wraps any redb backend and counts its writes and syncs.
#[derive(Debug)]
pub struct CountingBackend {
    inner: Box<dyn StorageBackend>,
    counters: Arc<KvCounters>,
}

impl CountingBackend {
    /// Wraps `inner`, counting into `counters`.
    pub fn new(inner: Box<dyn StorageBackend>, counters: Arc<KvCounters>) -> Self {
        Self { inner, counters }
    }
}

impl StorageBackend for CountingBackend {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.inner.read(offset, len)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self, eventual: bool) -> io::Result<()> {
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset, data)
    }
}

/// What survives a power loss of the KV's storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLossMode {
    /// Writes since the last sync are lost.
    DropUnsynced,
    /// Each write since the last sync survives with probability 1/2 (seeded).
    RandomSubset {
        /// ChaCha8 seed.
        seed: u64,
    },
}

#[derive(Debug, Default)]
struct Images {
    durable: Vec<u8>,
    volatile: Vec<u8>,
    unsynced: Vec<(u64, Vec<u8>)>,
}

/// An in-memory redb backend with power-loss semantics, driven by a shared [`CrashSwitch`].
#[derive(Debug, Clone)]
pub struct CrashableKv {
    images: Arc<Mutex<Images>>,
    switch: Arc<CrashSwitch>,
}

fn power_lost() -> io::Error {
    io::Error::other("power lost")
}

impl CrashableKv {
    /// A backend starting from `image` (empty for a new store). Clone it to keep a handle for
    /// [`CrashableKv::power_loss`] after giving one to redb.
    pub fn new(image: Vec<u8>, switch: Arc<CrashSwitch>) -> Self {
        Self {
            images: Arc::new(Mutex::new(Images {
                durable: image.clone(),
                volatile: image,
                unsynced: Vec::new(),
            })),
            switch,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Images> {
        self.images.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The storage image as written, synced or not: what a process that crashed leaves (the
    /// kernel keeps its writes). Refuses every later read and write of this backend, as the
    /// dead process makes none.
    pub fn as_written(&self) -> Vec<u8> {
        self.switch.crash_now();
        self.lock().volatile.clone()
    }

    /// The storage image after power loss under `mode` (cuts power if not already cut).
    pub fn power_loss(&self, mode: KvLossMode) -> Vec<u8> {
        self.switch.crash_now();
        let im = self.lock();
        let mut img = im.durable.clone();
        if let KvLossMode::RandomSubset { seed } = mode {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for (off, data) in &im.unsynced {
                if rng.random_bool(0.5) {
                    let end = usize_of(*off) + data.len();
                    if img.len() < end {
                        img.resize(end, 0);
                    }
                    img[usize_of(*off)..end].copy_from_slice(data);
                }
            }
        }
        img
    }
}

impl StorageBackend for CrashableKv {
    fn len(&self) -> io::Result<u64> {
        Ok(self.lock().volatile.len() as u64)
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        if self.switch.crashed() {
            return Err(power_lost());
        }
        let im = self.lock();
        let start = usize_of(offset);
        im.volatile
            .get(start..start + len)
            .map(|s| s.to_vec())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past end"))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.switch.crashed() {
            return Err(power_lost());
        }
        let mut im = self.lock();
        im.volatile.resize(usize_of(len), 0);
        im.durable.resize(usize_of(len), 0);
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        if !self.switch.tick("kv-sync") {
            return Err(power_lost());
        }
        let mut im = self.lock();
        let pending = std::mem::take(&mut im.unsynced);
        for (off, data) in pending {
            let end = usize_of(off) + data.len();
            if im.durable.len() < end {
                im.durable.resize(end, 0);
            }
            im.durable[usize_of(off)..end].copy_from_slice(&data);
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if !self.switch.tick("kv-write") {
            return Err(power_lost());
        }
        let mut im = self.lock();
        let end = usize_of(offset) + data.len();
        if im.volatile.len() < end {
            im.volatile.resize(end, 0);
        }
        im.volatile[usize_of(offset)..end].copy_from_slice(data);
        im.unsynced.push((offset, data.to_vec()));
        Ok(())
    }
}

/// Lets a boxed backend be handed to redb.
#[derive(Debug)]
pub(crate) struct DynBackend(pub Box<dyn StorageBackend>);

impl StorageBackend for DynBackend {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.0.read(offset, len)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self, eventual: bool) -> io::Result<()> {
        self.0.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write(offset, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_memo_keeps_short_values_within_its_entry_limit() {
        let m = FoundMemo::default();
        m.found(b"k", b"v");
        assert_eq!(m.get(b"k"), Some(b"v".to_vec()));
        assert_eq!(m.get(b"other"), None);
        m.found(b"long", &[7; FOUND_MEMO_VALUE_BYTES + 1]);
        assert_eq!(m.get(b"long"), None, "long values are not kept");
        for i in 0..FOUND_MEMO_ENTRIES {
            m.found(&i.to_le_bytes(), b"x");
        }
        let held = m.0.lock().unwrap().len();
        assert!(held <= FOUND_MEMO_ENTRIES, "{held} entries");
        assert_eq!(
            m.get(&(FOUND_MEMO_ENTRIES - 1).to_le_bytes()),
            Some(b"x".to_vec())
        );
    }

    #[test]
    fn crashable_kv_drops_unsynced_writes() {
        let sw = CrashSwitch::new();
        let kv = CrashableKv::new(Vec::new(), sw.clone());
        kv.write(0, &[1; 8]).unwrap();
        kv.sync_data(false).unwrap();
        kv.write(0, &[2; 8]).unwrap();
        assert_eq!(kv.read(0, 8).unwrap(), vec![2; 8]);
        assert_eq!(kv.power_loss(KvLossMode::DropUnsynced), vec![1; 8]);
        assert!(kv.write(0, &[3; 8]).is_err());
        assert!(sw.crashed());
    }
}
