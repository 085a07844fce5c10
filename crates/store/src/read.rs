//! The read path: object data (verified block by block), stat, xattrs, omap and ordered listing.
//!
//! Owns reads under the shared lock (concurrent with each other, never with a commit), from the
//! onode cache or a redb read snapshot seen through the overlay of changes since the last
//! checkpoint. It must never return a byte of a block whose crc32c does not match: a mismatch is
//! [`StoreError::ChecksumMismatch`].

use crate::cache::{CachedObject, MAX_CACHED_EXTENT_BYTES};
use crate::codec::{self, object_prefix, onode_key, prefix_end, sub_key, Extent, Onode};
use crate::error::{Result, StoreError};
use crate::extmap::{self, InTable};
use crate::kv::KvSnapshot;
use crate::overlay::Layered;
use crate::stage::BytesTable;
use crate::store::{ObjectStat, State, Store};
use crate::txn::DataCrcs;
use crate::usage::CollectionUsage;
use bytes::Bytes;
use cairn_convert::usize_of;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::RwLockReadGuard;

/// The committed KV as readers see it: a redb snapshot under the overlay (read it only while
/// holding the store's shared lock, which guards the overlay).
struct View<'a> {
    snap: Arc<KvSnapshot>,
    st: &'a State,
}

/// The byte-keyed tables readers look into.
#[derive(Clone, Copy)]
enum ByteTable {
    Onodes,
    Extents,
    Xattrs,
    Omap,
}

impl View<'_> {
    /// A byte-keyed table through the overlay.
    fn table(&self, which: ByteTable) -> BytesTable<'_> {
        // Indexes are the tables' places in the overlay (the order of `wal::Redo`).
        let (base, index) = match which {
            ByteTable::Onodes => (&self.snap.onodes, 2),
            ByteTable::Extents => (&self.snap.extents, 3),
            ByteTable::Xattrs => (&self.snap.xattrs, 4),
            ByteTable::Omap => (&self.snap.omap, 5),
        };
        Layered::new(base, self.st.overlay.layers(index))
    }

    fn colls(&self) -> Layered<'_, &'static str, &'static [u8]> {
        Layered::new(&self.snap.colls, self.st.overlay.layers(1)).with_found(&self.snap.colls_found)
    }

    fn onodes(&self) -> BytesTable<'_> {
        self.table(ByteTable::Onodes)
            .with_found(&self.snap.onodes_found)
            .with_key_filter(&self.snap.onode_keys)
    }

    fn extents(&self) -> BytesTable<'_> {
        self.table(ByteTable::Extents)
    }
}

/// One page of an omap, from [`Store::omap_page`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OmapPage {
    /// Entries (key, value) in key order.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// True when entries after the last one returned match too.
    pub more: bool,
}

/// Most entries one listing call returns (explicit limit).
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Device reads one read of a fragmented object keeps in flight at once (BlueStore submits
/// all of a read's extents together; a bound keeps one read from filling the device's queue).
pub const RUNS_IN_FLIGHT: usize = 16;

impl Store {
    fn view<'a>(&self, st: &'a State) -> Result<View<'a>> {
        Ok(View {
            snap: st.overlay.snapshot(&self.db, &self.onode_keys)?,
            st,
        })
    }

    fn read_coll_id(v: &View<'_>, coll: &str) -> Result<u32> {
        match v.colls().get(coll)? {
            Some(b) => codec::le_u32(codec::open(&b, "collection")?, 0, "collection"),
            None => Err(StoreError::NoSuchCollection(coll.to_string())),
        }
    }

    fn read_onode(v: &View<'_>, id: u32, coll: &str, obj: &str) -> Result<Onode> {
        match v.onodes().get(onode_key(id, obj).as_slice())? {
            Some(b) => Onode::decode(&b),
            None => Err(StoreError::NoSuchObject {
                collection: coll.to_string(),
                object: obj.to_string(),
            }),
        }
    }

    /// Committed metadata of an object: from the onode cache, else from the KV (and then cached
    /// when its extent map is small enough). Callers hold the shared lock (`st`).
    fn object_meta(&self, st: &State, coll: &str, obj: &str) -> Result<Arc<CachedObject>> {
        if let Some(o) = self.onode_cache.get(coll, obj) {
            return Ok(o);
        }
        let v = self.view(st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let mut node = Self::read_onode(&v, id, coll, obj)?;
        let blocks = node.size_bytes.div_ceil(self.sb.block_bytes);
        let extents = if !node.extents_spilled {
            Some(std::mem::take(&mut node.extents))
        } else if blocks.saturating_mul(4) <= MAX_CACHED_EXTENT_BYTES as u64 {
            let prefix = object_prefix(id, obj);
            let table = v.extents();
            Some(extmap::all(&InTable {
                table: &table,
                prefix: &prefix,
            })?)
        } else {
            None
        };
        let whole = extents.is_some();
        let o = Arc::new(CachedObject::new(node, extents));
        if whole {
            self.onode_cache.insert(coll, obj, o.clone());
        }
        Ok(o)
    }

    /// Extents of an object intersecting logical blocks `from..to`.
    fn extents_in(
        &self,
        st: &State,
        coll: &str,
        obj: &str,
        meta: &CachedObject,
        from: u64,
        to: u64,
    ) -> Result<Vec<Extent>> {
        if meta.whole_map {
            let i = meta.extents.partition_point(|e| e.lend() <= from);
            return Ok(meta.extents[i..]
                .iter()
                .take_while(|e| e.lblock < to)
                .cloned()
                .collect());
        }
        let v = self.view(st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let (prefix, table) = (object_prefix(id, obj), v.extents());
        let map = InTable {
            table: &table,
            prefix: &prefix,
        };
        extmap::overlapping(&map, from, Some(to))
    }

    /// Reads up to `len_bytes` from `offset_bytes` (short at the end of the object; holes read
    /// as zeros). Every block is verified against its crc32c.
    pub async fn read(
        &self,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<Bytes> {
        Ok(self
            .read_checksummed(coll, obj, offset_bytes, len_bytes)
            .await?
            .0)
    }

    /// Like [`Store::read`], with the crc32c of every whole block at the front of the returned
    /// bytes (none when `offset_bytes` is not block-aligned; a short last block has none): the
    /// checksums the blocks were just verified against, so a caller can checksum the bytes
    /// without reading them again. A read of whole blocks that lie together on the device is
    /// read straight into the returned buffer.
    pub async fn read_checksummed(
        &self,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(Bytes, DataCrcs)> {
        self.check_ok()?;
        let st = self.state.read().await;
        let meta = self.object_meta(&st, coll, obj)?;
        self.read_meta(st, &meta, coll, obj, offset_bytes, len_bytes)
            .await
    }

    /// Like [`Store::read_checksummed`], with the value of attribute `attr` (`None` when the
    /// object has none) from the same committed state: what a caller that answers with the
    /// object's version needs, in one metadata lookup instead of two.
    pub async fn read_checksummed_with_attr(
        &self,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        len_bytes: u64,
        attr: &str,
    ) -> Result<(Bytes, DataCrcs, Option<Vec<u8>>)> {
        self.check_ok()?;
        let st = self.state.read().await;
        let meta = self.object_meta(&st, coll, obj)?;
        let value = self.attr_of(&st, &meta, coll, obj, attr)?;
        let (bytes, crcs) = self
            .read_meta(st, &meta, coll, obj, offset_bytes, len_bytes)
            .await?;
        Ok((bytes, crcs, value))
    }

    /// The read of [`Store::read_checksummed`] once the object's metadata is known: the blocks
    /// to read (and the contents of those with a deferred write pending) are resolved under the
    /// state lock `st`, which is let go before the device is read; a [`crate::pins::ReadPin`]
    /// keeps those blocks from reuse or rewriting in place until the read ends.
    async fn read_meta(
        &self,
        st: RwLockReadGuard<'_, State>,
        meta: &CachedObject,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(Bytes, DataCrcs)> {
        let bs = self.sb.block_bytes;
        let end = offset_bytes.saturating_add(len_bytes).min(meta.size_bytes);
        if end <= offset_bytes {
            let crcs = DataCrcs {
                block_bytes: bs,
                crcs: Arc::from(&[][..]),
            };
            return Ok((Bytes::new(), crcs));
        }
        if end - offset_bytes > self.cfg.max_read_bytes {
            return Err(StoreError::Limit(format!(
                "read of {} bytes > max_read_bytes {}",
                end - offset_bytes,
                self.cfg.max_read_bytes
            )));
        }
        let (first, last) = (offset_bytes / bs, (end - 1) / bs);
        let pieces: Vec<Extent> = self
            .extents_in(&st, coll, obj, meta, first, last + 1)?
            .iter()
            .map(|e| e.slice(first, last + 1))
            .collect();
        let pending = pending_deferred(&st, &pieces);
        let pin = self.pins.enter();
        drop(st);
        let (window, crcs) = self
            .read_window(coll, obj, first, last + 1 - first, &pieces, &pending)
            .await?;
        drop(pin);
        let skip = usize_of(offset_bytes - first * bs);
        let bytes = window.slice(skip..skip + usize_of(end - offset_bytes));
        let whole = if skip == 0 {
            bytes.len() / usize_of(bs)
        } else {
            0
        };
        let crcs = DataCrcs {
            block_bytes: bs,
            crcs: Arc::from(&crcs[..whole]),
        };
        Ok((bytes, crcs))
    }

    /// Reads `blocks` logical blocks from `first` (extent `pieces` in logical order; blocks
    /// without one are holes and read as zeros) and verifies each; returns the bytes and each
    /// block's crc32c. When one device run covers the whole window it is read straight into
    /// the returned buffer; otherwise runs are read into the window one by one.
    async fn read_window(
        &self,
        coll: &str,
        obj: &str,
        first: u64,
        blocks: u64,
        pieces: &[Extent],
        pending: &PendingDeferred,
    ) -> Result<(Bytes, Vec<u32>)> {
        let bs = self.sb.block_bytes;
        let len = usize_of(blocks * bs);
        let runs = self.device_runs(pieces);
        let covered: u64 = pieces.iter().map(Extent::blocks).sum();
        let on_device = std::time::Instant::now();
        let mut buf = match runs.as_slice() {
            [(_, _, n)] if *n == blocks => {
                let buf = self.bufs.take(len)?;
                self.raw_read_owned(pieces[0].pblock * bs, buf)
                    .await
                    .map_err(|e| self.data_read_error(e, coll, obj))?
            }
            _ => {
                let mut buf = self.bufs.take(len)?;
                let window = buf.as_mut_slice();
                if covered < blocks {
                    window.fill(0);
                }
                self.read_runs(window, first, pieces, &runs)
                    .await
                    .map_err(|e| self.data_read_error(e, coll, obj))?;
                buf
            }
        };
        crate::apply::elapsed_into(&self.counters.read_device_ns, on_device);
        let hole_crc = if covered < blocks {
            crc_fast::crc32_iscsi(&vec![0u8; usize_of(bs)])
        } else {
            0
        };
        let mut crcs = vec![hole_crc; usize_of(blocks)];
        let window = buf.as_mut_slice();
        for e in pieces {
            for (n, &crc) in e.crcs.iter().enumerate() {
                let at = usize_of((e.lblock + n as u64 - first) * bs);
                let block = &mut window[at..at + usize_of(bs)];
                if let Some(d) = pending.get(&(e.pblock + n as u64)) {
                    block.copy_from_slice(d);
                }
                self.verify(coll, obj, e.lblock + n as u64, crc, block)?;
                crcs[usize_of(e.lblock + n as u64 - first)] = crc;
            }
        }
        Ok((self.bufs.lend(buf), crcs))
    }

    /// Reads each device run of `runs` (of extent `pieces`, in logical order from block
    /// `first`) into its place in `window`, up to [`RUNS_IN_FLIGHT`] at once: an object
    /// rewritten in small pieces lies in many runs, and one at a time each waits out the
    /// device's whole latency (a 1 MiB read of 256 runs took a quarter of a second on an
    /// emulated NVMe device).
    async fn read_runs(
        &self,
        window: &mut [u8],
        first: u64,
        pieces: &[Extent],
        runs: &[(usize, usize, u64)],
    ) -> std::result::Result<(), cairn_blockdev::BlockDevError> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let bs = self.sb.block_bytes;
        let mut rest = window;
        let mut rest_at = 0usize;
        let mut reads = Vec::with_capacity(runs.len());
        for &(i, _, n) in runs {
            let at = usize_of((pieces[i].lblock - first) * bs);
            assert!(at >= rest_at, "device runs out of logical order");
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(at - rest_at);
            let (run, tail) = tail.split_at_mut(usize_of(n * bs));
            rest_at = at + run.len();
            rest = tail;
            reads.push(self.raw_read(pieces[i].pblock * bs, run));
        }
        stream::iter(reads)
            .buffer_unordered(RUNS_IN_FLIGHT)
            .try_collect::<()>()
            .await
    }

    /// Groups extent pieces into device runs: (first piece, end piece, blocks) for neighbours
    /// contiguous both logically and physically, at most `max_io_bytes` each.
    fn device_runs(&self, pieces: &[Extent]) -> Vec<(usize, usize, u64)> {
        let max_run = (self.cfg.max_io_bytes / self.sb.block_bytes).max(1);
        let mut runs = Vec::new();
        let mut i = 0;
        while i < pieces.len() {
            let mut j = i + 1;
            let mut blocks = pieces[i].blocks();
            while j < pieces.len()
                && pieces[j].lblock == pieces[j - 1].lend()
                && pieces[j].pblock == pieces[j - 1].pblock + pieces[j - 1].blocks()
                && blocks + pieces[j].blocks() <= max_run
            {
                blocks += pieces[j].blocks();
                j += 1;
            }
            runs.push((i, j, blocks));
            i = j;
        }
        runs
    }

    pub(crate) fn verify(
        &self,
        coll: &str,
        obj: &str,
        idx: u64,
        expected: u32,
        data: &[u8],
    ) -> Result<()> {
        let actual = crc_fast::crc32_iscsi(data);
        if actual != expected {
            return Err(StoreError::ChecksumMismatch {
                collection: coll.to_string(),
                object: obj.to_string(),
                block_index: idx,
                expected_crc: expected,
                actual_crc: actual,
            });
        }
        Ok(())
    }

    /// Where on the device the byte at `offset_bytes` of an object lives, if the onode cache
    /// knows it now: no I/O and no wait on the store's lock, so a scheduler can order requests
    /// by physical offset (ORR) before they run. A hint only: a commit racing with it may have
    /// moved the block. `None` when the object is not cached or the byte is a hole.
    pub fn physical_offset_hint(&self, coll: &str, obj: &str, offset_bytes: u64) -> Option<u64> {
        let bs = self.sb.block_bytes;
        let block = offset_bytes / bs;
        let o = self.onode_cache.peek(coll, obj)?;
        let e = o
            .extents
            .iter()
            .find(|e| e.lblock <= block && block < e.lblock + e.blocks())?;
        let pblock = e.pblock + (block - e.lblock);
        Some(pblock * bs + offset_bytes % bs)
    }

    /// An object's logical size, if the onode cache knows it now: no I/O and no wait on the
    /// store's lock, so a scheduler can charge a read of "the rest of the object" its real
    /// length before it runs. A hint only, as [`Store::physical_offset_hint`].
    pub fn size_hint(&self, coll: &str, obj: &str) -> Option<u64> {
        self.onode_cache.peek(coll, obj).map(|o| o.size_bytes)
    }

    /// Where an object's data lives: (logical block index, physical block) pairs in index order.
    /// For scrub tooling, debugging and tests; holes have no entry.
    pub async fn extents(&self, coll: &str, obj: &str) -> Result<Vec<(u64, u64)>> {
        self.check_ok()?;
        let st = self.state.read().await;
        let v = self.view(&st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let node = Self::read_onode(&v, id, coll, obj)?;
        let extents = match node.extents_spilled {
            true => {
                let (prefix, table) = (object_prefix(id, obj), v.extents());
                extmap::all(&InTable {
                    table: &table,
                    prefix: &prefix,
                })?
            }
            false => node.extents,
        };
        Ok(extents
            .iter()
            .flat_map(|e| (0..e.blocks()).map(move |i| (e.lblock + i, e.pblock + i)))
            .collect())
    }

    /// Size of an object.
    pub async fn stat(&self, coll: &str, obj: &str) -> Result<ObjectStat> {
        self.check_ok()?;
        let st = self.state.read().await;
        let meta = self.object_meta(&st, coll, obj)?;
        Ok(ObjectStat {
            size_bytes: meta.size_bytes,
        })
    }

    /// True if the object exists (false also for a missing collection).
    pub async fn exists(&self, coll: &str, obj: &str) -> Result<bool> {
        match self.stat(coll, obj).await {
            Ok(_) => Ok(true),
            Err(StoreError::NoSuchObject { .. }) | Err(StoreError::NoSuchCollection(_)) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// One extended attribute (a point lookup; the object's existence, and a small attribute
    /// read before, come from the onode cache when it is there).
    pub async fn getattr(&self, coll: &str, obj: &str, name: &str) -> Result<Vec<u8>> {
        self.check_ok()?;
        let st = self.state.read().await;
        let meta = self.object_meta(&st, coll, obj)?;
        self.attr_of(&st, &meta, coll, obj, name)?
            .ok_or_else(|| StoreError::NoSuchAttr(name.to_string()))
    }

    /// Attribute `name` of an object whose metadata is `meta` (`None`: it has none): from the
    /// onode or, when the object has attributes in the xattr table, from what was looked up
    /// before, else one KV point lookup (then remembered).
    fn attr_of(
        &self,
        st: &State,
        meta: &CachedObject,
        coll: &str,
        obj: &str,
        name: &str,
    ) -> Result<Option<Vec<u8>>> {
        if let Some(known) = meta.attr(name) {
            return Ok(known);
        }
        let v = self.view(st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let key = sub_key(&object_prefix(id, obj), name.as_bytes());
        let value = match v.table(ByteTable::Xattrs).get(key.as_slice())? {
            Some(val) => Some(codec::open(&val, "xattr value")?.to_vec()),
            None => None,
        };
        meta.remember_attr(name, value.as_deref());
        Ok(value)
    }

    /// All extended attributes, sorted by name: the onode's, and the xattr table's when the
    /// object has some there.
    pub async fn getattrs(&self, coll: &str, obj: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.check_ok()?;
        let st = self.state.read().await;
        let v = self.view(&st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let node = Self::read_onode(&v, id, coll, obj)?;
        let mut out = node.attrs;
        if node.spilled {
            for (k, val) in Self::prefix_entries(&v, id, obj, ByteTable::Xattrs)? {
                let name = String::from_utf8(k)
                    .map_err(|_| StoreError::Corrupt("attribute name is not UTF-8".into()))?;
                out.push((name, val));
            }
            out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        Ok(out)
    }

    /// All omap entries, sorted by key.
    pub async fn omap_get(&self, coll: &str, obj: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.sub_entries(coll, obj, ByteTable::Omap).await
    }

    /// One page of an object's omap in key order: entries whose key starts with `prefix` and is
    /// greater than `after` (empty: from the first), at most `max` of them (clamped to
    /// `1..=MAX_LIST_ENTRIES`), and whether more follow. Reads only the page, not the whole
    /// omap, so paging through a large index object costs one page per call.
    pub async fn omap_page(
        &self,
        coll: &str,
        obj: &str,
        after: &[u8],
        prefix: &[u8],
        max: usize,
    ) -> Result<OmapPage> {
        self.check_ok()?;
        let max = max.clamp(1, MAX_LIST_ENTRIES);
        let st = self.state.read().await;
        self.object_meta(&st, coll, obj)?;
        let v = self.view(&st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let object = object_prefix(id, obj);
        let lo_prefix = sub_key(&object, prefix);
        let hi = prefix_end(&lo_prefix);
        let lo = if after.is_empty() || after < prefix {
            lo_prefix.clone()
        } else {
            // The first key after `after`: `after` followed by a zero byte.
            let mut k = sub_key(&object, after);
            k.push(0);
            k
        };
        if hi.as_deref().is_some_and(|hi| lo.as_slice() >= hi) {
            return Ok(OmapPage::default());
        }
        let mut entries = Vec::new();
        for (k, val) in v
            .table(ByteTable::Omap)
            .range(&lo, hi.as_deref(), max + 1)?
        {
            entries.push((
                k[object.len()..].to_vec(),
                codec::open(&val, "omap value")?.to_vec(),
            ));
        }
        let more = entries.len() > max;
        entries.truncate(max);
        Ok(OmapPage { entries, more })
    }

    async fn sub_entries(
        &self,
        coll: &str,
        obj: &str,
        table: ByteTable,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.check_ok()?;
        let st = self.state.read().await;
        let v = self.view(&st)?;
        let id = Self::read_coll_id(&v, coll)?;
        Self::read_onode(&v, id, coll, obj)?;
        Self::prefix_entries(&v, id, obj, table)
    }

    /// Every entry of `table` under an object's prefix: (user key, value), in key order.
    fn prefix_entries(
        v: &View<'_>,
        id: u32,
        obj: &str,
        table: ByteTable,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let prefix = object_prefix(id, obj);
        let t = v.table(table);
        let mut out = Vec::new();
        for (k, val) in t.range(&prefix, prefix_end(&prefix).as_deref(), usize::MAX)? {
            let user_key = k[prefix.len()..].to_vec();
            out.push((user_key, codec::open(&val, "xattr/omap value")?.to_vec()));
        }
        Ok(out)
    }

    /// Object names of a collection in byte order, strictly after `after` (if given), at most
    /// `max_entries` (<= [`MAX_LIST_ENTRIES`]). Page through with the last name returned.
    pub async fn list_objects(
        &self,
        coll: &str,
        after: Option<&str>,
        max_entries: usize,
    ) -> Result<Vec<String>> {
        self.list_onodes(coll, after, max_entries, |name, _| Ok(name))
            .await
    }

    /// As [`Store::list_objects`], each name with its object's logical size: what a pool's
    /// usage sums, without a lookup per object.
    pub async fn list_objects_sized(
        &self,
        coll: &str,
        after: Option<&str>,
        max_entries: usize,
    ) -> Result<Vec<(String, u64)>> {
        self.list_onodes(coll, after, max_entries, |name, value| {
            Ok((name, Onode::decode(value)?.size_bytes))
        })
        .await
    }

    /// One page of a collection's onodes in key order, each name and encoded onode mapped
    /// through `each`.
    async fn list_onodes<T>(
        &self,
        coll: &str,
        after: Option<&str>,
        max_entries: usize,
        mut each: impl FnMut(String, &[u8]) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.check_ok()?;
        if max_entries > MAX_LIST_ENTRIES {
            return Err(StoreError::Limit(format!(
                "listing of {max_entries} > {MAX_LIST_ENTRIES} entries"
            )));
        }
        let st = self.state.read().await;
        let v = self.view(&st)?;
        let id = Self::read_coll_id(&v, coll)?;
        let t = v.onodes();
        let start = match after {
            Some(a) => {
                let mut k = onode_key(id, a);
                k.push(0);
                k
            }
            None => id.to_be_bytes().to_vec(),
        };
        let end = id.checked_add(1).map(u32::to_be_bytes);
        let mut out = Vec::new();
        for (k, value) in t.range(&start, end.as_ref().map(|e| e.as_slice()), max_entries)? {
            let name = k
                .get(4..)
                .and_then(|n| std::str::from_utf8(n).ok())
                .ok_or_else(|| StoreError::Corrupt("object name is not UTF-8".into()))?;
            out.push(each(name.to_string(), &value)?);
        }
        Ok(out)
    }

    /// How many objects collection `coll` holds and their logical bytes, as of the last
    /// committed group: kept by every commit, so this costs no listing (an OSD reports its
    /// PGs' usage with it every few seconds).
    pub async fn collection_usage(&self, coll: &str) -> Result<CollectionUsage> {
        self.check_ok()?;
        let st = self.state.read().await;
        let v = self.view(&st)?;
        let id = Self::read_coll_id(&v, coll)?;
        Ok(st.usage.get(id))
    }

    /// All collection names, sorted.
    pub async fn list_collections(&self) -> Result<Vec<String>> {
        self.check_ok()?;
        let st = self.state.read().await;
        let v = self.view(&st)?;
        Ok(v.colls().all()?.into_iter().map(|(k, _)| k).collect())
    }
}

/// Contents of the blocks a read covers that have a committed deferred write pending (not yet
/// written in place): physical block -> contents. Usually empty.
type PendingDeferred = HashMap<u64, Arc<Vec<u8>>>;

/// The pending deferred contents of `pieces`' blocks, taken under the state lock so that the
/// read need not hold it while the device is read.
fn pending_deferred(st: &State, pieces: &[Extent]) -> PendingDeferred {
    if st.deferred.is_empty() {
        return PendingDeferred::new();
    }
    pieces
        .iter()
        .flat_map(|e| e.pblock..e.pblock + e.blocks())
        .filter_map(|p| Some((p, st.deferred.get(&p)?.clone())))
        .collect()
}
