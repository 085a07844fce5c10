//! Clones: an image whose unwritten ranges read from a snapshot of another image (its
//! parent), copied up object by object on first write (see [`crate::cow`]). Each pool's
//! `rbd_children` object lists, in its omap, the clones of that pool's snapshots, so that a
//! snapshot with clones is not removed from under them.

use std::sync::Arc;

use futures_util::StreamExt;

use cairn_client::{Client, ClientError};

use crate::error::RbdError;
use crate::header::{Header, Parent};
use crate::image::{check_name, header_object, read_header, Image};

/// The object whose omap lists the clones of a pool's snapshots.
pub const CHILDREN: &str = "rbd_children";
/// Most registry entries one listing page asks for.
const PAGE: u32 = 256;

/// A registry key: parent, snapshot id, the clone's pool and name.
fn child_key(parent: &str, snap: u64, child_pool: &str, child: &str) -> Vec<u8> {
    format!("{parent}\0{snap:016x}\0{child_pool}/{child}").into_bytes()
}

/// The clones of image `name` of `pool`: (`POOL/CLONE`, snapshot id) each.
pub async fn children(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<Vec<(String, u64)>, RbdError> {
    let prefix = format!("{name}\0").into_bytes();
    let mut out = Vec::new();
    let mut after = Vec::new();
    loop {
        let (page, more) = match client
            .omap_list(pool, CHILDREN, &after, &prefix, PAGE)
            .await
        {
            Ok(p) => p,
            Err(ClientError::NotFound(_)) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for (k, _) in &page {
            let text = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            if let Some((snap, child)) = text.split_once('\0') {
                if let Ok(snap) = u64::from_str_radix(snap, 16) {
                    out.push((child.to_string(), snap));
                }
            }
        }
        match (more, page.last()) {
            (true, Some((k, _))) => after = k.clone(),
            _ => return Ok(out),
        }
    }
}

/// Drops clone `child_pool/child` from its parent's registry.
pub(crate) async fn unregister(
    client: &Client,
    parent: &Parent,
    child_pool: &str,
    child: &str,
) -> Result<(), RbdError> {
    let key = child_key(&parent.image, parent.snap, child_pool, child);
    match client.omap_remove(&parent.pool, CHILDREN, &[key]).await {
        Ok(_) | Err(ClientError::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Image {
    /// Creates image `child` of `child_pool` as a clone of snapshot `snap` of image `parent`
    /// of `parent_pool`: of the snapshot's size and object size, reading the snapshot's bytes
    /// until it writes its own. Registered first, so that the snapshot cannot be removed
    /// while the clone is being made.
    pub async fn clone_snapshot(
        client: Arc<Client>,
        (parent_pool, parent): (&str, &str),
        snap: &str,
        (child_pool, child): (&str, &str),
    ) -> Result<(), RbdError> {
        check_name(child)?;
        match client.stat(child_pool, &header_object(child)).await {
            Ok(_) => return Err(RbdError::Exists(child.to_string())),
            Err(ClientError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let find = |h: &Header| h.snap_named(snap).cloned();
        let parent_header = read_header(&client, parent_pool, parent).await?;
        let Some(s) = find(&parent_header) else {
            return Err(RbdError::NotFound(format!("{parent}@{snap}")));
        };
        let link = Parent {
            pool: parent_pool.to_string(),
            image: parent.to_string(),
            snap: s.id,
            overlap: s.size,
        };
        let key = child_key(parent, s.id, child_pool, child);
        client
            .omap_set(parent_pool, CHILDREN, &[(key, Vec::new())])
            .await?;
        // A removal that began before the registration saw no clone: it wins.
        let still = find(&read_header(&client, parent_pool, parent).await?);
        let made = match still {
            Some(now) if now.id == s.id => {
                let mut header =
                    Header::new(s.size, parent_header.order).map_err(RbdError::Invalid)?;
                header.parent = Some(link.clone());
                Image::create_with(&client, child_pool, child, &header).await
            }
            _ => Err(RbdError::NotFound(format!("{parent}@{snap}"))),
        };
        if made.is_err() {
            unregister(&client, &link, child_pool, child).await?;
        }
        made
    }

    /// Makes this clone independent of its parent (RBD's `flatten`): every object it still
    /// reads from the parent's snapshot is copied up, [`FLATTEN_IN_FLIGHT`] at a time, with the
    /// same copy-up a first write does (so writes may go on meanwhile), then the parent link
    /// is dropped from the header and the registry. `progress(done, total)` is called as
    /// objects finish. A clone with snapshots of its own is refused (they read the parent
    /// too); a crash midway leaves a clone whose copied objects are simply its own.
    pub async fn flatten(&self, progress: impl Fn(u64, u64)) -> Result<(), RbdError> {
        self.lock()?.check().await?;
        let header = self.header();
        let Some(parent) = header.parent.clone() else {
            return Err(RbdError::Invalid(format!("{} is not a clone", self.name)));
        };
        if !header.snaps.is_empty() {
            return Err(RbdError::Busy(format!(
                "{} has snapshots of its own, which read its parent: remove them first",
                self.name
            )));
        }
        let total = parent.overlap.div_ceil(header.object_bytes());
        // Shared, as writes hold it: no snapshot is taken while objects are copied up.
        let copying = self.io_gate.read().await;
        let mut copies = futures_util::stream::iter(0..total)
            .map(|index| crate::cow::prepare(self, index))
            .buffer_unordered(FLATTEN_IN_FLIGHT);
        let mut done = 0;
        while let Some(copied) = copies.next().await {
            copied?;
            done += 1;
            progress(done, total);
        }
        drop(copies);
        drop(copying);
        let _gate = self.io_gate.write().await;
        let mut detached = self.header();
        if !detached.snaps.is_empty() {
            return Err(RbdError::Busy(format!(
                "a snapshot of {} was taken while it was flattened: remove it and flatten again",
                self.name
            )));
        }
        detached.parent = None;
        self.store_header(detached).await?;
        unregister(&self.client, &parent, &self.pool, &self.name).await
    }
}

/// Objects a flatten copies up at once.
pub const FLATTEN_IN_FLIGHT: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_keys_group_by_parent() {
        let a = child_key("gold", 3, "vms", "web1");
        assert!(a.starts_with(b"gold\0"));
        assert!(!a.starts_with(b"gol\0"));
        assert!(child_key("gold", 3, "vms", "a") < child_key("gold", 4, "vms", "a"));
    }
}
