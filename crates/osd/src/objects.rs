//! Whole-object transfer between a store and an [`ObjectImage`]: what recovery reads on the
//! source OSD and installs on the target. Reading verifies every block's checksum (the store
//! refuses bad bytes, so a damaged copy is never pushed to another OSD).

use cairn_pg::Eversion;
use cairn_proto::image::ObjectImage;
use cairn_store::{Op, Store, StoreError, Transaction};

use crate::error::OsdError;
use crate::pgmeta::{unpack, META_OBJECT};
use crate::txns::VERSION_ATTR;

/// The object's full image and version, or None if it does not exist.
pub async fn read_image(
    store: &Store,
    coll: &str,
    obj: &str,
) -> Result<Option<(ObjectImage, Eversion)>, OsdError> {
    let data = match store.read(coll, obj, 0, u64::MAX).await {
        Ok(d) => d,
        Err(StoreError::NoSuchObject { .. } | StoreError::NoSuchCollection { .. }) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let xattrs = store.getattrs(coll, obj).await?;
    let omap = store.omap_get(coll, obj).await?;
    let version = xattrs
        .iter()
        .find(|(k, _)| k == VERSION_ATTR)
        .and_then(|(_, v)| v.as_slice().try_into().ok().map(u64::from_le_bytes))
        .map(unpack)
        .unwrap_or_default();
    Ok(Some((ObjectImage { data, xattrs, omap }, version)))
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

/// Every user object name of a collection, in order (the PG's meta object excluded).
pub async fn list_all(store: &Store, coll: &str) -> Result<Vec<String>, OsdError> {
    let page_max = (cairn_store::MAX_LIST_ENTRIES - 2) as u32;
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

/// One page of a collection's user object names, in order, strictly after `after` (empty: from
/// the start), at most `max`; the flag says whether more may follow. A missing collection is an
/// empty page.
pub async fn list_page(
    store: &Store,
    coll: &str,
    after: &str,
    max: u32,
) -> Result<(Vec<String>, bool), StoreError> {
    let max = (max as usize).clamp(1, cairn_store::MAX_LIST_ENTRIES - 2);
    let start = (!after.is_empty()).then_some(after);
    let mut names = match store.list_objects(coll, start, max + 2).await {
        Ok(n) => n,
        Err(StoreError::NoSuchCollection(_)) => Vec::new(),
        Err(e) => return Err(e),
    };
    names.retain(|n| n != META_OBJECT);
    let more = names.len() > max;
    names.truncate(max);
    Ok((names, more))
}
