//! Staging: every operation of a group applied to the metadata as the group sees it (its own
//! changes over the overlay over redb, `overlay::Layered`), with the new data gathered for
//! writing before the commit.
//!
//! Owns copy-on-write placement (a write of at least `deferred_max_bytes`, or over blocks
//! the object has of at least `deferred_overwrite_max_bytes`, goes to newly allocated blocks,
//! built once into aligned buffers from the transaction's bytes), deferred (KV-logged) small
//! writes, extent splitting on overwrite/zero/truncate/remove/clone/rename,
//! and the bookkeeping of blocks allocated and freed (frees take effect only after the commit;
//! allocations are returned if the transaction fails). It must never write to the device, and
//! never stage a change to a block that committed metadata references except as a deferred
//! write.

use crate::bufpool::{RunBuf, IO_ALIGN_BYTES};
use crate::codec::{
    self, object_prefix, onode_key, prefix_end, sub_key, Extent, Onode, INLINE_EXTENTS_MAX_BYTES,
};
use crate::early::EarlyRun;
use crate::error::{Result, StoreError};
use crate::extmap::{self, ExtTable, InTable, Place, Records};
use crate::inflight::InFlightView;
use crate::kv::KvSnapshot;
use crate::overlay::{Layered, Overlay, NO_CHANGES};
use crate::store::{State, Store};
use crate::txn::{DataCrcs, Op};
use crate::usage::UsageDelta;
use crate::wal::Redo;
use cairn_convert::usize_of;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) type BytesTable<'t> = Layered<'t, &'static [u8], &'static [u8]>;

/// Every table as the group sees it (its own changes over the overlay over the checkpointed
/// KV), recording what it changes (the group's redo record, see `wal`).
pub(crate) struct Tables<'t> {
    meta: Layered<'t, &'static str, &'static [u8]>,
    colls: Layered<'t, &'static str, &'static [u8]>,
    onodes: BytesTable<'t>,
    extents: ExtTable<'t>,
    xattrs: BytesTable<'t>,
    omap: BytesTable<'t>,
    pub(crate) deferred: Layered<'t, u64, &'static [u8]>,
}

impl<'t> Tables<'t> {
    /// The tables of the checkpointed KV in `r` under `overlay`, under the changes of the
    /// group in flight (`in_flight`), if any.
    pub(crate) fn open(
        r: &'t KvSnapshot,
        overlay: &'t Overlay,
        in_flight: Option<&'t Redo>,
    ) -> Self {
        let o = |i: usize| overlay.layers_under(i, in_flight.map_or(&NO_CHANGES, |r| &r.tables[i]));
        Self {
            meta: Layered::new(&r.meta, o(0)),
            colls: Layered::new(&r.colls, o(1)).with_found(&r.colls_found),
            onodes: Layered::new(&r.onodes, o(2))
                .with_found(&r.onodes_found)
                .with_key_filter(&r.onode_keys),
            extents: Layered::new(&r.extents, o(3)),
            xattrs: Layered::new(&r.xattrs, o(4)),
            omap: Layered::new(&r.omap, o(5)),
            deferred: Layered::new(&r.deferred, o(6)),
        }
    }

    /// Every change recorded so far, by table (forgetting them).
    pub(crate) fn take_redo(&mut self) -> Redo {
        Redo {
            tables: [
                self.meta.take_touched(),
                self.colls.take_touched(),
                self.onodes.take_touched(),
                self.extents.take_touched(),
                self.xattrs.take_touched(),
                self.omap.take_touched(),
                self.deferred.take_touched(),
            ],
        }
    }
}

/// An object a group created: its names (the onode cache's key) and its KV keys.
#[derive(Debug)]
pub(crate) struct CreatedObject {
    pub(crate) coll: String,
    pub(crate) name: String,
    /// Its onode's key.
    pub(crate) key: Vec<u8>,
    /// The prefix of its extent and attribute keys.
    pub(crate) prefix: Vec<u8>,
}

/// What a transaction (or group) has done so far, outside the KV.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// Copy-on-write runs to write before the commit: first physical block -> whole blocks (at
    /// most `max_io_bytes`).
    pub(crate) new_data: BTreeMap<u64, RunBuf>,
    /// Deferred block contents committed with this transaction.
    pub(crate) deferred_new: BTreeMap<u64, Vec<u8>>,
    /// Blocks whose pending (committed) deferred write is cancelled because they are freed.
    pub(crate) deferred_dropped: Vec<u64>,
    /// Extents `(start, len)` to release after the commit.
    pub(crate) to_free: Vec<(u64, u64)>,
    /// Extents taken from the allocator (start -> len; returned on failure).
    pub(crate) allocated: BTreeMap<u64, u64>,
    /// Runs `(first block, blocks)` its transactions wrote early (already written; module
    /// `early`), listed in its record with the copy-on-write runs.
    pub(crate) early_runs: Vec<(u64, u64)>,
    /// Objects and bytes its transactions add to (or remove from) each collection.
    pub(crate) usage: UsageDelta,
    /// Objects the group created (they had no onode in its view): every extent and attribute
    /// they have is in its redo record, so their onode cache entries can be built from it.
    pub(crate) created: Vec<CreatedObject>,
    /// The groups in flight this one stages over, oldest first: their deferred block contents
    /// are read from memory, and a block they write copy-on-write only once written.
    pub(crate) inflight: Vec<Arc<InFlightView>>,
}

impl Stage {
    /// The run of `new_data` holding physical block `p`, with the block's byte offset in it.
    fn run_of(&self, p: u64, bs: u64) -> Option<(u64, usize)> {
        let (&s, buf) = self.new_data.range(..=p).next_back()?;
        let off = usize_of((p - s) * bs);
        (off < buf.len()).then_some((s, off))
    }

    /// Drops blocks `a..b` from the copy-on-write runs (freed before they were ever written).
    fn drop_new_data(&mut self, a: u64, b: u64, bs: u64) {
        let hit: Vec<u64> = match self.new_data.range(..a).next_back() {
            Some((&s, buf)) if s + buf.len() as u64 / bs > a => vec![s],
            _ => Vec::new(),
        }
        .into_iter()
        .chain(self.new_data.range(a..b).map(|(&s, _)| s))
        .collect();
        for s in hit {
            let Some(buf) = self.new_data.remove(&s) else {
                continue;
            };
            let end = s + buf.len() as u64 / bs;
            let bytes = |x: u64| usize_of((x - s) * bs);
            if s < a {
                if let Some(l) = buf.piece(0, bytes(a)) {
                    self.new_data.insert(s, l);
                }
            }
            if end > b {
                if let Some(r) = buf.piece(bytes(b), buf.len()) {
                    self.new_data.insert(b, r);
                }
            }
        }
    }
}

/// One object addressed inside a transaction.
struct Obj<'a> {
    coll: &'a str,
    /// The collection's id.
    coll_id: u32,
    name: &'a str,
    key: Vec<u8>,
    prefix: Vec<u8>,
}

fn range_keys(t: &BytesTable<'_>, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    t.range(prefix, prefix_end(prefix).as_deref(), usize::MAX)
}

fn take_prefix(t: &mut BytesTable<'_>, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let entries = range_keys(t, prefix)?;
    for (k, _) in &entries {
        t.remove(k.as_slice());
    }
    Ok(entries)
}

/// The slices of `parts` (a virtual concatenation) from byte `a` to byte `b`.
fn sub_parts<'p>(parts: &[&'p [u8]], a: usize, b: usize) -> Vec<&'p [u8]> {
    let mut slices = Vec::with_capacity(parts.len());
    let mut at = 0;
    for p in parts {
        let (s, e) = (a.max(at), b.min(at + p.len()));
        if s < e {
            slices.push(&p[s - at..e - at]);
        }
        at += p.len();
    }
    slices
}

impl Store {
    /// Stages one operation; `early` holds where its data was written early, if it was.
    pub(crate) async fn stage_op(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        op: &Op,
        early: Option<&[EarlyRun]>,
    ) -> Result<()> {
        match op {
            Op::CreateCollection { coll } => Self::create_collection(t, coll)?,
            Op::RemoveCollection { coll } => Self::remove_collection(t, coll)?,
            Op::Touch { coll, obj } => {
                let o = Self::obj(t, coll, obj)?;
                Self::ensure(stage, t, &o)?;
            }
            Op::Write {
                coll,
                obj,
                offset_bytes,
                data,
                crcs,
            } => {
                let o = Self::obj(t, coll, obj)?;
                self.stage_write(st, stage, t, &o, *offset_bytes, data, crcs.as_ref(), early)
                    .await?;
            }
            Op::Zero {
                coll,
                obj,
                offset_bytes,
                len_bytes,
            } => {
                let o = Self::obj(t, coll, obj)?;
                let node = Self::ensure(stage, t, &o)?;
                let end = offset_bytes + len_bytes;
                self.zero_range(st, stage, t, &o, *offset_bytes, end.min(node.size_bytes))
                    .await?;
                if end > node.size_bytes {
                    Self::set_size(stage, t, &o, node.size_bytes, end)?;
                }
            }
            Op::Truncate {
                coll,
                obj,
                size_bytes,
            } => {
                let o = Self::obj(t, coll, obj)?;
                let node = Self::ensure(stage, t, &o)?;
                if *size_bytes < node.size_bytes {
                    let bs = self.sb.block_bytes;
                    let keep_blocks = size_bytes.div_ceil(bs);
                    let cut = Self::edit_extents(t, &o, |m| extmap::punch(m, keep_blocks, None))?;
                    for e in cut {
                        self.free_extent(st, stage, e.pblock, e.blocks());
                    }
                    if keep_blocks == 0 {
                        Self::map_back_inline(t, &o)?;
                    }
                    let tail_end = (keep_blocks * bs).min(node.size_bytes);
                    self.zero_range(st, stage, t, &o, *size_bytes, tail_end)
                        .await?;
                }
                if *size_bytes != node.size_bytes {
                    Self::set_size(stage, t, &o, node.size_bytes, *size_bytes)?;
                }
            }
            Op::Remove { coll, obj } => {
                let o = Self::obj(t, coll, obj)?;
                if !self.remove_object(st, stage, t, &o)? {
                    Self::must_exist(t, &o)?;
                }
            }
            Op::Clone { coll, src, dst } => {
                let s = Self::obj(t, coll, src)?;
                let d = Self::obj(t, coll, dst)?;
                let node = Self::must_exist(t, &s)?;
                if src != dst {
                    self.stage_clone(st, stage, t, &s, &d, node).await?;
                }
            }
            Op::Rename { coll, src, dst } => {
                let s = Self::obj(t, coll, src)?;
                let d = Self::obj(t, coll, dst)?;
                let node = Self::must_exist(t, &s)?;
                if src != dst {
                    self.remove_object(st, stage, t, &d)?;
                    let mut tables = vec![&mut t.omap];
                    if node.spilled {
                        tables.push(&mut t.xattrs);
                    }
                    if node.extents_spilled {
                        tables.push(&mut t.extents);
                    }
                    for table in tables {
                        for (k, v) in take_prefix(table, &s.prefix)? {
                            table.insert(
                                sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                                v.as_slice(),
                            )?;
                        }
                    }
                    t.onodes.remove(s.key.as_slice());
                    t.onodes
                        .insert(d.key.as_slice(), node.encode().as_slice())?;
                }
            }
            Op::SetAttr {
                coll,
                obj,
                name,
                value,
            } => {
                let o = Self::obj(t, coll, obj)?;
                let node = Self::ensure(stage, t, &o)?;
                Self::set_attr(t, &o, node, name, value)?;
            }
            Op::RmAttr { coll, obj, name } => {
                let o = Self::obj(t, coll, obj)?;
                let mut node = Self::must_exist(t, &o)?;
                if node.remove_attr(name) {
                    Self::put_onode(t, &o, &node)?;
                }
                if node.spilled {
                    t.xattrs
                        .remove(sub_key(&o.prefix, name.as_bytes()).as_slice());
                }
            }
            Op::OmapSet { coll, obj, entries } => {
                let o = Self::obj(t, coll, obj)?;
                Self::ensure(stage, t, &o)?;
                for (k, v) in entries {
                    t.omap
                        .insert(sub_key(&o.prefix, k).as_slice(), codec::seal(v).as_slice())?;
                }
            }
            Op::OmapRemove { coll, obj, keys } => {
                let o = Self::obj(t, coll, obj)?;
                Self::must_exist(t, &o)?;
                for k in keys {
                    t.omap.remove(sub_key(&o.prefix, k).as_slice());
                }
            }
        }
        Ok(())
    }

    fn create_collection(t: &mut Tables<'_>, coll: &str) -> Result<()> {
        if t.colls.get(coll)?.is_some() {
            return Err(StoreError::CollectionExists(coll.to_string()));
        }
        let next = match t.meta.get("next_coll")? {
            Some(v) => codec::le_u32(codec::open(&v, "next_coll")?, 0, "next_coll")?,
            None => return Err(StoreError::Corrupt("next_coll missing".into())),
        };
        let following = next
            .checked_add(1)
            .ok_or_else(|| StoreError::Limit("collection ids exhausted".into()))?;
        t.colls
            .insert(coll, codec::seal(&next.to_le_bytes()).as_slice())?;
        t.meta.insert(
            "next_coll",
            codec::seal(&following.to_le_bytes()).as_slice(),
        )?;
        Ok(())
    }

    fn remove_collection(t: &mut Tables<'_>, coll: &str) -> Result<()> {
        let id = Self::coll_id(t, coll)?;
        let start = id.to_be_bytes();
        let end = id.checked_add(1).map(u32::to_be_bytes);
        let non_empty = !t
            .onodes
            .range(start.as_slice(), end.as_ref().map(|e| e.as_slice()), 1)?
            .is_empty();
        if non_empty {
            return Err(StoreError::CollectionNotEmpty(coll.to_string()));
        }
        t.colls.remove(coll);
        Ok(())
    }

    fn coll_id(t: &Tables<'_>, coll: &str) -> Result<u32> {
        match t.colls.get(coll)? {
            Some(v) => Ok(codec::le_u32(
                codec::open(&v, "collection")?,
                0,
                "collection",
            )?),
            None => Err(StoreError::NoSuchCollection(coll.to_string())),
        }
    }

    fn obj<'a>(t: &Tables<'_>, coll: &'a str, name: &'a str) -> Result<Obj<'a>> {
        let id = Self::coll_id(t, coll)?;
        Ok(Obj {
            coll,
            coll_id: id,
            name,
            key: onode_key(id, name),
            prefix: object_prefix(id, name),
        })
    }

    fn get_onode(t: &Tables<'_>, o: &Obj<'_>) -> Result<Option<Onode>> {
        match t.onodes.get(o.key.as_slice())? {
            Some(v) => Ok(Some(Onode::decode(&v)?)),
            None => Ok(None),
        }
    }

    fn must_exist(t: &Tables<'_>, o: &Obj<'_>) -> Result<Onode> {
        Self::get_onode(t, o)?.ok_or_else(|| StoreError::NoSuchObject {
            collection: o.coll.to_string(),
            object: o.name.to_string(),
        })
    }

    fn ensure(stage: &mut Stage, t: &mut Tables<'_>, o: &Obj<'_>) -> Result<Onode> {
        if let Some(n) = Self::get_onode(t, o)? {
            return Ok(n);
        }
        let n = Onode::default();
        t.onodes.insert(o.key.as_slice(), n.encode().as_slice())?;
        stage.usage.add(o.coll_id, 1, 0);
        stage.created.push(CreatedObject {
            coll: o.coll.to_string(),
            name: o.name.to_string(),
            key: o.key.clone(),
            prefix: o.prefix.clone(),
        });
        Ok(n)
    }

    /// Sets the size of `o`, whose size was `old_bytes` (its onode is read again: the
    /// operation may have changed the extent map inside it since).
    fn set_size(
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        old_bytes: u64,
        size_bytes: u64,
    ) -> Result<()> {
        stage
            .usage
            .add(o.coll_id, 0, size_bytes as i64 - old_bytes as i64);
        let mut node = Self::must_exist(t, o)?;
        node.size_bytes = size_bytes;
        Self::put_onode(t, o, &node)
    }

    /// Runs `f` on the extent map of `o` (which exists) wherever it lives: inside its onode
    /// while the map fits there (the onode rewritten), else in the extents table. A map that
    /// outgrows the onode (`codec::INLINE_EXTENTS_MAX_BYTES`) moves to the table, where it
    /// stays until the object is emptied.
    fn edit_extents<R>(
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        f: impl FnOnce(&mut Place<'_, '_>) -> Result<R>,
    ) -> Result<R> {
        let mut node = Self::must_exist(t, o)?;
        let mut table = InTable {
            table: &mut t.extents,
            prefix: &o.prefix,
        };
        if node.extents_spilled {
            return f(&mut Place::Table(table));
        }
        let out = f(&mut Place::Inline(&mut node.extents))?;
        if node.inline_extents_bytes() > INLINE_EXTENTS_MAX_BYTES {
            for e in std::mem::take(&mut node.extents) {
                table.put(&e)?;
            }
            node.extents_spilled = true;
        }
        Self::put_onode(t, o, &node)?;
        Ok(out)
    }

    /// Extents of `o` intersecting logical blocks `from..to` (`None`: to the end), wherever
    /// its map lives (none for an object that does not exist).
    fn extents_of(t: &Tables<'_>, o: &Obj<'_>, from: u64, to: Option<u64>) -> Result<Vec<Extent>> {
        match Self::get_onode(t, o)? {
            Some(node) if !node.extents_spilled => extmap::overlapping(&node.extents, from, to),
            _ => extmap::overlapping(
                &InTable {
                    table: &t.extents,
                    prefix: &o.prefix,
                },
                from,
                to,
            ),
        }
    }

    /// Brings the extent map of `o`, now empty, back inside its onode.
    fn map_back_inline(t: &mut Tables<'_>, o: &Obj<'_>) -> Result<()> {
        let mut node = Self::must_exist(t, o)?;
        if node.extents_spilled {
            node.extents_spilled = false;
            Self::put_onode(t, o, &node)?;
        }
        Ok(())
    }

    fn put_onode(t: &mut Tables<'_>, o: &Obj<'_>, node: &Onode) -> Result<()> {
        t.onodes
            .insert(o.key.as_slice(), node.encode().as_slice())?;
        Ok(())
    }

    /// Sets attribute `name` of `o` (whose onode is `node`): inside the onode when it fits
    /// there (`codec::INLINE_ATTR_MAX_BYTES`), else in the xattr table, the onode then marked
    /// spilled. A value of that name in the other place is removed, so a name lives in one.
    fn set_attr(
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        mut node: Onode,
        name: &str,
        value: &[u8],
    ) -> Result<()> {
        let key = || sub_key(&o.prefix, name.as_bytes());
        if node.fits_inline(name, value) {
            if node.spilled {
                t.xattrs.remove(key().as_slice());
            }
            node.set_attr(name, value);
        } else {
            node.remove_attr(name);
            node.spilled = true;
            t.xattrs
                .insert(key().as_slice(), codec::seal(value).as_slice())?;
        }
        Self::put_onode(t, o, &node)
    }

    /// Takes `n` blocks from the allocator as extents `(start, len)` in placement order.
    fn alloc_extents(&self, stage: &mut Stage, n: u64) -> Result<Vec<(u64, u64)>> {
        let extents = self.allocator().allocate(n)?;
        for &(s, l) in &extents {
            stage.allocated.insert(s, l);
        }
        Ok(extents)
    }

    /// Frees physical blocks `start..start + len` at the commit, cancelling any data or deferred
    /// write staged or pending for them.
    fn free_extent(&self, st: &State, stage: &mut Stage, start: u64, len: u64) {
        let end = start + len;
        stage.drop_new_data(start, end, self.sb.block_bytes);
        let staged: Vec<u64> = stage
            .deferred_new
            .range(start..end)
            .map(|(&p, _)| p)
            .collect();
        for p in staged {
            stage.deferred_new.remove(&p);
        }
        let pending = |p: &u64| {
            st.deferred.contains_key(p)
                || stage
                    .inflight
                    .iter()
                    .any(|v| v.deferred_new.contains_key(p))
        };
        if !st.deferred.is_empty() || stage.inflight.iter().any(|v| !v.deferred_new.is_empty()) {
            let dropped: Vec<u64> = (start..end).filter(pending).collect();
            stage.deferred_dropped.extend(dropped);
        }
        stage.to_free.push((start, len));
    }

    /// Current contents of the blocks of `e` as this transaction sees them, verified against
    /// the extent's checksums.
    async fn staged_extent(
        &self,
        st: &State,
        stage: &Stage,
        o: &Obj<'_>,
        e: &Extent,
    ) -> Result<Vec<u8>> {
        let bs = usize_of(self.sb.block_bytes);
        let mut buf = vec![0u8; e.crcs.len() * bs];
        let overlay = |p: u64| -> Option<&[u8]> {
            if let Some((s, off)) = stage.run_of(p, bs as u64) {
                return stage.new_data.get(&s).map(|b| &b.as_slice()[off..off + bs]);
            }
            if let Some(d) = stage.deferred_new.get(&p) {
                return Some(d.as_slice());
            }
            if let Some(d) = stage
                .inflight
                .iter()
                .rev()
                .find_map(|v| v.deferred_new.get(&p))
            {
                return Some(d.as_slice());
            }
            st.deferred.get(&p).map(|d| d.as_slice())
        };
        let from_device: Vec<u64> = (0..e.blocks())
            .map(|i| e.pblock + i)
            .filter(|&p| overlay(p).is_none())
            .collect();
        if !from_device.is_empty() {
            // A block a group in flight writes copy-on-write is read once it is written.
            for v in &stage.inflight {
                if from_device.iter().any(|&p| v.writes_block(p)) {
                    v.wait_written().await?;
                }
            }
            self.dev_read(e.pblock * bs as u64, &mut buf).await?;
        }
        for (i, chunk) in buf.chunks_exact_mut(bs).enumerate() {
            if let Some(d) = overlay(e.pblock + i as u64) {
                chunk.copy_from_slice(d);
            }
            self.verify(o.coll, o.name, e.lblock + i as u64, e.crcs[i], chunk)?;
        }
        Ok(buf)
    }

    /// Contents of logical block `idx` as this transaction sees them (zeros for a hole).
    async fn staged_block(
        &self,
        st: &State,
        stage: &Stage,
        t: &Tables<'_>,
        o: &Obj<'_>,
        idx: u64,
    ) -> Result<Vec<u8>> {
        let exts = Self::extents_of(t, o, idx, Some(idx + 1))?;
        match exts.first() {
            Some(e) => {
                self.staged_extent(st, stage, o, &e.slice(idx, idx + 1))
                    .await
            }
            None => Ok(vec![0u8; usize_of(self.sb.block_bytes)]),
        }
    }

    /// Applies `f` to the contents of logical block `idx` if it exists, as a small change:
    /// in place when the block was allocated by this transaction, else as a deferred write.
    /// With `rewrites_all`, `f` sets every byte, so the old contents are not read (nor
    /// verified). Returns false for a hole.
    #[allow(clippy::too_many_arguments)]
    async fn modify_block(
        &self,
        st: &State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        idx: u64,
        rewrites_all: bool,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<bool> {
        let exts = Self::extents_of(t, o, idx, Some(idx + 1))?;
        let Some(mut e) = exts.into_iter().next() else {
            return Ok(false);
        };
        let i = usize_of(idx - e.lblock);
        let p = e.pblock + i as u64;
        let mut content = if rewrites_all {
            vec![0u8; usize_of(self.sb.block_bytes)]
        } else {
            self.staged_extent(st, stage, o, &e.slice(idx, idx + 1))
                .await?
        };
        f(&mut content);
        e.crcs[i] = crc_fast::crc32_iscsi(&content);
        self.put_block(stage, p, content)?;
        Self::edit_extents(t, o, |m| m.put(&e))?;
        Ok(true)
    }

    /// Stores new contents of an allocated block: into its copy-on-write run if it has one,
    /// else as a deferred write.
    fn put_block(&self, stage: &mut Stage, p: u64, content: Vec<u8>) -> Result<()> {
        let bs = self.sb.block_bytes;
        if let Some((s, off)) = stage.run_of(p, bs) {
            if let Some(run) = stage.new_data.get_mut(&s) {
                run.make_mut(&self.bufs)?[off..off + usize_of(bs)].copy_from_slice(&content);
                return Ok(());
            }
        }
        stage.deferred_new.insert(p, content);
        Ok(())
    }

    /// Length under which a write at `offset` into an object of `live_blocks` blocks is
    /// deferred: `deferred_max_bytes` into space the object does not have yet,
    /// `deferred_overwrite_max_bytes` over (or partly over) blocks it has.
    fn deferred_below(&self, offset: u64, live_blocks: u64) -> u64 {
        if offset >= live_blocks.saturating_mul(self.sb.block_bytes) {
            self.cfg.deferred_max_bytes
        } else {
            self.cfg
                .deferred_overwrite_max_bytes
                .min(self.cfg.deferred_max_bytes)
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn stage_write(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        offset: u64,
        data: &bytes::Bytes,
        crcs: Option<&DataCrcs>,
        early: Option<&[EarlyRun]>,
    ) -> Result<()> {
        let node = Self::ensure(stage, t, o)?;
        if data.is_empty() {
            return Ok(());
        }
        let end = offset + data.len() as u64;
        // Blocks at or past the end of the object are holes: no extent maps them (fsck's
        // invariant), so writes there need not look for extents to change or free.
        let live_blocks = node.size_bytes.div_ceil(self.sb.block_bytes);
        if let Some(runs) = early {
            self.write_placed(
                st,
                stage,
                t,
                o,
                offset,
                data.len() as u64,
                runs,
                live_blocks,
            )?;
        } else if (data.len() as u64) < self.deferred_below(offset, live_blocks) {
            self.write_small(st, stage, t, o, offset, &data[..], live_blocks)
                .await?;
        } else {
            let bs = self.sb.block_bytes;
            let known = crcs.filter(|c| {
                c.block_bytes == bs
                    && offset.is_multiple_of(bs)
                    && (data.len() as u64).is_multiple_of(bs)
                    && c.crcs.len() as u64 == data.len() as u64 / bs
            });
            self.write_cow(st, stage, t, o, offset, data, live_blocks, known)
                .await?;
        }
        if end > node.size_bytes {
            Self::set_size(stage, t, o, node.size_bytes, end)?;
        }
        Ok(())
    }

    /// A write of `len` bytes whose data was written early to `runs` (block-aligned offset and
    /// length): its blocks replace the ones it covers (freed at the commit), nothing is left to
    /// write. Blocks from `live_blocks` on are holes.
    #[allow(clippy::too_many_arguments)]
    fn write_placed(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        offset: u64,
        len: u64,
        runs: &[EarlyRun],
        live_blocks: u64,
    ) -> Result<()> {
        let bs = self.sb.block_bytes;
        let first = offset / bs;
        let blocks: u64 = runs.iter().map(|r| r.blocks).sum();
        if !offset.is_multiple_of(bs) || blocks * bs != len {
            return Err(StoreError::Corrupt(format!(
                "early write of {len} bytes at {offset} placed in {blocks} blocks"
            )));
        }
        if first < live_blocks {
            let cut = Self::edit_extents(t, o, |m| extmap::punch(m, first, Some(first + blocks)))?;
            for e in cut {
                self.free_extent(st, stage, e.pblock, e.blocks());
            }
        }
        Self::edit_extents(t, o, |m| {
            let mut lblock = first;
            for r in runs {
                let e = Extent {
                    lblock,
                    pblock: r.pblock,
                    crcs: r.crcs.clone(),
                };
                extmap::insert(m, e)?;
                lblock += r.blocks;
            }
            Ok(())
        })?;
        stage
            .early_runs
            .extend(runs.iter().map(|r| (r.pblock, r.blocks)));
        Ok(())
    }

    /// A small write: block by block, existing blocks are changed in place (deferred), holes get
    /// a new block whose contents go through the KV too. Blocks from `live_blocks` on are holes.
    #[allow(clippy::too_many_arguments)]
    async fn write_small(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        offset: u64,
        data: &[u8],
        live_blocks: u64,
    ) -> Result<()> {
        let bs = self.sb.block_bytes;
        let end = offset + data.len() as u64;
        for idx in offset / bs..end.div_ceil(bs) {
            let bstart = idx * bs;
            let s = offset.max(bstart) - bstart;
            let e = end.min(bstart + bs) - bstart;
            let src = &data[usize_of(bstart + s - offset)..usize_of(bstart + e - offset)];
            let patch = |b: &mut [u8]| b[usize_of(s)..usize_of(e)].copy_from_slice(src);
            if idx < live_blocks
                && self
                    .modify_block(st, stage, t, o, idx, e - s == bs, patch)
                    .await?
            {
                continue;
            }
            let mut content = vec![0u8; usize_of(bs)];
            patch(&mut content);
            let crc = crc_fast::crc32_iscsi(&content);
            let (p, _) = self.alloc_extents(stage, 1)?[0];
            stage.deferred_new.insert(p, content);
            let e = Extent {
                lblock: idx,
                pblock: p,
                crcs: vec![crc],
            };
            Self::edit_extents(t, o, |m| extmap::insert(m, e))?;
        }
        Ok(())
    }

    /// A copy-on-write write: the covered blocks get new physical blocks, filled once from the
    /// transaction's bytes (partial edge blocks merged with their current contents); the old
    /// blocks are freed at the commit. Blocks from `live_blocks` on are holes. `known`, when
    /// given, holds the crc32c of each block of a block-aligned `shared` (not computed again).
    #[allow(clippy::too_many_arguments)]
    async fn write_cow(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        offset: u64,
        shared: &bytes::Bytes,
        live_blocks: u64,
        known: Option<&DataCrcs>,
    ) -> Result<()> {
        let data = &shared[..];
        let bs = self.sb.block_bytes;
        let end = offset + data.len() as u64;
        let (first, last) = (offset / bs, (end - 1) / bs);
        let head_keep = usize_of(offset - first * bs);
        let tail_from = usize_of(end - last * bs);
        let hole = || vec![0u8; usize_of(bs)];
        let head = if head_keep == 0 {
            Vec::new()
        } else if first < live_blocks {
            self.staged_block(st, stage, t, o, first).await?
        } else {
            hole()
        };
        let tail = if tail_from >= usize_of(bs) {
            Vec::new()
        } else if first == last && head_keep > 0 {
            head.clone()
        } else if last < live_blocks {
            self.staged_block(st, stage, t, o, last).await?
        } else {
            hole()
        };
        // Whole blocks whose bytes already start on an I/O boundary are written from the
        // caller's buffer itself: nothing is copied, only checksummed.
        let zero_copy = head_keep == 0
            && tail_from >= usize_of(bs)
            && (data.as_ptr() as usize).is_multiple_of(IO_ALIGN_BYTES);
        let parts: [&[u8]; 3] = [
            head.get(..head_keep).unwrap_or(&[]),
            data,
            tail.get(tail_from..).unwrap_or(&[]),
        ];
        if first < live_blocks {
            let cut = Self::edit_extents(t, o, |m| extmap::punch(m, first, Some(last + 1)))?;
            for e in cut {
                self.free_extent(st, stage, e.pblock, e.blocks());
            }
        }
        let max_run = (self.cfg.max_io_bytes / bs).max(1);
        let mut lblock = first;
        for (p, len) in self.alloc_extents(stage, last + 1 - first)? {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(max_run);
                let a = usize_of((lblock - first) * bs);
                let run_end = a + usize_of(n * bs);
                let (buf, crcs) = if zero_copy {
                    let run = shared.slice(a..run_end);
                    let crcs = match known {
                        Some(k) => k.crcs[a / usize_of(bs)..run_end / usize_of(bs)].to_vec(),
                        None => run
                            .chunks(usize_of(bs))
                            .map(crc_fast::crc32_iscsi)
                            .collect(),
                    };
                    (RunBuf::Shared(run), crcs)
                } else {
                    let (buf, crcs) = self
                        .bufs
                        .build_checksummed(&sub_parts(&parts, a, run_end), usize_of(bs))?;
                    (RunBuf::Owned(buf), crcs)
                };
                stage.new_data.insert(p + done, buf);
                let e = Extent {
                    lblock,
                    pblock: p + done,
                    crcs,
                };
                Self::edit_extents(t, o, |m| extmap::insert(m, e))?;
                lblock += n;
                done += n;
            }
        }
        Ok(())
    }

    /// Makes `offset..end` (within the object's size) read as zeros: whole blocks are
    /// deallocated, partial edge blocks changed in place.
    async fn zero_range(
        &self,
        st: &State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        offset: u64,
        end: u64,
    ) -> Result<()> {
        let bs = self.sb.block_bytes;
        if end <= offset {
            return Ok(());
        }
        let (full_from, full_to) = (offset.div_ceil(bs), end / bs);
        if full_from < full_to {
            let cut = Self::edit_extents(t, o, |m| extmap::punch(m, full_from, Some(full_to)))?;
            for e in cut {
                self.free_extent(st, stage, e.pblock, e.blocks());
            }
        }
        let mut edges = vec![offset / bs];
        if (end - 1) / bs != offset / bs {
            edges.push((end - 1) / bs);
        }
        for idx in edges {
            let bstart = idx * bs;
            let s = offset.max(bstart) - bstart;
            let e = end.min(bstart + bs) - bstart;
            if s == 0 && e == bs {
                continue;
            }
            self.modify_block(st, stage, t, o, idx, false, |b| {
                b[usize_of(s)..usize_of(e)].fill(0)
            })
            .await?;
        }
        Ok(())
    }

    fn remove_object(
        &self,
        st: &State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
    ) -> Result<bool> {
        let Some(node) = Self::get_onode(t, o)? else {
            return Ok(false);
        };
        let extents = match node.extents_spilled {
            true => extmap::punch(
                &mut InTable {
                    table: &mut t.extents,
                    prefix: &o.prefix,
                },
                0,
                None,
            )?,
            false => node.extents,
        };
        for e in extents {
            self.free_extent(st, stage, e.pblock, e.blocks());
        }
        if node.spilled {
            take_prefix(&mut t.xattrs, &o.prefix)?;
        }
        take_prefix(&mut t.omap, &o.prefix)?;
        t.onodes.remove(o.key.as_slice());
        stage.usage.add(o.coll_id, -1, -(node.size_bytes as i64));
        Ok(true)
    }

    /// Makes `d` a copy of `s`: data into newly allocated blocks, xattrs and omap duplicated.
    async fn stage_clone(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        s: &Obj<'_>,
        d: &Obj<'_>,
        node: Onode,
    ) -> Result<()> {
        self.remove_object(st, stage, t, d)?;
        let copy = Onode {
            extents: Vec::new(),
            extents_spilled: false,
            ..node.clone()
        };
        t.onodes
            .insert(d.key.as_slice(), copy.encode().as_slice())?;
        let bs = self.sb.block_bytes;
        for e in Self::extents_of(t, s, 0, None)? {
            let content = self.staged_extent(st, stage, s, &e).await?;
            let mut lblock = e.lblock;
            for (p, len) in self.alloc_extents(stage, e.blocks())? {
                let a = usize_of((lblock - e.lblock) * bs);
                let buf = self.bufs.build(&[&content[a..a + usize_of(len * bs)]])?;
                stage.new_data.insert(p, RunBuf::Owned(buf));
                let piece = e.slice(lblock, lblock + len);
                let e = Extent {
                    lblock,
                    pblock: p,
                    crcs: piece.crcs,
                };
                Self::edit_extents(t, d, |m| extmap::insert(m, e))?;
                lblock += len;
            }
        }
        let mut tables = vec![&mut t.omap];
        if node.spilled {
            tables.push(&mut t.xattrs);
        }
        for table in tables {
            for (k, v) in range_keys(table, &s.prefix)? {
                table.insert(
                    sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                    v.as_slice(),
                )?;
            }
        }
        stage.usage.add(d.coll_id, 1, node.size_bytes as i64);
        Ok(())
    }
}
