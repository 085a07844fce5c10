//! Clones: an image whose unwritten ranges read from a snapshot of another image (its
//! parent), copied up object by object on first write (see [`crate::cow`]). Each pool's
//! `rbd_children` object lists, in its omap, the clones of that pool's snapshots, so that a
//! snapshot with clones is not removed from under them.

use std::sync::Arc;

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
}

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
