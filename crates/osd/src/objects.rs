//! Object transfer between a store and [`ObjectImage`]s: what recovery reads on the source OSD
//! and installs on the target, whole or in pieces of about `recovery_chunk_bytes` (data first,
//! then the omap in key order; xattrs with the first piece), so that no message nears the
//! frame limit however large an object's omap. A transfer in several pieces builds a temporary
//! object (named under [`TEMP_PREFIX`], which no client name can take and no listing shows)
//! that replaces the object atomically with the last piece. Reading verifies every block's
//! checksum (the store refuses bad bytes, so a damaged copy is never pushed to another OSD).

use cairn_pg::Eversion;
use cairn_proto::image::ObjectImage;
use cairn_store::{Op, Store, StoreError, Transaction};

use crate::error::OsdError;
use crate::pgmeta::unpack;
use crate::txns::VERSION_ATTR;

/// Names of the temporary objects of transfers in pieces: `TEMP_PREFIX` + the object's name.
/// Client names cannot contain NUL, so none can collide; listings leave them out.
pub const TEMP_PREFIX: &str = "\u{0}recovering\u{0}";

/// Most omap entries read per store call while filling a piece (each at most a 1 KiB key and
/// a 1 MiB value: a piece exceeds its budget by at most this many entries).
const OMAP_ENTRIES_PER_READ: usize = 16;

/// The temporary object a transfer of `obj` in pieces builds.
pub fn temp_name(obj: &str) -> String {
    format!("{TEMP_PREFIX}{obj}")
}

/// Where the next piece of an object's image starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Data offset.
    pub data_offset: u64,
    /// Omap key the next entries follow (None: from the first).
    pub omap_after: Option<Vec<u8>>,
}

impl Cursor {
    /// Whether this is the first piece.
    pub fn is_start(&self) -> bool {
        self.data_offset == 0 && self.omap_after.is_none()
    }

    /// The cursor after `piece` (which started at `self`).
    pub fn after(&self, piece: &ObjectImage) -> Cursor {
        Cursor {
            data_offset: self.data_offset + piece.data.len() as u64,
            omap_after: piece
                .omap
                .last()
                .map(|(k, _)| k.clone())
                .or_else(|| self.omap_after.clone()),
        }
    }
}

/// One piece of an object's image read from a store.
#[derive(Debug)]
pub struct Piece {
    /// Data from the cursor's offset, omap entries after its key, xattrs if it is the first.
    pub image: ObjectImage,
    /// The object's version.
    pub version: Eversion,
    /// Pieces follow.
    pub more: bool,
}

/// The data bytes the piece of `obj` starting at `data_offset` will carry: the rest of the
/// object, at most `budget`; 0 where the object does not exist. Known before the read from the
/// store's onode cache or its metadata, so that the scheduler charges a piece its real
/// length: charged as a minimal op, a piece of several MiB takes the device for longer than
/// its cost says, and the client ops queued behind it wait.
pub async fn piece_data_bytes(
    store: &Store,
    coll: &str,
    obj: &str,
    data_offset: u64,
    budget: u64,
) -> u64 {
    let size = match store.size_hint(coll, obj) {
        Some(size) => Some(size),
        None => store.stat(coll, obj).await.ok().map(|st| st.size_bytes),
    };
    size.map_or(0, |size| size.saturating_sub(data_offset).min(budget))
}

/// The piece of `obj`'s image at `at`, of about `budget` bytes (data up to `budget`, then omap
/// entries until `budget` is reached), or None if the object does not exist.
pub async fn read_piece(
    store: &Store,
    coll: &str,
    obj: &str,
    at: &Cursor,
    budget: u64,
) -> Result<Option<Piece>, OsdError> {
    let size = match store.stat(coll, obj).await {
        Ok(st) => st.size_bytes,
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection { .. }) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let xattrs = store.getattrs(coll, obj).await?;
    let version = version_of(&xattrs);
    let mut image = ObjectImage::default();
    if at.is_start() {
        image.xattrs = xattrs;
    }
    let budget = budget.max(1);
    let mut left = budget;
    if at.data_offset < size {
        let len = (size - at.data_offset).min(budget);
        image.data = store.read(coll, obj, at.data_offset, len).await?;
        left -= len;
        if at.data_offset + len < size {
            return Ok(Some(Piece {
                image,
                version,
                more: true,
            }));
        }
    }
    let mut after = at.omap_after.clone().unwrap_or_default();
    let mut more = false;
    while left > 0 {
        let page = store
            .omap_page(coll, obj, &after, b"", OMAP_ENTRIES_PER_READ)
            .await?;
        for (k, v) in page.entries {
            // As encoded: two u32 lengths, the key, the value.
            left = left.saturating_sub((8 + k.len() + v.len()) as u64);
            after.clone_from(&k);
            image.omap.push((k, v));
        }
        more = page.more;
        if !more {
            break;
        }
    }
    Ok(Some(Piece {
        image,
        version,
        more,
    }))
}

/// The version `obj` records (its last log entry's, packed), 0 when it has none.
pub(crate) async fn recorded_version(store: &Store, coll: &str, obj: &str) -> u64 {
    decode_version(store.getattr(coll, obj, VERSION_ATTR).await.ok().as_deref())
}

/// A version attribute's value as the version it packs (0 when absent or malformed).
pub(crate) fn decode_version(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| v.try_into().ok().map(u64::from_le_bytes))
        .unwrap_or(0)
}

/// The version an object's xattrs record (its last write's log entry; default when none).
pub(crate) fn version_of(xattrs: &[(String, Vec<u8>)]) -> Eversion {
    xattrs
        .iter()
        .find(|(k, _)| k == VERSION_ATTR)
        .and_then(|(_, v)| v.as_slice().try_into().ok().map(u64::from_le_bytes))
        .map(unpack)
        .unwrap_or_default()
}

/// Where a piece goes in its object's transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PiecePlace {
    /// Offset of its data.
    pub data_offset: u64,
    /// The object's first piece.
    pub first: bool,
    /// Its last piece.
    pub last: bool,
}

/// Adds to `txn` what installs one piece of `obj`'s image: a whole image (first and last)
/// replaces the object at once; otherwise the pieces build [`temp_name`] (`temp_exists`: a
/// leftover of an interrupted transfer is there, replaced by the first piece) and the last
/// renames it over the object.
pub fn install_piece(
    txn: &mut Transaction,
    coll: &str,
    obj: &str,
    piece: &ObjectImage,
    at: PiecePlace,
    exists: bool,
    temp_exists: bool,
) {
    if at.first && at.last {
        return install(txn, coll, obj, Some(piece), exists);
    }
    let temp = temp_name(obj);
    if at.first {
        if temp_exists {
            txn.remove(coll, &temp);
        }
        txn.push(Op::Touch {
            coll: coll.into(),
            obj: temp.clone(),
        });
    }
    if !piece.data.is_empty() {
        txn.write_bytes(coll, &temp, at.data_offset, piece.data.clone());
    }
    for (k, v) in &piece.xattrs {
        txn.setattr(coll, &temp, k, v);
    }
    if !piece.omap.is_empty() {
        txn.push(Op::OmapSet {
            coll: coll.into(),
            obj: temp.clone(),
            entries: piece.omap.clone(),
        });
    }
    if at.last {
        txn.rename(coll, &temp, obj);
    }
}

/// Adds to `txn` what installs `piece` of `obj` (None: removes the object) in `coll` of
/// `store`, a collection that exists when `created`: looks up whether the object and a
/// leftover temporary object are there, then [`install_piece`] (or [`install`]).
pub async fn stage_piece(
    store: &Store,
    txn: &mut Transaction,
    coll: &str,
    obj: &str,
    piece: Option<(&ObjectImage, PiecePlace)>,
    created: bool,
) -> Result<(), OsdError> {
    let exists = created && store.exists(coll, obj).await?;
    match piece {
        Some((image, place)) => {
            let temp_exists = created
                && place.first
                && !place.last
                && store.exists(coll, &temp_name(obj)).await?;
            install_piece(txn, coll, obj, image, place, exists, temp_exists);
        }
        None => install(txn, coll, obj, None, exists),
    }
    Ok(())
}

/// Adds to `txn` the removal of every temporary object of `coll` (transfers interrupted before
/// their last piece; called when a PG's recovery is over).
pub async fn remove_temps(
    store: &Store,
    coll: &str,
    txn: &mut Transaction,
) -> Result<(), OsdError> {
    let mut after = TEMP_PREFIX.to_string();
    loop {
        let names = match store.list_objects(coll, Some(&after), 1000).await {
            Ok(n) => n,
            Err(StoreError::NoSuchCollection(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let listed = names.len();
        let temps: Vec<String> = names
            .into_iter()
            .take_while(|n| n.starts_with(TEMP_PREFIX))
            .collect();
        let finished = temps.len() < listed || listed < 1000;
        for t in &temps {
            txn.remove(coll, t);
        }
        match temps.last() {
            Some(last) if !finished => after.clone_from(last),
            _ => return Ok(()),
        }
    }
}

/// Adds to `txn` what makes `obj` equal to `image` (None: absent). `exists` says whether the
/// object exists now.
pub fn install(
    txn: &mut Transaction,
    coll: &str,
    obj: &str,
    image: Option<&ObjectImage>,
    exists: bool,
) {
    if exists {
        txn.remove(coll, obj);
    }
    let Some(img) = image else { return };
    txn.push(Op::Touch {
        coll: coll.into(),
        obj: obj.into(),
    });
    if !img.data.is_empty() {
        txn.write(coll, obj, 0, &img.data);
    }
    for (k, v) in &img.xattrs {
        txn.setattr(coll, obj, k, v);
    }
    if !img.omap.is_empty() {
        txn.push(Op::OmapSet {
            coll: coll.into(),
            obj: obj.into(),
            entries: img.omap.clone(),
        });
    }
}

/// Every user object name of a collection, in order (the PG's meta object and temporary
/// objects excluded).
pub async fn list_all(store: &Store, coll: &str) -> Result<Vec<String>, OsdError> {
    let page_max = u32::try_from(cairn_store::MAX_LIST_ENTRIES - 1)
        .expect("the store's listing limit fits in 32 bits");
    let mut out: Vec<String> = Vec::new();
    loop {
        let after = out.last().cloned().unwrap_or_default();
        let (page, more) = list_page(store, coll, &after, page_max).await?;
        let done = !more || page.is_empty();
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

/// Internal objects (names starting with NUL: each PG's meta object, transfers' temporary
/// objects) in every collection of `store`: what an OSD's usage leaves out of its object count.
pub async fn count_internal(store: &Store) -> Result<u64, StoreError> {
    const PAGE: usize = 64;
    let mut internal = 0u64;
    for coll in store.list_collections().await? {
        let mut after: Option<String> = None;
        loop {
            let names = match store.list_objects(&coll, after.as_deref(), PAGE).await {
                Ok(n) => n,
                Err(StoreError::NoSuchCollection(_)) => break,
                Err(e) => return Err(e),
            };
            let hidden = names.iter().take_while(|n| n.starts_with('\0')).count();
            internal += hidden as u64;
            if hidden < PAGE {
                break;
            }
            after = names.last().cloned();
        }
    }
    Ok(internal)
}

/// Listings start after this name: every internal object (the PG's meta object, transfers'
/// temporary objects: names starting with NUL) sorts before it, every client name (no NUL)
/// after it.
const INTERNAL_NAMES_END: &str = "\u{0}\u{10FFFF}";

/// One page of a collection's user object names, in order, strictly after `after` (empty: from
/// the start), at most `max`; the flag says whether more may follow. A missing collection is an
/// empty page.
pub async fn list_page(
    store: &Store,
    coll: &str,
    after: &str,
    max: u32,
) -> Result<(Vec<String>, bool), StoreError> {
    let max = (max as usize).clamp(1, cairn_store::MAX_LIST_ENTRIES - 1);
    let start = if after.is_empty() {
        INTERNAL_NAMES_END
    } else {
        after
    };
    let mut names = match store.list_objects(coll, Some(start), max + 1).await {
        Ok(n) => n,
        Err(StoreError::NoSuchCollection(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    debug_assert!(names.iter().all(|n| !n.starts_with('\0')));
    let more = names.len() > max;
    names.truncate(max);
    Ok((names, more))
}

/// A collection's client objects (internal ones left out) and the sum of their logical sizes:
/// what `cairn df` adds up per pool and what the OSD reports to the monitor for its PGs. The
/// store keeps each collection's usage, so this costs only a listing of the internal objects
/// (which sort first). A missing collection holds nothing.
pub async fn collection_usage(store: &Store, coll: &str) -> Result<(u64, u64), StoreError> {
    const PAGE: usize = 64;
    let all = match store.collection_usage(coll).await {
        Ok(u) => u,
        Err(StoreError::NoSuchCollection(_)) => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    // The internal objects (a meta object, a few transfers' temporary ones) sort first.
    let (mut internal, mut internal_bytes) = (0u64, 0u64);
    let mut after: Option<String> = None;
    loop {
        let page = match store.list_objects_sized(coll, after.as_deref(), PAGE).await {
            Ok(p) => p,
            Err(StoreError::NoSuchCollection(_)) => return Ok((0, 0)),
            Err(e) => return Err(e),
        };
        let hidden: Vec<_> = page
            .iter()
            .take_while(|(n, _)| n.starts_with('\0'))
            .collect();
        internal += hidden.len() as u64;
        internal_bytes += hidden.iter().map(|(_, size)| size).sum::<u64>();
        match hidden.last() {
            Some((last, _)) if hidden.len() == PAGE => after = Some(last.clone()),
            _ => break,
        }
    }
    Ok((
        all.objects.saturating_sub(internal),
        all.bytes.saturating_sub(internal_bytes),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_blockdev::{CrashSwitch, MemDevice};
    use cairn_store::{CrashableKv, KvLocation, StoreConfig};
    use std::sync::Arc;

    async fn store() -> Store {
        let dev = Arc::new(MemDevice::new(64 << 20, 512).unwrap());
        let kv = CrashableKv::new(Vec::new(), CrashSwitch::new());
        let cfg = StoreConfig::default();
        Store::mkfs(dev.clone(), KvLocation::Backend(Box::new(kv.clone())), &cfg)
            .await
            .unwrap();
        let s = Store::mount(dev, KvLocation::Backend(Box::new(kv)), cfg)
            .await
            .unwrap();
        let mut t = Transaction::new();
        t.create_collection("c");
        s.queue_transaction(&t).await.unwrap();
        s
    }

    fn bytes(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            // The low byte of the index: a pattern that repeats every 256 bytes.
            .map(|i| i.to_le_bytes()[0].wrapping_mul(7).wrapping_add(seed))
            .collect()
    }

    /// Usage counts client objects over several listing pages and their sizes, never the
    /// internal ones; a missing collection is empty.
    #[tokio::test]
    async fn usage_sums_the_client_objects_of_a_collection() {
        let s = store().await;
        let mut t = Transaction::new();
        for i in 0..2500u64 {
            t.write(
                "c",
                &format!("obj{i:05}"),
                0,
                &bytes(i.to_le_bytes()[0], usize::try_from(i % 7 * 100).unwrap()),
            );
        }
        t.write("c", "\u{0}pgmeta", 0, &bytes(0, 5000));
        t.write("c", &temp_name("obj00001"), 0, &bytes(0, 9000));
        s.queue_transaction(&t).await.unwrap();
        let bytes_sum: u64 = (0..2500u64).map(|i| (i % 7) * 100).sum();
        assert_eq!(collection_usage(&s, "c").await.unwrap(), (2500, bytes_sum));
        assert_eq!(collection_usage(&s, "none").await.unwrap(), (0, 0));
    }

    /// An object of 300 KiB with two xattrs and 2000 omap entries.
    async fn source() -> Store {
        let s = store().await;
        let mut t = Transaction::new();
        t.write("c", "o", 0, &bytes(1, 300 << 10))
            .setattr("c", "o", VERSION_ATTR, &7u64.to_le_bytes())
            .setattr("c", "o", "user", b"attr");
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..2000)
            .map(|i: u32| {
                (
                    format!("k{i:05}").into_bytes(),
                    bytes(i.to_le_bytes()[0], 100),
                )
            })
            .collect();
        t.push(Op::OmapSet {
            coll: "c".into(),
            obj: "o".into(),
            entries,
        });
        s.queue_transaction(&t).await.unwrap();
        s
    }

    /// Installs pieces of `obj` from `src` into `dst`, at most `pieces` of them; the number
    /// installed and whether the transfer finished.
    async fn transfer(src: &Store, dst: &Store, budget: u64, pieces: usize) -> (usize, bool) {
        let mut at = Cursor::default();
        for n in 1..=pieces {
            let p = read_piece(src, "c", "o", &at, budget)
                .await
                .unwrap()
                .unwrap();
            let place = PiecePlace {
                data_offset: at.data_offset,
                first: at.is_start(),
                last: !p.more,
            };
            let exists = dst.exists("c", "o").await.unwrap();
            let temp_exists = dst.exists("c", &temp_name("o")).await.unwrap();
            let mut t = Transaction::new();
            install_piece(&mut t, "c", "o", &p.image, place, exists, temp_exists);
            dst.queue_transaction_owned(t).await.unwrap();
            if !p.more {
                return (n, true);
            }
            at = at.after(&p.image);
        }
        (pieces, false)
    }

    async fn same_object(a: &Store, b: &Store) {
        assert_eq!(
            crc_fast::crc32_iscsi(&a.read("c", "o", 0, u64::MAX).await.unwrap()),
            crc_fast::crc32_iscsi(&b.read("c", "o", 0, u64::MAX).await.unwrap())
        );
        assert_eq!(
            a.getattrs("c", "o").await.unwrap(),
            b.getattrs("c", "o").await.unwrap()
        );
        assert_eq!(
            a.omap_get("c", "o").await.unwrap(),
            b.omap_get("c", "o").await.unwrap()
        );
    }

    #[tokio::test]
    async fn an_object_moves_in_pieces_and_replaces_the_old_copy_only_with_the_last() {
        let src = source().await;
        let dst = store().await;
        let mut t = Transaction::new();
        t.write("c", "o", 0, b"old copy")
            .omap_set("c", "o", b"stale", b"1");
        dst.queue_transaction(&t).await.unwrap();
        // Interrupted after three pieces: the old copy is intact and the temporary object
        // invisible to listings.
        assert_eq!(transfer(&src, &dst, 64 << 10, 3).await, (3, false));
        assert_eq!(&dst.read("c", "o", 0, 100).await.unwrap()[..], b"old copy");
        assert!(dst.exists("c", &temp_name("o")).await.unwrap());
        assert_eq!(list_all(&dst, "c").await.unwrap(), vec!["o".to_string()]);
        // A new transfer starts over (replacing the leftover) and completes.
        let (pieces, done) = transfer(&src, &dst, 64 << 10, 1000).await;
        assert!(done && pieces > 6, "{pieces} pieces");
        same_object(&src, &dst).await;
        assert!(!dst.exists("c", &temp_name("o")).await.unwrap());
        // Pieces stay near their budget: data pieces at it, omap pieces at most 16 entries over.
        let mut at = Cursor::default();
        while let Some(p) = read_piece(&src, "c", "o", &at, 64 << 10).await.unwrap() {
            assert!(p.image.encode().len() < (64 << 10) + 16 * 114 + 64);
            if !p.more {
                break;
            }
            at = at.after(&p.image);
        }
    }

    #[tokio::test]
    async fn a_whole_image_in_one_piece_replaces_the_object_at_once() {
        let src = source().await;
        let dst = store().await;
        assert_eq!(transfer(&src, &dst, 32 << 20, 1).await, (1, true));
        same_object(&src, &dst).await;
        assert!(
            read_piece(&src, "c", "missing", &Cursor::default(), 1 << 20)
                .await
                .unwrap()
                .is_none()
        );
        let mut t = Transaction::new();
        t.push(Op::Touch {
            coll: "c".into(),
            obj: "empty".into(),
        });
        src.queue_transaction(&t).await.unwrap();
        let p = read_piece(&src, "c", "empty", &Cursor::default(), 1 << 20)
            .await
            .unwrap()
            .unwrap();
        assert!(!p.more && p.image.data.is_empty() && p.image.omap.is_empty());
    }

    #[tokio::test]
    async fn leftover_temporary_objects_are_removed_and_never_listed() {
        let src = source().await;
        let dst = store().await;
        let mut t = Transaction::new();
        t.write("c", "a", 0, b"client object");
        dst.queue_transaction(&t).await.unwrap();
        assert_eq!(transfer(&src, &dst, 64 << 10, 2).await, (2, false));
        let (names, more) = list_page(&dst, "c", "", 10).await.unwrap();
        assert_eq!((names, more), (vec!["a".to_string()], false));
        let mut t = Transaction::new();
        remove_temps(&dst, "c", &mut t).await.unwrap();
        assert_eq!(t.ops.len(), 1);
        dst.queue_transaction_owned(t).await.unwrap();
        assert!(!dst.exists("c", &temp_name("o")).await.unwrap());
        assert!(dst.exists("c", "a").await.unwrap());
        let mut t = Transaction::new();
        remove_temps(&dst, "c", &mut t).await.unwrap();
        assert!(t.ops.is_empty());
    }
}
