//! Applying transactions: staging every operation into one redb write transaction, then the
//! write-flush-commit sequence described in `store`.
//!
//! Owns copy-on-write placement, deferred (KV-logged) small writes, and the bookkeeping of blocks
//! allocated and freed by a transaction (frees take effect only after the commit; allocations
//! are returned if the transaction fails). It must never write to the device before the whole
//! transaction has staged successfully, and never overwrite a block that committed metadata
//! references.

use crate::codec::{
    self, block_key, object_prefix, onode_key, prefix_end, sub_key, BlockRef, Onode,
};
use crate::error::{kv, Result, StoreError};
use crate::kv::{BLOCKS, COLLS, DEFERRED, META, OMAP, ONODES, XATTRS};
use crate::store::{State, Store};
use crate::txn::{Op, Transaction};
use redb::{ReadableTable, Table, WriteTransaction};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

fn elapsed_into(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A transaction waiting for its group commit.
#[derive(Debug)]
pub(crate) struct Pending {
    txn: Transaction,
    done: oneshot::Sender<Result<()>>,
}

type BytesTable<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// Open table handles of one write transaction.
pub(crate) struct Tables<'t> {
    meta: Table<'t, &'static str, &'static [u8]>,
    colls: Table<'t, &'static str, &'static [u8]>,
    onodes: BytesTable<'t>,
    blocks: BytesTable<'t>,
    xattrs: BytesTable<'t>,
    omap: BytesTable<'t>,
    deferred: Table<'t, u64, &'static [u8]>,
}

impl<'t> Tables<'t> {
    fn open(w: &'t WriteTransaction) -> Result<Self> {
        Ok(Self {
            meta: w.open_table(META).map_err(kv)?,
            colls: w.open_table(COLLS).map_err(kv)?,
            onodes: w.open_table(ONODES).map_err(kv)?,
            blocks: w.open_table(BLOCKS).map_err(kv)?,
            xattrs: w.open_table(XATTRS).map_err(kv)?,
            omap: w.open_table(OMAP).map_err(kv)?,
            deferred: w.open_table(DEFERRED).map_err(kv)?,
        })
    }
}

/// What a transaction has done so far, outside the KV.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// Copy-on-write blocks to write before the commit.
    new_data: BTreeMap<u64, Vec<u8>>,
    /// Deferred block contents committed with this transaction.
    deferred_new: BTreeMap<u64, Vec<u8>>,
    /// Blocks whose pending (committed) deferred write is cancelled because they are freed.
    deferred_dropped: Vec<u64>,
    /// Blocks to release after the commit.
    to_free: Vec<u64>,
    /// Extents taken from the allocator (returned on failure).
    allocated: Vec<(u64, u64)>,
    /// Blocks allocated by this transaction.
    fresh: HashSet<u64>,
    objects_delta: i64,
    stored_delta: i64,
}

/// One object addressed inside a transaction.
struct Obj<'a> {
    coll: &'a str,
    name: &'a str,
    key: Vec<u8>,
    prefix: Vec<u8>,
}

fn range_keys(t: &BytesTable<'_>, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let iter = match prefix_end(prefix) {
        Some(end) => t.range(prefix..end.as_slice()).map_err(kv)?,
        None => t.range(prefix..).map_err(kv)?,
    };
    for item in iter {
        let (k, v) = item.map_err(kv)?;
        out.push((k.value().to_vec(), v.value().to_vec()));
    }
    Ok(out)
}

fn take_prefix(t: &mut BytesTable<'_>, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let entries = range_keys(t, prefix)?;
    for (k, _) in &entries {
        t.remove(k.as_slice()).map_err(kv)?;
    }
    Ok(entries)
}

impl Store {
    /// Applies `txn` atomically and durably: when this returns `Ok`, every operation is
    /// persistent; on `Err`, none is. A device or KV error fails the store. Copies the
    /// transaction; [`Store::queue_transaction_owned`] avoids the copy.
    pub async fn queue_transaction(&self, txn: &Transaction) -> Result<()> {
        self.queue_transaction_owned(txn.clone()).await
    }

    /// As [`Store::queue_transaction`], taking ownership of the transaction.
    ///
    /// Transactions submitted concurrently are committed as a group (group commit): one device
    /// flush and one KV commit for all of them, each still atomic on its own (they are staged in
    /// submission order; one that fails is dropped from the group and the rest restaged).
    pub async fn queue_transaction_owned(&self, txn: Transaction) -> Result<()> {
        self.check_ok()?;
        self.check_limits(&txn)?;
        let (done, result) = oneshot::channel();
        self.commit_queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(Pending { txn, done });
        let mut result = result;
        let dropped = || StoreError::Failed("transaction was dropped by the committer".into());
        // Either another submitter's group commit completes this transaction, or this task gets
        // the write lock and commits what is queued (oldest first, up to the group limits) as one
        // group. Repeat until this transaction is done: a full group may not have included it.
        loop {
            tokio::select! {
                biased;
                r = &mut result => return r.map_err(|_| dropped())?,
                mut st = self.state.write() => {
                    let batch = self.take_batch();
                    if !batch.is_empty() {
                        self.commit_group(&mut st, batch).await;
                    }
                }
            }
        }
    }

    /// Takes queued transactions for one group, up to `max_group_txns` and `max_txn_bytes`.
    fn take_batch(&self) -> Vec<Pending> {
        let mut q = self.commit_queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut bytes = 0u64;
        while let Some(p) = q.front() {
            let b: u64 = p.txn.ops.iter().map(Op::data_bytes).sum();
            if !out.is_empty()
                && (out.len() >= self.cfg.max_group_txns || bytes + b > self.cfg.max_txn_bytes)
            {
                break;
            }
            bytes += b;
            if let Some(p) = q.pop_front() {
                out.push(p);
            }
        }
        out
    }

    /// Fails every waiter with `e` (the first gets the error itself, the rest a copy of its text).
    fn fail_all(&self, live: Vec<Pending>, e: StoreError) {
        let e = self.fatal(e);
        let text = e.to_string();
        let mut first = Some(e);
        for p in live {
            let err = first
                .take()
                .unwrap_or_else(|| StoreError::Failed(text.clone()));
            let _ = p.done.send(Err(err));
        }
    }

    async fn commit_group(&self, st: &mut State, mut live: Vec<Pending>) {
        loop {
            if let Err(e) = self.check_ok() {
                return self.fail_all(live, e);
            }
            let mut wtx = match self.db.begin_write() {
                Ok(w) => w,
                Err(e) => return self.fail_all(live, kv(e)),
            };
            // The commit point: durable when commit() returns (one sync of the KV file).
            wtx.set_durability(redb::Durability::Immediate);
            let mut stage = Stage::default();
            let t_stage = Instant::now();
            let staged = async {
                let mut t = Tables::open(&wtx).map_err(|e| (usize::MAX, e))?;
                for (i, p) in live.iter().enumerate() {
                    for op in &p.txn.ops {
                        self.stage_op(st, &mut stage, &mut t, op)
                            .await
                            .map_err(|e| (i, e))?;
                    }
                }
                for p in &stage.deferred_dropped {
                    t.deferred.remove(*p).map_err(|e| (usize::MAX, kv(e)))?;
                }
                for (p, c) in &stage.deferred_new {
                    t.deferred
                        .insert(*p, codec::seal(c).as_slice())
                        .map_err(|e| (usize::MAX, kv(e)))?;
                }
                Ok::<(), (usize, StoreError)>(())
            }
            .await;
            if let Err((i, e)) = staged {
                drop(wtx);
                for (s, l) in std::mem::take(&mut stage.allocated) {
                    if let Err(e) = st.alloc.release(s, l) {
                        return self.fail_all(live, e);
                    }
                }
                if e.is_fatal() || i >= live.len() {
                    return self.fail_all(live, e);
                }
                let p = live.remove(i);
                let _ = p.done.send(Err(e));
                if live.is_empty() {
                    return;
                }
                continue;
            }
            elapsed_into(&self.counters.stage_ns, t_stage);
            if !stage.new_data.is_empty() {
                let t = Instant::now();
                let blocks: Vec<(u64, &[u8])> = stage
                    .new_data
                    .iter()
                    .map(|(p, d)| (*p, d.as_slice()))
                    .collect();
                if let Err(e) = self.write_blocks(&blocks).await {
                    return self.fail_all(live, e);
                }
                elapsed_into(&self.counters.data_write_ns, t);
                let t = Instant::now();
                if let Err(e) = self.dev_flush().await {
                    return self.fail_all(live, e);
                }
                elapsed_into(&self.counters.device_flush_ns, t);
            }
            let t = Instant::now();
            if let Err(e) = wtx.commit() {
                return self.fail_all(live, kv(e));
            }
            elapsed_into(&self.counters.kv_commit_ns, t);
            for p in &stage.to_free {
                if let Err(e) = st.alloc.release(*p, 1) {
                    let e = StoreError::Failed(format!("allocator inconsistent after commit: {e}"));
                    return self.fail_all(live, e);
                }
            }
            for p in &stage.deferred_dropped {
                st.deferred.remove(p);
            }
            for (p, c) in std::mem::take(&mut stage.deferred_new) {
                st.deferred.insert(p, Arc::new(c));
            }
            st.objects = st.objects.saturating_add_signed(stage.objects_delta);
            st.stored_bytes = st.stored_bytes.saturating_add_signed(stage.stored_delta);
            let user: u64 = live
                .iter()
                .flat_map(|p| p.txn.ops.iter())
                .map(Op::data_bytes)
                .sum();
            self.counters
                .user_bytes_written
                .fetch_add(user, Ordering::Relaxed);
            self.counters
                .commits
                .fetch_add(live.len() as u64, Ordering::Relaxed);
            self.counters.group_commits.fetch_add(1, Ordering::Relaxed);
            let apply_result = if st.deferred.len() as u64 * self.sb.block_bytes
                >= self.cfg.deferred_batch_bytes
            {
                self.apply_deferred(st).await
            } else {
                Ok(())
            };
            // The transactions are durable whatever happens to the deferred application; a
            // failure there has already failed the store for later calls.
            drop(apply_result);
            for p in live {
                let _ = p.done.send(Ok(()));
            }
            return;
        }
    }

    fn check_name(&self, what: &str, name: &str) -> Result<()> {
        if name.is_empty() || name.len() > self.cfg.max_name_bytes {
            return Err(StoreError::Limit(format!(
                "{what} name of {} bytes (must be 1..={})",
                name.len(),
                self.cfg.max_name_bytes
            )));
        }
        Ok(())
    }

    fn check_limits(&self, txn: &Transaction) -> Result<()> {
        if txn.ops.len() > self.cfg.max_txn_ops {
            return Err(StoreError::Limit(format!(
                "{} ops > {}",
                txn.ops.len(),
                self.cfg.max_txn_ops
            )));
        }
        let bytes: u64 = txn.ops.iter().map(Op::data_bytes).sum();
        if bytes > self.cfg.max_txn_bytes {
            return Err(StoreError::Limit(format!(
                "{bytes} bytes > {}",
                self.cfg.max_txn_bytes
            )));
        }
        let value_ok = |v: &[u8]| v.len() <= self.cfg.max_value_bytes;
        for op in &txn.ops {
            match op {
                Op::CreateCollection { coll } | Op::RemoveCollection { coll } => {
                    self.check_name("collection", coll)?
                }
                Op::Touch { coll, obj }
                | Op::Remove { coll, obj }
                | Op::Write { coll, obj, .. }
                | Op::Zero { coll, obj, .. }
                | Op::Truncate { coll, obj, .. }
                | Op::RmAttr { coll, obj, .. }
                | Op::OmapRemove { coll, obj, .. } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", obj)?;
                }
                Op::SetAttr {
                    coll,
                    obj,
                    name,
                    value,
                } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", obj)?;
                    self.check_name("attribute", name)?;
                    if !value_ok(value) {
                        return Err(StoreError::Limit(format!(
                            "attribute value of {} bytes",
                            value.len()
                        )));
                    }
                }
                Op::OmapSet { coll, obj, entries } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", obj)?;
                    if entries
                        .iter()
                        .any(|(k, v)| k.len() > self.cfg.max_name_bytes || !value_ok(v))
                    {
                        return Err(StoreError::Limit("omap key or value too large".into()));
                    }
                }
                Op::Clone { coll, src, dst } | Op::Rename { coll, src, dst } => {
                    self.check_name("collection", coll)?;
                    self.check_name("object", src)?;
                    self.check_name("object", dst)?;
                }
            }
            let end = match op {
                Op::Write {
                    offset_bytes, data, ..
                } => offset_bytes.checked_add(data.len() as u64),
                Op::Zero {
                    offset_bytes,
                    len_bytes,
                    ..
                } => offset_bytes.checked_add(*len_bytes),
                Op::Truncate { size_bytes, .. } => Some(*size_bytes),
                _ => Some(0),
            };
            if end.is_none_or(|e| e > self.cfg.max_object_bytes) {
                return Err(StoreError::Limit(format!(
                    "object would exceed {} bytes",
                    self.cfg.max_object_bytes
                )));
            }
        }
        Ok(())
    }

    fn coll_id(t: &Tables<'_>, coll: &str) -> Result<u32> {
        match t.colls.get(coll).map_err(kv)? {
            Some(v) => Ok(codec::le_u32(
                codec::open(v.value(), "collection")?,
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
            name,
            key: onode_key(id, name),
            prefix: object_prefix(id, name),
        })
    }

    fn get_onode(t: &Tables<'_>, o: &Obj<'_>) -> Result<Option<Onode>> {
        match t.onodes.get(o.key.as_slice()).map_err(kv)? {
            Some(v) => Ok(Some(Onode::decode(v.value())?)),
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
        t.onodes
            .insert(o.key.as_slice(), n.encode().as_slice())
            .map_err(kv)?;
        stage.objects_delta += 1;
        Ok(n)
    }

    fn set_size(
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        old: Onode,
        size_bytes: u64,
    ) -> Result<()> {
        stage.stored_delta += size_bytes as i64 - old.size_bytes as i64;
        let n = Onode { size_bytes };
        t.onodes
            .insert(o.key.as_slice(), n.encode().as_slice())
            .map_err(kv)?;
        Ok(())
    }

    fn get_ref(t: &Tables<'_>, prefix: &[u8], idx: u64) -> Result<Option<BlockRef>> {
        match t
            .blocks
            .get(block_key(prefix, idx).as_slice())
            .map_err(kv)?
        {
            Some(v) => Ok(Some(BlockRef::decode(v.value())?)),
            None => Ok(None),
        }
    }

    fn put_ref(t: &mut Tables<'_>, prefix: &[u8], idx: u64, r: BlockRef) -> Result<()> {
        t.blocks
            .insert(block_key(prefix, idx).as_slice(), r.encode().as_slice())
            .map_err(kv)?;
        Ok(())
    }

    fn alloc_blocks(&self, st: &mut State, stage: &mut Stage, n: u64) -> Result<Vec<u64>> {
        let extents = st.alloc.allocate(n)?;
        let mut out = Vec::with_capacity(n as usize);
        for (s, l) in extents {
            stage.allocated.push((s, l));
            for p in s..s + l {
                stage.fresh.insert(p);
                out.push(p);
            }
        }
        Ok(out)
    }

    fn free_block(st: &State, stage: &mut Stage, pblock: u64) {
        stage.new_data.remove(&pblock);
        stage.deferred_new.remove(&pblock);
        if st.deferred.contains_key(&pblock) {
            stage.deferred_dropped.push(pblock);
        }
        stage.to_free.push(pblock);
    }

    /// Current contents of a block as this transaction sees it, verified against `r.crc`.
    async fn staged_block(
        &self,
        st: &State,
        stage: &Stage,
        o: &Obj<'_>,
        idx: u64,
        r: BlockRef,
    ) -> Result<Vec<u8>> {
        if let Some(d) = stage
            .new_data
            .get(&r.pblock)
            .or_else(|| stage.deferred_new.get(&r.pblock))
        {
            return Ok(d.clone());
        }
        let data = match st.deferred.get(&r.pblock) {
            Some(d) => d.as_ref().clone(),
            None => {
                let mut buf = vec![0u8; self.sb.block_bytes as usize];
                self.dev_read(r.pblock * self.sb.block_bytes, &mut buf)
                    .await?;
                buf
            }
        };
        let actual = crc32c::crc32c(&data);
        if actual != r.crc {
            return Err(StoreError::ChecksumMismatch {
                collection: o.coll.to_string(),
                object: o.name.to_string(),
                block_index: idx,
                expected_crc: r.crc,
                actual_crc: actual,
            });
        }
        Ok(data)
    }

    /// Stores new contents for an existing block as a small (deferred) change.
    fn put_small(
        stage: &mut Stage,
        t: &mut Tables<'_>,
        prefix: &[u8],
        idx: u64,
        r: BlockRef,
        content: Vec<u8>,
    ) -> Result<()> {
        let crc = crc32c::crc32c(&content);
        match stage.new_data.get_mut(&r.pblock) {
            Some(slot) => *slot = content,
            None => {
                stage.deferred_new.insert(r.pblock, content);
            }
        }
        Self::put_ref(
            t,
            prefix,
            idx,
            BlockRef {
                pblock: r.pblock,
                crc,
            },
        )
    }

    async fn stage_write(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let node = Self::ensure(stage, t, o)?;
        if data.is_empty() {
            return Ok(());
        }
        let bs = self.sb.block_bytes;
        let end = offset + data.len() as u64;
        let deferred = (data.len() as u64) < self.cfg.deferred_max_bytes;
        let (first, last) = (offset / bs, (end - 1) / bs);
        let mut existing = std::collections::HashMap::new();
        {
            let from = block_key(&o.prefix, first);
            let to = block_key(&o.prefix, last + 1);
            for item in t.blocks.range(from.as_slice()..to.as_slice()).map_err(kv)? {
                let (k, v) = item.map_err(kv)?;
                let (_, idx) = codec::split_block_key(k.value())?;
                existing.insert(idx, BlockRef::decode(v.value())?);
            }
        }
        let refs: Vec<(u64, Option<BlockRef>)> = (first..=last)
            .map(|idx| (idx, existing.get(&idx).copied()))
            .collect();
        let need = refs
            .iter()
            .filter(|(_, r)| match r {
                None => true,
                Some(r) => !deferred && !stage.fresh.contains(&r.pblock),
            })
            .count() as u64;
        let mut new_blocks = self.alloc_blocks(st, stage, need)?.into_iter();
        for (idx, existing) in refs {
            let bstart = idx * bs;
            let s = offset.max(bstart) - bstart;
            let e = end.min(bstart + bs) - bstart;
            let src = &data[(bstart + s - offset) as usize..(bstart + e - offset) as usize];
            let content = if s == 0 && e == bs {
                src.to_vec()
            } else {
                let mut base = match existing {
                    Some(r) => self.staged_block(st, stage, o, idx, r).await?,
                    None => vec![0u8; bs as usize],
                };
                base[s as usize..e as usize].copy_from_slice(src);
                base
            };
            match existing {
                Some(r) if stage.fresh.contains(&r.pblock) || deferred => {
                    Self::put_small(stage, t, &o.prefix, idx, r, content)?;
                }
                _ => {
                    let p = new_blocks.next().ok_or_else(|| {
                        StoreError::Failed("allocator returned too few blocks".into())
                    })?;
                    if let Some(r) = existing {
                        Self::free_block(st, stage, r.pblock);
                    }
                    let crc = crc32c::crc32c(&content);
                    if deferred {
                        stage.deferred_new.insert(p, content);
                    } else {
                        stage.new_data.insert(p, content);
                    }
                    Self::put_ref(t, &o.prefix, idx, BlockRef { pblock: p, crc })?;
                }
            }
        }
        if end > node.size_bytes {
            Self::set_size(stage, t, o, node, end)?;
        }
        Ok(())
    }

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
        for idx in offset / bs..=(end - 1) / bs {
            let Some(r) = Self::get_ref(t, &o.prefix, idx)? else {
                continue;
            };
            let bstart = idx * bs;
            let s = offset.max(bstart) - bstart;
            let e = end.min(bstart + bs) - bstart;
            if s == 0 && e == bs {
                t.blocks
                    .remove(block_key(&o.prefix, idx).as_slice())
                    .map_err(kv)?;
                Self::free_block(st, stage, r.pblock);
            } else {
                let mut c = self.staged_block(st, stage, o, idx, r).await?;
                c[s as usize..e as usize].fill(0);
                Self::put_small(stage, t, &o.prefix, idx, r, c)?;
            }
        }
        Ok(())
    }

    fn remove_object(
        st: &State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        o: &Obj<'_>,
    ) -> Result<bool> {
        let Some(node) = Self::get_onode(t, o)? else {
            return Ok(false);
        };
        for (_, v) in take_prefix(&mut t.blocks, &o.prefix)? {
            Self::free_block(st, stage, BlockRef::decode(&v)?.pblock);
        }
        take_prefix(&mut t.xattrs, &o.prefix)?;
        take_prefix(&mut t.omap, &o.prefix)?;
        t.onodes.remove(o.key.as_slice()).map_err(kv)?;
        stage.objects_delta -= 1;
        stage.stored_delta -= node.size_bytes as i64;
        Ok(true)
    }

    async fn stage_op(
        &self,
        st: &mut State,
        stage: &mut Stage,
        t: &mut Tables<'_>,
        op: &Op,
    ) -> Result<()> {
        match op {
            Op::CreateCollection { coll } => {
                if t.colls.get(coll.as_str()).map_err(kv)?.is_some() {
                    return Err(StoreError::CollectionExists(coll.clone()));
                }
                let next = match t.meta.get("next_coll").map_err(kv)? {
                    Some(v) => codec::le_u32(codec::open(v.value(), "next_coll")?, 0, "next_coll")?,
                    None => return Err(StoreError::Corrupt("next_coll missing".into())),
                };
                let following = next
                    .checked_add(1)
                    .ok_or_else(|| StoreError::Limit("collection ids exhausted".into()))?;
                t.colls
                    .insert(coll.as_str(), codec::seal(&next.to_le_bytes()).as_slice())
                    .map_err(kv)?;
                t.meta
                    .insert(
                        "next_coll",
                        codec::seal(&following.to_le_bytes()).as_slice(),
                    )
                    .map_err(kv)?;
            }
            Op::RemoveCollection { coll } => {
                let id = Self::coll_id(t, coll)?;
                let start = id.to_be_bytes();
                let non_empty = match id.checked_add(1) {
                    Some(n) => t
                        .onodes
                        .range(start.as_slice()..n.to_be_bytes().as_slice())
                        .map_err(kv)?
                        .next()
                        .is_some(),
                    None => t
                        .onodes
                        .range(start.as_slice()..)
                        .map_err(kv)?
                        .next()
                        .is_some(),
                };
                if non_empty {
                    return Err(StoreError::CollectionNotEmpty(coll.clone()));
                }
                t.colls.remove(coll.as_str()).map_err(kv)?;
            }
            Op::Touch { coll, obj } => {
                let o = Self::obj(t, coll, obj)?;
                Self::ensure(stage, t, &o)?;
            }
            Op::Write {
                coll,
                obj,
                offset_bytes,
                data,
            } => {
                let o = Self::obj(t, coll, obj)?;
                self.stage_write(st, stage, t, &o, *offset_bytes, data)
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
                    Self::set_size(stage, t, &o, node, end)?;
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
                    let from = block_key(&o.prefix, keep_blocks);
                    let to = prefix_end(&o.prefix);
                    let doomed: Vec<(Vec<u8>, Vec<u8>)> = {
                        let iter = match &to {
                            Some(end) => t
                                .blocks
                                .range(from.as_slice()..end.as_slice())
                                .map_err(kv)?,
                            None => t.blocks.range(from.as_slice()..).map_err(kv)?,
                        };
                        let mut v = Vec::new();
                        for item in iter {
                            let (k, val) = item.map_err(kv)?;
                            v.push((k.value().to_vec(), val.value().to_vec()));
                        }
                        v
                    };
                    for (k, v) in doomed {
                        t.blocks.remove(k.as_slice()).map_err(kv)?;
                        Self::free_block(st, stage, BlockRef::decode(&v)?.pblock);
                    }
                    let tail_end = (keep_blocks * bs).min(node.size_bytes);
                    self.zero_range(st, stage, t, &o, *size_bytes, tail_end)
                        .await?;
                }
                if *size_bytes != node.size_bytes {
                    Self::set_size(stage, t, &o, node, *size_bytes)?;
                }
            }
            Op::Remove { coll, obj } => {
                let o = Self::obj(t, coll, obj)?;
                if !Self::remove_object(st, stage, t, &o)? {
                    Self::must_exist(t, &o)?;
                }
            }
            Op::Clone { coll, src, dst } => {
                let s = Self::obj(t, coll, src)?;
                let d = Self::obj(t, coll, dst)?;
                let node = Self::must_exist(t, &s)?;
                if src == dst {
                    return Ok(());
                }
                Self::remove_object(st, stage, t, &d)?;
                let refs = range_keys(&t.blocks, &s.prefix)?;
                let new_blocks = self.alloc_blocks(st, stage, refs.len() as u64)?;
                for ((k, v), p) in refs.iter().zip(new_blocks) {
                    let (_, idx) = codec::split_block_key(k)?;
                    let r = BlockRef::decode(v)?;
                    let content = self.staged_block(st, stage, &s, idx, r).await?;
                    stage.new_data.insert(p, content);
                    Self::put_ref(
                        t,
                        &d.prefix,
                        idx,
                        BlockRef {
                            pblock: p,
                            crc: r.crc,
                        },
                    )?;
                }
                for (k, v) in range_keys(&t.xattrs, &s.prefix)? {
                    t.xattrs
                        .insert(
                            sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                            v.as_slice(),
                        )
                        .map_err(kv)?;
                }
                for (k, v) in range_keys(&t.omap, &s.prefix)? {
                    t.omap
                        .insert(
                            sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                            v.as_slice(),
                        )
                        .map_err(kv)?;
                }
                t.onodes
                    .insert(d.key.as_slice(), node.encode().as_slice())
                    .map_err(kv)?;
                stage.objects_delta += 1;
                stage.stored_delta += node.size_bytes as i64;
            }
            Op::Rename { coll, src, dst } => {
                let s = Self::obj(t, coll, src)?;
                let d = Self::obj(t, coll, dst)?;
                let node = Self::must_exist(t, &s)?;
                if src == dst {
                    return Ok(());
                }
                Self::remove_object(st, stage, t, &d)?;
                for (k, v) in take_prefix(&mut t.blocks, &s.prefix)? {
                    t.blocks
                        .insert(
                            sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                            v.as_slice(),
                        )
                        .map_err(kv)?;
                }
                for (k, v) in take_prefix(&mut t.xattrs, &s.prefix)? {
                    t.xattrs
                        .insert(
                            sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                            v.as_slice(),
                        )
                        .map_err(kv)?;
                }
                for (k, v) in take_prefix(&mut t.omap, &s.prefix)? {
                    t.omap
                        .insert(
                            sub_key(&d.prefix, &k[s.prefix.len()..]).as_slice(),
                            v.as_slice(),
                        )
                        .map_err(kv)?;
                }
                t.onodes.remove(s.key.as_slice()).map_err(kv)?;
                t.onodes
                    .insert(d.key.as_slice(), node.encode().as_slice())
                    .map_err(kv)?;
            }
            Op::SetAttr {
                coll,
                obj,
                name,
                value,
            } => {
                let o = Self::obj(t, coll, obj)?;
                Self::ensure(stage, t, &o)?;
                let k = sub_key(&o.prefix, name.as_bytes());
                t.xattrs
                    .insert(k.as_slice(), codec::seal(value).as_slice())
                    .map_err(kv)?;
            }
            Op::RmAttr { coll, obj, name } => {
                let o = Self::obj(t, coll, obj)?;
                Self::must_exist(t, &o)?;
                t.xattrs
                    .remove(sub_key(&o.prefix, name.as_bytes()).as_slice())
                    .map_err(kv)?;
            }
            Op::OmapSet { coll, obj, entries } => {
                let o = Self::obj(t, coll, obj)?;
                Self::ensure(stage, t, &o)?;
                for (k, v) in entries {
                    t.omap
                        .insert(sub_key(&o.prefix, k).as_slice(), codec::seal(v).as_slice())
                        .map_err(kv)?;
                }
            }
            Op::OmapRemove { coll, obj, keys } => {
                let o = Self::obj(t, coll, obj)?;
                Self::must_exist(t, &o)?;
                for k in keys {
                    t.omap
                        .remove(sub_key(&o.prefix, k).as_slice())
                        .map_err(kv)?;
                }
            }
        }
        Ok(())
    }
}
