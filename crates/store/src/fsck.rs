//! Consistency checking: `fsck` (metadata) and `fsck --deep` (also reads and verifies every
//! block).
//!
//! Owns the list of invariants the store promises: every record decodes; every extent, xattr
//! and omap entry belongs to an existing object; an object's extent map is in one place (its
//! onode, or the extents table when the onode says so); its extents do not overlap and none
//! reaches past its object's size; no physical block is referenced twice or lies outside the
//! data area; the allocator agrees with the references; deferred writes target referenced
//! blocks; each collection's kept usage (objects, bytes) is what its onodes add up to; and
//! (deep) every block matches its crc32c. It must never modify the store.

use crate::codec::{self, split_block_key, split_prefix, Extent, Onode};
use crate::error::{kv, Result};
use crate::kv::{COLLS, DEFERRED, EXTENTS, OMAP, ONODES, XATTRS};
use crate::store::{State, Store};
use crate::usage::UsageTable;
use cairn_convert::usize_of;
use redb::ReadableTable;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;

/// What fsck found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Human-readable descriptions of every problem.
    pub errors: Vec<String>,
    /// Objects with at least one block failing its checksum (deep only): (collection, object).
    pub damaged_objects: BTreeSet<(String, String)>,
    /// Objects examined.
    pub objects: u64,
    /// Blocks whose data was read and verified (deep only).
    pub blocks_verified: u64,
}

impl FsckReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.damaged_objects.is_empty()
    }
}

impl Store {
    /// Checks the store; with `deep`, also reads every block and verifies its checksum.
    /// Device read errors are fatal (returned as `Err`); everything else goes into the report.
    pub async fn fsck(&self, deep: bool) -> Result<FsckReport> {
        self.check_ok()?;
        // fsck reads the KV itself: first commit the overlay of changes since the checkpoint.
        let mut w = self.state.write().await;
        self.drain(&mut w).await?;
        self.wait_checkpoint(&mut w).await?;
        if !w.overlay.is_empty() {
            self.checkpoint(&mut w, Vec::new()).await?;
        }
        self.release_all_read_quarantine(&mut w).await?;
        let st = w.downgrade();
        let rtx = self.db.begin_read().map_err(kv)?;
        let mut rep = FsckReport::default();
        let bs = self.sb.block_bytes;
        let total_blocks = self.sb.device_bytes / bs;

        let mut colls: HashMap<u32, String> = HashMap::new();
        for item in rtx.open_table(COLLS).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            match codec::open(v.value(), "collection")
                .and_then(|p| codec::le_u32(p, 0, "collection"))
            {
                Ok(id) => {
                    colls.insert(id, k.value().to_string());
                }
                Err(e) => rep.errors.push(format!("collection {:?}: {e}", k.value())),
            }
        }
        let mut sizes: HashMap<(u32, String), u64> = HashMap::new();
        // Objects whose onode says they may have attributes in the xattr table, with the names
        // of the attributes the onode holds itself.
        let mut spilled: HashMap<(u32, String), Vec<String>> = HashMap::new();
        // Objects whose extent map is in the extents table; the extents of the others, from
        // their onodes.
        let mut map_in_table: HashSet<(u32, String)> = HashSet::new();
        let mut inline_refs: Vec<(Extent, u32, String)> = Vec::new();
        for item in rtx.open_table(ONODES).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            let key = k.value();
            if key.len() < 4 {
                rep.errors.push("onode key too short".into());
                continue;
            }
            let id = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
            let Ok(name) = std::str::from_utf8(&key[4..]) else {
                rep.errors.push("onode name is not UTF-8".into());
                continue;
            };
            if !colls.contains_key(&id) {
                rep.errors
                    .push(format!("object {name:?} in missing collection {id}"));
            }
            match Onode::decode(v.value()) {
                Ok(n) => {
                    sizes.insert((id, name.to_string()), n.size_bytes);
                    if n.extents_spilled {
                        map_in_table.insert((id, name.to_string()));
                    }
                    inline_refs.extend(n.extents.iter().map(|e| (e.clone(), id, name.to_string())));
                    if n.spilled {
                        let inline = n.attrs.into_iter().map(|(a, _)| a).collect();
                        spilled.insert((id, name.to_string()), inline);
                    }
                }
                Err(e) => rep.errors.push(format!("object {name:?}: {e}")),
            }
            rep.objects += 1;
        }
        let coll_name = |id: u32| colls.get(&id).cloned().unwrap_or_else(|| format!("#{id}"));
        let mut counted = UsageTable::default();
        for ((id, _), size) in &sizes {
            counted.count(*id, *size);
        }
        let ids: BTreeSet<u32> = counted
            .collections()
            .chain(st.usage.collections())
            .collect();
        for id in ids {
            let (have, kept) = (counted.get(id), st.usage.get(id));
            if have != kept {
                rep.errors.push(format!(
                    "collection {}: {} objects of {} bytes, but its usage says {} of {}",
                    coll_name(id),
                    have.objects,
                    have.bytes,
                    kept.objects,
                    kept.bytes
                ));
            }
        }

        // (extent, collection id, object name), in key order: by object, then logical block.
        let mut refs: Vec<(Extent, u32, String)> = Vec::new();
        for item in rtx.open_table(EXTENTS).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            let parsed = split_block_key(k.value())
                .and_then(|(p, idx)| split_prefix(p).map(|(c, n, _)| (c, n.to_string(), idx)));
            let (id, name, idx) = match parsed {
                Ok(x) => x,
                Err(e) => {
                    rep.errors.push(format!("extent key: {e}"));
                    continue;
                }
            };
            let e = match Extent::decode(idx, v.value()) {
                Ok(e) => e,
                Err(e) => {
                    rep.errors
                        .push(format!("{}/{name} block {idx}: {e}", coll_name(id)));
                    continue;
                }
            };
            match sizes.get(&(id, name.clone())) {
                None => rep.errors.push(format!(
                    "orphan extent at block {idx} of missing object {}/{name}",
                    coll_name(id)
                )),
                Some(_) if !map_in_table.contains(&(id, name.clone())) => rep.errors.push(format!(
                    "extent record at block {idx} of {}/{name}, whose onode holds its map",
                    coll_name(id)
                )),
                Some(_) => {}
            }
            if let Some((prev, pid, pname)) = refs.last() {
                if *pid == id && *pname == name && prev.lend() > e.lblock {
                    rep.errors.push(format!(
                        "{}/{name}: extents at blocks {} and {} overlap",
                        coll_name(id),
                        prev.lblock,
                        e.lblock
                    ));
                }
            }
            refs.push((e, id, name));
        }
        // Both places: inside the object's size, inside the data area, marked used.
        refs.extend(inline_refs);
        refs.retain(|(e, id, name)| {
            let idx = e.lblock;
            if let Some(&size) = sizes.get(&(*id, name.clone())) {
                if (e.lend() - 1) * bs >= size {
                    rep.errors.push(format!(
                        "{}/{name} block {} lies past the object size {size}",
                        coll_name(*id),
                        e.lend() - 1
                    ));
                }
            }
            if e.pblock < self.sb.first_data_block()
                || e.pblock.saturating_add(e.blocks()) > total_blocks
            {
                rep.errors.push(format!(
                    "{}/{name} block {idx} points outside the data area ({})",
                    coll_name(*id),
                    e.pblock
                ));
                return false;
            }
            if self.allocator().any_free(e.pblock, e.blocks()) {
                rep.errors.push(format!(
                    "blocks {}..{} are referenced but (partly) marked free",
                    e.pblock,
                    e.pblock + e.blocks()
                ));
            }
            true
        });
        // Physical order: overlaps between neighbours are double references.
        let mut by_pblock: Vec<usize> = (0..refs.len()).collect();
        by_pblock.sort_unstable_by_key(|&i| refs[i].0.pblock);
        let mut referenced = 0u64;
        let mut reach = 0u64;
        for &i in &by_pblock {
            let e = &refs[i].0;
            if e.pblock < reach {
                rep.errors.push(format!(
                    "physical block {} is referenced more than once",
                    e.pblock
                ));
            }
            let end = e.pblock + e.blocks();
            referenced += end.saturating_sub(reach.max(e.pblock));
            reach = reach.max(end);
        }
        let usable = total_blocks - self.sb.first_data_block();
        // Early writes not yet staged hold blocks nothing references yet.
        let used = {
            let a = self.allocator();
            (usable - a.free_blocks()).saturating_sub(self.early_blocks.load(Ordering::Relaxed))
        };
        if used != referenced {
            rep.errors.push(format!(
                "allocator says {used} blocks used, metadata references {referenced}"
            ));
        }
        let is_referenced = |p: u64| {
            let i = by_pblock.partition_point(|&i| refs[i].0.pblock <= p);
            i > 0 && {
                let e = &refs[by_pblock[i - 1]].0;
                p < e.pblock + e.blocks()
            }
        };
        for (table, what, attrs) in [(XATTRS, "xattr", true), (OMAP, "omap entry", false)] {
            for item in rtx.open_table(table).map_err(kv)?.iter().map_err(kv)? {
                let (k, v) = item.map_err(kv)?;
                match split_prefix(k.value()) {
                    Ok((id, name, _)) if !sizes.contains_key(&(id, name.to_string())) => {
                        rep.errors.push(format!(
                            "orphan {what} of missing object {}/{name}",
                            coll_name(id)
                        ))
                    }
                    Ok((id, name, user_key)) if attrs => {
                        match spilled.get(&(id, name.to_string())) {
                            None => rep.errors.push(format!(
                                "xattr of {}/{name} in the table, but its onode is not marked spilled",
                                coll_name(id)
                            )),
                            Some(inline) if inline.iter().any(|a| a.as_bytes() == user_key) => {
                                rep.errors.push(format!(
                                    "xattr {:?} of {}/{name} both in its onode and in the table",
                                    String::from_utf8_lossy(user_key),
                                    coll_name(id)
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                    Ok(_) => {}
                    Err(e) => rep.errors.push(format!("{what} key: {e}")),
                }
                if let Err(e) = codec::open(v.value(), what) {
                    rep.errors.push(e.to_string());
                }
            }
        }
        for item in rtx.open_table(DEFERRED).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            if !is_referenced(k.value()) {
                rep.errors.push(format!(
                    "deferred write to unreferenced block {}",
                    k.value()
                ));
            }
            if let Err(e) = codec::open(v.value(), "deferred write") {
                rep.errors.push(e.to_string());
            }
        }
        if deep {
            self.verify_all(&st, &refs, &by_pblock, &coll_name, &mut rep)
                .await?;
        }
        Ok(rep)
    }

    /// Reads every referenced block (physical order, runs of at most `max_io_bytes`), overlays
    /// pending deferred contents, and records the objects whose blocks fail their crc32c.
    async fn verify_all(
        &self,
        st: &State,
        refs: &[(Extent, u32, String)],
        by_pblock: &[usize],
        coll_name: &dyn Fn(u32) -> String,
        rep: &mut FsckReport,
    ) -> Result<()> {
        let bs = self.sb.block_bytes;
        let max_run = usize_of((self.cfg.max_io_bytes / bs).max(1));
        let mut damaged: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
        for &i in by_pblock {
            let (e, id, name) = &refs[i];
            for chunk in 0..e.crcs.len().div_ceil(max_run) {
                let from = chunk * max_run;
                let to = (from + max_run).min(e.crcs.len());
                let mut buf = vec![0u8; (to - from) * usize_of(bs)];
                self.dev_read((e.pblock + from as u64) * bs, &mut buf)
                    .await?;
                for (k, block) in buf.chunks_exact(usize_of(bs)).enumerate() {
                    let n = from + k;
                    let data = match st.deferred.get(&(e.pblock + n as u64)) {
                        Some(d) => d.as_slice(),
                        None => block,
                    };
                    rep.blocks_verified += 1;
                    if crc_fast::crc32_iscsi(data) != e.crcs[n] {
                        damaged
                            .entry((coll_name(*id), name.clone()))
                            .or_default()
                            .push(e.lblock + n as u64);
                    }
                }
            }
        }
        for ((c, n), mut blocks) in damaged {
            blocks.sort_unstable();
            rep.errors
                .push(format!("{c}/{n}: checksum mismatch in blocks {blocks:?}"));
            rep.damaged_objects.insert((c, n));
        }
        Ok(())
    }
}
