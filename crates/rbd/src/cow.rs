//! Copy-on-write: what a write copies before changing a data object, and where a snapshot's
//! bytes of an object are found.
//!
//! A data object carries `snapseq`, the image's `snap_seq` when a write last prepared it
//! (absent: 0). Before the first write to an object after a snapshot (its `snapseq` below
//! the image's), the object's content is copied whole into a clone named after the newest
//! snapshot (`rbd_data.NAME.INDEX@ID`): the clone serves every snapshot back to the
//! object's previous clone. An object absent when written is marked absent for those
//! snapshots the same way (a clone holding only the `absent` attribute), and in a clone
//! image its parent's bytes are copied up first. Each step is idempotent and ordered so that
//! a crash between any two leaves every snapshot's view whole: the clone is created
//! exclusively (never overwritten), then `snapseq` is raised, then the data is written.
//!
//! A snapshot `S` of an object is then the first of its clones with an id at or above `S`;
//! without one, the object itself when its `snapseq` is below `S` (not written since);
//! otherwise absent at `S` (zeros, or a clone's parent).

use cairn_client::ClientError;

use crate::error::RbdError;
use crate::image::{clone_object, data_object, Extent, Image};

/// The data object attribute naming the sequence it was last prepared at.
pub const SNAPSEQ_ATTR: &str = "snapseq";
/// The clone attribute marking an object absent at the snapshots the clone serves.
pub const ABSENT_ATTR: &str = "absent";

/// An object's attributes: None when it does not exist.
async fn attrs_of(image: &Image, object: &str) -> Result<Option<Vec<(String, Vec<u8>)>>, RbdError> {
    match image.client.get_xattrs(&image.pool, object).await {
        Ok(a) => Ok(Some(a)),
        Err(ClientError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The `snapseq` among an object's attributes (0 when absent or malformed).
fn snapseq_of(attrs: &[(String, Vec<u8>)]) -> u64 {
    attrs
        .iter()
        .find(|(k, _)| k == SNAPSEQ_ATTR)
        .and_then(|(_, v)| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map_or(0, u64::from_le_bytes)
}

/// Creates `object` only when it does not exist yet (its content or absent mark is then
/// someone's earlier, equally true copy).
async fn create_exclusive(
    image: &Image,
    object: &str,
    data: Option<&[u8]>,
) -> Result<(), RbdError> {
    let made = match data {
        Some(data) => {
            image
                .client
                .write_full_if(&image.pool, object, data, 0)
                .await
        }
        None => {
            image
                .client
                .set_xattr_if(&image.pool, object, ABSENT_ATTR, b"1", 0)
                .await
        }
    };
    match made {
        Ok(_) | Err(ClientError::VersionMismatch { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Makes data object `index` ready to be changed by the writer: copied for the newest
/// snapshot (or marked absent for it), and, in a clone, its parent's bytes copied up.
pub(crate) async fn prepare(image: &Image, index: u64) -> Result<(), RbdError> {
    let header = image.header();
    let newest = header.snaps.last().map(|s| s.id);
    let overlap = header.parent.as_ref().map_or(0, |p| p.overlap);
    let start = index * header.object_bytes();
    let copies_up = start < overlap;
    if newest.is_none() && !copies_up {
        return Ok(());
    }
    let prepared = |image: &Image| {
        image
            .prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&index)
    };
    if prepared(image) {
        return Ok(());
    }
    let stripe = usize::try_from(index % image.prepare_locks.len() as u64)
        .expect("a stripe index is below the stripe count");
    let _one_at_a_time = image.prepare_locks[stripe].lock().await;
    if prepared(image) {
        return Ok(());
    }
    let head = data_object(&image.name, index);
    let seq = header.snap_seq;
    match attrs_of(image, &head).await? {
        None => {
            if let Some(newest) = newest {
                create_exclusive(image, &clone_object(&image.name, index, newest), None).await?;
            }
            if copies_up {
                let len = (overlap - start).min(header.object_bytes());
                let parent = image
                    .parent
                    .as_ref()
                    .expect("a clone with an overlap has its parent open");
                let bytes = Box::pin(parent.read(start, len)).await?;
                // The object is created with its parent's bytes or not at all: a crash
                // before it leaves the parent showing through, as before.
                let bytes = trim_zeros(&bytes);
                if !bytes.is_empty() {
                    create_exclusive(image, &head, Some(bytes)).await?;
                }
            }
            if newest.is_some() {
                image
                    .client
                    .set_xattr(&image.pool, &head, SNAPSEQ_ATTR, &seq.to_le_bytes())
                    .await?;
            }
        }
        Some(attrs) => {
            if let Some(newest) = newest.filter(|_| snapseq_of(&attrs) < seq) {
                let data = match image.client.read_bytes(&image.pool, &head).await {
                    Ok(d) => d,
                    Err(ClientError::NotFound(_)) => bytes::Bytes::new(),
                    Err(e) => return Err(e.into()),
                };
                create_exclusive(
                    image,
                    &clone_object(&image.name, index, newest),
                    Some(&data),
                )
                .await?;
                image
                    .client
                    .set_xattr(&image.pool, &head, SNAPSEQ_ATTR, &seq.to_le_bytes())
                    .await?;
            }
        }
    }
    image
        .prepared
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(index);
    Ok(())
}

/// `bytes` without its trailing zeros (an object shorter than its range reads as zeros).
fn trim_zeros(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &bytes[..end]
}

/// Extent `e`'s bytes as snapshot `snap` saw them, or None when the object was absent then
/// (zeros, or a clone's parent). Looked up again when what was found moved meanwhile: a
/// clone handed down by a snapshot's removal, or the object itself written (its `snapseq`,
/// raised before any write, is read again after its bytes).
pub(crate) async fn read_at_snap(
    image: &Image,
    e: &Extent,
    snap: u64,
) -> Result<Option<Vec<u8>>, RbdError> {
    let head = data_object(&image.name, e.index);
    for _ in 0..8 {
        let Some(object) = object_at_snap(image, e.index, snap).await? else {
            return Ok(None);
        };
        let data = match image
            .client
            .read_range_bytes(&image.pool, &object, e.object_offset, e.len)
            .await
        {
            Ok(d) => d.to_vec(),
            Err(ClientError::NotFound(_)) => continue,
            Err(err) => return Err(err.into()),
        };
        if object == head {
            match attrs_of(image, &head).await? {
                Some(attrs) if snapseq_of(&attrs) < snap => {}
                _ => continue,
            }
        }
        return Ok(Some(data));
    }
    Err(RbdError::Busy(format!(
        "object {} of image {} kept changing while a snapshot of it was read",
        e.index, image.name
    )))
}

/// The object holding data object `index` as snapshot `snap` saw it, or None when it was
/// absent then. Looked up between two reads of the header, again if its snapshots changed
/// meanwhile (a snapshot removal hands clones down).
pub(crate) async fn object_at_snap(
    image: &Image,
    index: u64,
    snap: u64,
) -> Result<Option<String>, RbdError> {
    for _ in 0..8 {
        let before = crate::image::read_header(&image.client, &image.pool, &image.name).await?;
        let found = lookup(image, &before, index, snap).await?;
        let after = crate::image::read_header(&image.client, &image.pool, &image.name).await?;
        if before.snaps == after.snaps {
            return Ok(found);
        }
    }
    Err(RbdError::Busy(format!(
        "the snapshots of image {} kept changing while one was read",
        image.name
    )))
}

/// [`object_at_snap`] against one header.
async fn lookup(
    image: &Image,
    header: &crate::header::Header,
    index: u64,
    snap: u64,
) -> Result<Option<String>, RbdError> {
    for s in header.snaps.iter().filter(|s| s.id >= snap) {
        let clone = clone_object(&image.name, index, s.id);
        if let Some(attrs) = attrs_of(image, &clone).await? {
            let absent = attrs.iter().any(|(k, _)| k == ABSENT_ATTR);
            return Ok((!absent).then_some(clone));
        }
    }
    let head = data_object(&image.name, index);
    match attrs_of(image, &head).await? {
        Some(attrs) if snapseq_of(&attrs) < snap => Ok(Some(head)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_and_trailing_zeros_read_as_meant() {
        assert_eq!(snapseq_of(&[]), 0);
        assert_eq!(
            snapseq_of(&[(SNAPSEQ_ATTR.into(), 7u64.to_le_bytes().to_vec())]),
            7
        );
        assert_eq!(snapseq_of(&[(SNAPSEQ_ATTR.into(), vec![1, 2])]), 0);
        assert_eq!(trim_zeros(&[0, 0]), &[] as &[u8]);
        assert_eq!(trim_zeros(&[1, 0, 2, 0, 0]), &[1, 0, 2]);
        assert_eq!(clone_object("d", 10, 255), "rbd_data.d.000000000000000a@ff");
    }
}
