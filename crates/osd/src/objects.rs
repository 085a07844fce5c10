//! Whole-object transfer between a store and an [`ObjectImage`]: what recovery reads on the
//! source OSD and installs on the target. Reading verifies every block's checksum (the store
//! refuses bad bytes, so a damaged copy is never pushed to another OSD).

use bytes::Bytes;
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
    Ok(Some((
        ObjectImage {
            data: Bytes::from(data),
            xattrs,
            omap,
        },
        version,
    )))
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
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = match store
            .list_objects(coll, after.as_deref(), cairn_store::MAX_LIST_ENTRIES)
            .await
        {
            Ok(p) => p,
            Err(StoreError::NoSuchCollection { .. }) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        let Some(last) = page.last().cloned() else {
            return Ok(out);
        };
        out.extend(page.into_iter().filter(|n| n != META_OBJECT));
        after = Some(last);
    }
}
