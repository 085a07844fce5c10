//! Where the namespace lives in RADOS, in the file system's metadata pool:
//! - `fs.info`: what `cairn fs new` made (JSON [`FsInfo`]: the data pool, the default layout);
//! - `inodes.XX` (64 shards by inode number): omap `{ino:016x}` -> an inode record;
//! - `dir.{ino:x}`: one per directory, omap name -> its entry (as CephFS keeps dentries);
//! - `fs.state`: omap `next_ino`;
//! - `fs.purge`: omap `{ino:016x}` -> (size, object size) of files whose data objects are
//!   still to be removed;
//! - `mds.journal`: the journal ([`crate::journal`]), appended before answers and emptied
//!   once its records are applied to the objects above.
//!
//! Applying is idempotent (every value is a final state), which is what lets a journal replayed
//! after a crash be applied again over objects it may already have reached.

use std::collections::{BTreeMap, HashMap};

use cairn_client::{Client, ClientError};
use cairn_proto::mds::FileKind;
use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};

use crate::error::FsError;
use crate::namespace::{Dentry, Inode, Namespace, Update};

/// The object naming the file system and its data pool.
pub const INFO_OBJECT: &str = "fs.info";
/// The journal object.
pub const JOURNAL_OBJECT: &str = "mds.journal";
/// The object holding counters.
pub const STATE_OBJECT: &str = "fs.state";
/// The purge queue's object.
pub const PURGE_OBJECT: &str = "fs.purge";
/// Shards of the inode table.
pub const INODE_SHARDS: u64 = 64;
/// Omap entries read per listing request.
const LIST_PAGE: u32 = 1024;
/// Most objects changed at once while applying a batch.
const APPLY_PARALLELISM: usize = 32;

/// What `cairn fs new` records about a file system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsInfo {
    /// Its name.
    pub name: String,
    /// The pool of its metadata (where this object is).
    pub metadata_pool: String,
    /// The pool of its file data.
    pub data_pool: String,
}

/// The metadata pool's name for file system `name`.
pub fn metadata_pool(name: &str) -> String {
    format!("{name}.meta")
}

/// The data pool's name for file system `name`.
pub fn data_pool(name: &str) -> String {
    format!("{name}.data")
}

/// The object of the inode table holding `ino`.
pub fn inode_object(ino: u64) -> String {
    format!("inodes.{:02x}", ino % INODE_SHARDS)
}

/// Where a delegated slot's key starts in the state object.
const SLOT_KEY_PREFIX: &[u8] = b"slot.";

fn slot_key(slot: u64) -> Vec<u8> {
    let mut key = SLOT_KEY_PREFIX.to_vec();
    key.extend_from_slice(format!("{slot:08x}").as_bytes());
    key
}

/// A little-endian u64 stored as the value of `what`.
fn u64_value(what: &str, value: &[u8]) -> Result<u64, FsError> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| FsError::Damaged(format!("{what} is not 8 bytes")))?;
    Ok(u64::from_le_bytes(bytes))
}

fn inode_key(ino: u64) -> Vec<u8> {
    format!("{ino:016x}").into_bytes()
}

/// The object holding directory `ino`'s entries.
pub fn dir_object(ino: u64) -> String {
    format!("dir.{ino:x}")
}

/// The data object `index` of file `ino` (CephFS names them `{ino:x}.{index:08x}`).
pub fn data_object(ino: u64, index: u64) -> String {
    format!("{ino:x}.{index:08x}")
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    rmp_serde::to_vec(v).unwrap_or_default()
}

fn decode<T: for<'a> Deserialize<'a>>(what: &str, bytes: &[u8]) -> Result<T, FsError> {
    rmp_serde::from_slice(bytes).map_err(|e| FsError::Damaged(format!("{what}: {e}")))
}

/// One object's pending omap changes: key -> new value, or removal.
type ObjectChanges = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// The objects `updates` change and how, in their final state; and the directory objects to
/// remove (directories that went).
fn changes_of(updates: &[Update]) -> (HashMap<String, ObjectChanges>, Vec<String>) {
    let mut objects: HashMap<String, ObjectChanges> = HashMap::new();
    let mut gone_dirs = Vec::new();
    let mut put = |obj: String, key: Vec<u8>, value: Option<Vec<u8>>| {
        objects.entry(obj).or_default().insert(key, value);
    };
    for u in updates {
        match u {
            Update::PutInode(i) => put(
                inode_object(i.attr.ino),
                inode_key(i.attr.ino),
                Some(encode(i)),
            ),
            Update::DelInode(ino) => {
                put(inode_object(*ino), inode_key(*ino), None);
                gone_dirs.push(dir_object(*ino));
            }
            Update::PutDentry { dir, name, entry } => {
                put(dir_object(*dir), name.clone(), Some(encode(entry)))
            }
            Update::DelDentry { dir, name } => put(dir_object(*dir), name.clone(), None),
            Update::NextIno(n) => put(
                STATE_OBJECT.into(),
                b"next_ino".to_vec(),
                Some(n.to_le_bytes().to_vec()),
            ),
            Update::Purge {
                ino,
                size,
                object_size,
            } => put(
                PURGE_OBJECT.into(),
                inode_key(*ino),
                Some(encode(&(*size, *object_size))),
            ),
            Update::Slot { slot, client } => put(
                STATE_OBJECT.into(),
                slot_key(*slot),
                Some(client.to_le_bytes().to_vec()),
            ),
        }
    }
    (objects, gone_dirs)
}

/// Applies `updates` to the metadata pool's objects (in parallel across objects; each
/// object's changes in one or two atomic omap operations).
pub async fn apply(client: &Client, pool: &str, updates: &[Update]) -> Result<(), FsError> {
    let (objects, gone_dirs) = changes_of(updates);
    let work: Vec<(String, ObjectChanges)> = objects.into_iter().collect();
    for chunk in work.chunks(APPLY_PARALLELISM) {
        try_join_all(chunk.iter().map(|(obj, changes)| async move {
            let sets: Vec<(Vec<u8>, Vec<u8>)> = changes
                .iter()
                .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
                .collect();
            let removes: Vec<Vec<u8>> = changes
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| k.clone())
                .collect();
            if !sets.is_empty() {
                client.omap_set(pool, obj, &sets).await?;
            }
            if !removes.is_empty() {
                match client.omap_remove(pool, obj, &removes).await {
                    Ok(_) | Err(ClientError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), ClientError>(())
        }))
        .await?;
    }
    for obj in gone_dirs {
        match client.remove(pool, &obj).await {
            Ok(()) | Err(ClientError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Every omap entry of `object` (none if it does not exist).
pub async fn omap_all(
    client: &Client,
    pool: &str,
    object: &str,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, FsError> {
    let mut out = Vec::new();
    let mut after = Vec::new();
    loop {
        let (page, more) = match client.omap_list(pool, object, &after, b"", LIST_PAGE).await {
            Ok(x) => x,
            Err(ClientError::NotFound(_)) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        let n = page.len();
        if let Some((k, _)) = page.last() {
            after.clone_from(k);
        }
        out.extend(page);
        if !more || n == 0 {
            return Ok(out);
        }
    }
}

/// Loads the namespace the objects hold (without the journal).
pub async fn load(client: &Client, pool: &str) -> Result<Namespace, FsError> {
    let mut ns = Namespace::default();
    let shards = try_join_all(
        (0..INODE_SHARDS).map(|s| async move { omap_all(client, pool, &inode_object(s)).await }),
    )
    .await?;
    let mut dirs = Vec::new();
    for (key, value) in shards.into_iter().flatten() {
        let inode: Inode = decode(&format!("inode {}", String::from_utf8_lossy(&key)), &value)?;
        if inode.attr.kind == FileKind::Dir {
            dirs.push(inode.attr.ino);
        }
        ns.apply(&Update::PutInode(inode));
    }
    for chunk in dirs.chunks(APPLY_PARALLELISM) {
        let listed = try_join_all(
            chunk
                .iter()
                .map(|d| async move { omap_all(client, pool, &dir_object(*d)).await }),
        )
        .await?;
        for (dir, entries) in chunk.iter().zip(listed) {
            for (name, value) in entries {
                let entry: Dentry = decode(&format!("an entry of directory {dir}"), &value)?;
                ns.apply(&Update::PutDentry {
                    dir: *dir,
                    name,
                    entry,
                });
            }
        }
    }
    for (key, value) in omap_all(client, pool, STATE_OBJECT).await? {
        if key == b"next_ino" {
            let next = u64_value("next_ino", &value)?;
            if next > crate::namespace::slots::FIRST_SLOT_INO {
                return Err(FsError::Damaged(format!("next_ino {next} is in the slots")));
            }
            ns.apply(&Update::NextIno(next));
        } else if let Some(slot) = key.strip_prefix(SLOT_KEY_PREFIX) {
            let text = String::from_utf8_lossy(slot).to_string();
            let slot = u64::from_str_radix(&text, 16)
                .ok()
                .filter(|s| *s < crate::namespace::slots::MAX_SLOTS)
                .ok_or_else(|| FsError::Damaged(format!("slot key {text:?}")))?;
            let client = u64_value("a slot's client", &value)?;
            ns.apply(&Update::Slot { slot, client });
        }
    }
    Ok(ns)
}

/// The purge queue: (inode, size, object size) of files whose data is to be removed.
pub async fn purge_queue(client: &Client, pool: &str) -> Result<Vec<(u64, u64, u32)>, FsError> {
    let mut out = Vec::new();
    for (key, value) in omap_all(client, pool, PURGE_OBJECT).await? {
        let text = String::from_utf8_lossy(&key).to_string();
        let ino = u64::from_str_radix(&text, 16)
            .map_err(|_| FsError::Damaged(format!("purge queue key {text:?}")))?;
        let (size, object_size): (u64, u32) = decode("a purge queue entry", &value)?;
        out.push((ino, size, object_size));
    }
    Ok(out)
}

/// Removes `ino` from the purge queue (its objects are gone).
pub async fn purged(client: &Client, pool: &str, ino: u64) -> Result<(), FsError> {
    match client
        .omap_remove(pool, PURGE_OBJECT, &[inode_key(ino)])
        .await
    {
        Ok(_) | Err(ClientError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Reads the file system's description.
pub async fn read_info(client: &Client, pool: &str) -> Result<FsInfo, FsError> {
    let bytes = match client.read(pool, INFO_OBJECT).await {
        Ok(b) => b,
        Err(ClientError::NotFound(_) | ClientError::NoPool(_)) => {
            return Err(FsError::NoFileSystem(pool.to_string()))
        }
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&bytes).map_err(|e| FsError::Damaged(format!("{INFO_OBJECT}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::mds::ROOT_INO;

    #[test]
    fn a_batch_keeps_each_keys_last_state() {
        let root = Namespace::format(5, 0, 0);
        let mut updates = root.clone();
        updates.push(Update::PutDentry {
            dir: ROOT_INO,
            name: b"a".to_vec(),
            entry: Dentry {
                ino: 9,
                kind: FileKind::File,
            },
        });
        updates.push(Update::DelDentry {
            dir: ROOT_INO,
            name: b"a".to_vec(),
        });
        updates.push(Update::DelInode(12));
        let (objects, gone) = changes_of(&updates);
        assert_eq!(objects[&dir_object(ROOT_INO)][&b"a".to_vec()], None);
        assert!(objects[&inode_object(ROOT_INO)][&inode_key(ROOT_INO)].is_some());
        assert_eq!(objects[&inode_object(12)][&inode_key(12)], None);
        assert_eq!(gone, vec![dir_object(12)]);
        assert_eq!(data_object(0x10000000000, 3), "10000000000.00000003");
        let (objects, _) = changes_of(&[Update::Slot { slot: 2, client: 9 }]);
        let stored = objects[STATE_OBJECT][&slot_key(2)].clone().unwrap();
        assert_eq!(slot_key(2), b"slot.00000002");
        assert_eq!(u64_value("a slot's client", &stored).unwrap(), 9);
        assert!(u64_value("a slot's client", &stored[1..]).is_err());
    }
}
