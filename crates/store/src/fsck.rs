//! Consistency checking: `fsck` (metadata) and `fsck --deep` (also reads and verifies every
//! block).
//!
//! Owns the list of invariants the store promises: every record decodes; every block, xattr and
//! omap entry belongs to an existing object; no block lies past its object's size; no physical
//! block is referenced twice or lies outside the data area; the allocator agrees with the
//! references; deferred writes target referenced blocks; and (deep) every block matches its
//! crc32c. It must never modify the store.

use crate::codec::{self, split_block_key, split_prefix, BlockRef, Onode};
use crate::error::{kv, Result};
use crate::kv::{BLOCKS, COLLS, DEFERRED, OMAP, ONODES, XATTRS};
use crate::store::Store;
use redb::ReadableTable;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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
        let st = self.state.read().await;
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
                }
                Err(e) => rep.errors.push(format!("object {name:?}: {e}")),
            }
            rep.objects += 1;
        }
        let coll_name = |id: u32| colls.get(&id).cloned().unwrap_or_else(|| format!("#{id}"));

        let mut refs: Vec<(u64, BlockRef, u32, String, u64)> = Vec::new();
        let mut seen: HashMap<u64, u32> = HashMap::new();
        for item in rtx.open_table(BLOCKS).map_err(kv)?.iter().map_err(kv)? {
            let (k, v) = item.map_err(kv)?;
            let parsed = split_block_key(k.value())
                .and_then(|(p, idx)| split_prefix(p).map(|(c, n, _)| (c, n.to_string(), idx)));
            let (id, name, idx) = match parsed {
                Ok(x) => x,
                Err(e) => {
                    rep.errors.push(format!("block key: {e}"));
                    continue;
                }
            };
            let r = match BlockRef::decode(v.value()) {
                Ok(r) => r,
                Err(e) => {
                    rep.errors
                        .push(format!("{}/{name} block {idx}: {e}", coll_name(id)));
                    continue;
                }
            };
            match sizes.get(&(id, name.clone())) {
                None => rep.errors.push(format!(
                    "orphan block {idx} of missing object {}/{name}",
                    coll_name(id)
                )),
                Some(&size) if idx * bs >= size => rep.errors.push(format!(
                    "{}/{name} block {idx} lies past the object size {size}",
                    coll_name(id)
                )),
                Some(_) => {}
            }
            if r.pblock == 0 || r.pblock >= total_blocks {
                rep.errors.push(format!(
                    "{}/{name} block {idx} points outside the data area ({})",
                    coll_name(id),
                    r.pblock
                ));
                continue;
            }
            *seen.entry(r.pblock).or_insert(0) += 1;
            if st.alloc.is_free(r.pblock) {
                rep.errors
                    .push(format!("block {} is referenced but marked free", r.pblock));
            }
            refs.push((r.pblock, r, id, name, idx));
        }
        for (p, n) in &seen {
            if *n > 1 {
                rep.errors
                    .push(format!("physical block {p} is referenced {n} times"));
            }
        }
        let usable = total_blocks - 1;
        let used = usable - st.alloc.free_blocks();
        if used != seen.len() as u64 {
            rep.errors.push(format!(
                "allocator says {used} blocks used, metadata references {}",
                seen.len()
            ));
        }
        for (table, what) in [(XATTRS, "xattr"), (OMAP, "omap entry")] {
            for item in rtx.open_table(table).map_err(kv)?.iter().map_err(kv)? {
                let (k, v) = item.map_err(kv)?;
                match split_prefix(k.value()) {
                    Ok((id, name, _)) if !sizes.contains_key(&(id, name.to_string())) => {
                        rep.errors.push(format!(
                            "orphan {what} of missing object {}/{name}",
                            coll_name(id)
                        ))
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
            if !seen.contains_key(&k.value()) {
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
            refs.sort_unstable_by_key(|r| r.0);
            let max_run = (self.cfg.max_io_bytes / bs).max(1) as usize;
            let mut damaged: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
            let mut i = 0;
            while i < refs.len() {
                let mut j = i + 1;
                while j < refs.len() && j - i < max_run && refs[j].0 == refs[j - 1].0 + 1 {
                    j += 1;
                }
                let mut buf = vec![0u8; (j - i) * bs as usize];
                self.dev_read(refs[i].0 * bs, &mut buf).await?;
                for (k, (p, r, id, name, idx)) in refs[i..j].iter().enumerate() {
                    let data = match st.deferred.get(p) {
                        Some(d) => d.as_slice(),
                        None => &buf[k * bs as usize..(k + 1) * bs as usize],
                    };
                    rep.blocks_verified += 1;
                    if crc32c::crc32c(data) != r.crc {
                        damaged
                            .entry((coll_name(*id), name.clone()))
                            .or_default()
                            .push(*idx);
                    }
                }
                i = j;
            }
            for ((c, n), blocks) in damaged {
                rep.errors
                    .push(format!("{c}/{n}: checksum mismatch in blocks {blocks:?}"));
                rep.damaged_objects.insert((c, n));
            }
        }
        Ok(rep)
    }
}
