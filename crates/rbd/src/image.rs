//! An image: creating, listing, opening, resizing and removing it, and reading, writing and
//! discarding its bytes, each spread over the data objects the range touches (in parallel).
//! A handle is one of three kinds: the writer (holding the exclusive lock), a reader of the
//! image's current state, or a reader of one snapshot. Snapshots and clones are in
//! [`crate::snapshot`] and [`crate::clone`]; what a write copies first, in [`crate::cow`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cairn_client::{Client, ClientError};
use futures_util::future::try_join_all;

use crate::error::RbdError;
use crate::header::{Header, DEFAULT_ORDER};
use crate::lock::{ExclusiveLock, DEFAULT_LEASE};

/// The object whose omap lists a pool's images (name -> nothing), as RBD's.
pub const DIRECTORY: &str = "rbd_directory";
/// Longest image name.
pub const MAX_NAME_BYTES: usize = 96;
/// Most names one directory page asks for.
const LIST_PAGE: u32 = 256;

/// The header object of image `name`.
pub fn header_object(name: &str) -> String {
    format!("rbd_header.{name}")
}

/// The data object holding bytes `index * object_size ..` of image `name`.
pub fn data_object(name: &str, index: u64) -> String {
    format!("rbd_data.{name}.{index:016x}")
}

/// The clone of data object `index` of image `name` kept for snapshot `snap` and the older
/// ones back to the previous clone: what the object held before its first write after `snap`.
pub fn clone_object(name: &str, index: u64, snap: u64) -> String {
    format!("rbd_data.{name}.{index:016x}@{snap:x}")
}

/// Checks an image name: 1 to 96 bytes of ASCII letters, digits, `_`, `-` and `.`, not
/// starting with `.`.
pub fn check_name(name: &str) -> Result<(), RbdError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    match ok {
        true => Ok(()),
        false => Err(RbdError::Invalid(format!(
            "image name {name:?}: 1 to {MAX_NAME_BYTES} letters, digits, '_', '-' or '.', not starting with '.'"
        ))),
    }
}

impl Extent {
    /// Where the piece starts in the caller's buffer. Ranges are checked against the request's
    /// buffer (a `Vec`) before they are split, so the offset fits a `usize`.
    fn buffer_at(&self) -> usize {
        usize::try_from(self.buffer_offset).expect("a piece within the caller's buffer")
    }

    /// The piece's length as a buffer length (within one object, so it fits a `usize`).
    fn buffer_len(&self) -> usize {
        usize::try_from(self.len).expect("a piece within one object")
    }
}

/// One piece of an image range: within data object `index`, `len` bytes at `object_offset`,
/// which are bytes `buffer_offset..` of the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Data object index.
    pub index: u64,
    /// Offset within the object.
    pub object_offset: u64,
    /// Bytes.
    pub len: u64,
    /// Offset within the caller's buffer.
    pub buffer_offset: u64,
}

/// The pieces of `len` bytes at `offset` for objects of `object_bytes`.
pub fn extents(offset: u64, len: u64, object_bytes: u64) -> Vec<Extent> {
    assert!(object_bytes.is_power_of_two(), "object size {object_bytes}");
    let mut out = Vec::new();
    let mut done = 0;
    while done < len {
        let at = offset + done;
        let object_offset = at % object_bytes;
        let piece = (object_bytes - object_offset).min(len - done);
        out.push(Extent {
            index: at / object_bytes,
            object_offset,
            len: piece,
            buffer_offset: done,
        });
        done += piece;
    }
    out
}

/// What a handle may do.
pub(crate) enum Access {
    /// The writer: holds the image's exclusive lock.
    Exclusive(Arc<ExclusiveLock>),
    /// Reads the image's current state; writes nothing.
    ReadOnly,
    /// Reads one snapshot (its id and size); writes nothing.
    Snapshot {
        /// Snapshot id.
        id: u64,
        /// The image's size when it was taken.
        size: u64,
    },
}

/// An open image.
pub struct Image {
    pub(crate) client: Arc<Client>,
    pub(crate) pool: String,
    pub(crate) name: String,
    /// The header as this handle knows it (the writer's is the truth while it holds the lock).
    pub(crate) header: RwLock<Header>,
    pub(crate) access: Access,
    /// A clone's parent snapshot, opened to read.
    pub(crate) parent: Option<Box<Image>>,
    /// Writes hold it shared; taking a snapshot, rolling back and removing a snapshot hold it
    /// alone, so that no write is half-copied across the change.
    pub(crate) io_gate: tokio::sync::RwLock<()>,
    /// Data objects already copied for the snapshots that exist (cleared by a new snapshot).
    pub(crate) prepared: Mutex<HashSet<u64>>,
    /// One of these per object index (modulo their count) serializes the copying of one
    /// object by concurrent writes.
    pub(crate) prepare_locks: Vec<tokio::sync::Mutex<()>>,
}

/// Stripes of [`Image::prepare_locks`].
const PREPARE_STRIPES: usize = 64;

/// Reads and decodes the header of image `name`.
pub(crate) async fn read_header(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<Header, RbdError> {
    let bytes = match client.read(pool, &header_object(name)).await {
        Ok(b) => b,
        Err(ClientError::NotFound(_)) => return Err(RbdError::NotFound(name.to_string())),
        Err(e) => return Err(e.into()),
    };
    Header::decode(&bytes).map_err(|why| RbdError::Corrupt {
        name: name.to_string(),
        why,
    })
}

impl Image {
    /// Creates image `name` of `size` bytes with objects of 2^`order` bytes (None: 4 MiB).
    pub async fn create(
        client: &Client,
        pool: &str,
        name: &str,
        size: u64,
        order: Option<u8>,
    ) -> Result<(), RbdError> {
        let header =
            Header::new(size, order.unwrap_or(DEFAULT_ORDER)).map_err(RbdError::Invalid)?;
        Self::create_with(client, pool, name, &header).await
    }

    /// Creates image `name` with `header` (a plain image's, or a clone's): the header object
    /// by exclusive create, then the directory entry.
    pub(crate) async fn create_with(
        client: &Client,
        pool: &str,
        name: &str,
        header: &Header,
    ) -> Result<(), RbdError> {
        check_name(name)?;
        match client
            .write_full_if(pool, &header_object(name), &header.encode(), 0)
            .await
        {
            Ok(_) => {}
            Err(ClientError::VersionMismatch { .. }) => {
                return Err(RbdError::Exists(name.to_string()))
            }
            Err(e) => return Err(e.into()),
        }
        client
            .omap_set(pool, DIRECTORY, &[(name.as_bytes().to_vec(), Vec::new())])
            .await?;
        Ok(())
    }

    /// The images of `pool`, in name order.
    pub async fn list(client: &Client, pool: &str) -> Result<Vec<String>, RbdError> {
        let mut names = Vec::new();
        let mut after = Vec::new();
        loop {
            let (page, more) = match client
                .omap_list(pool, DIRECTORY, &after, b"", LIST_PAGE)
                .await
            {
                Ok(p) => p,
                Err(ClientError::NotFound(_)) => return Ok(names),
                Err(e) => return Err(e.into()),
            };
            for (k, _) in &page {
                names.push(String::from_utf8_lossy(k).into_owned());
            }
            match (more, page.last()) {
                (true, Some((k, _))) => after = k.clone(),
                _ => return Ok(names),
            }
        }
    }

    /// Opens image `name` of `pool` to write: takes its exclusive lock (see
    /// [`crate::lock`]), with the default lease.
    pub async fn open(client: Arc<Client>, pool: &str, name: &str) -> Result<Image, RbdError> {
        Self::open_exclusive(client, pool, name, DEFAULT_LEASE).await
    }

    /// [`Image::open`] with a lease of one's own.
    pub async fn open_exclusive(
        client: Arc<Client>,
        pool: &str,
        name: &str,
        lease: Duration,
    ) -> Result<Image, RbdError> {
        check_name(name)?;
        let lock = ExclusiveLock::acquire(client.clone(), pool, name, lease).await?;
        // Read after the lock is held: no writer changes it from here on.
        match read_header(&client, pool, name).await {
            Ok(header) => Self::with(client, pool, name, header, Access::Exclusive(lock)).await,
            Err(e) => {
                let _ = lock.release().await;
                Err(e)
            }
        }
    }

    /// Checks that image `name` exists in `pool` (its header reads back whole), without
    /// opening it.
    pub async fn check_exists(client: &Client, pool: &str, name: &str) -> Result<(), RbdError> {
        check_name(name)?;
        read_header(client, pool, name).await.map(|_| ())
    }

    /// Opens image `name` to read its current state (no lock: a writer elsewhere may change
    /// it meanwhile).
    pub async fn open_read_only(
        client: Arc<Client>,
        pool: &str,
        name: &str,
    ) -> Result<Image, RbdError> {
        check_name(name)?;
        let header = read_header(&client, pool, name).await?;
        Self::with(client, pool, name, header, Access::ReadOnly).await
    }

    /// Opens snapshot `snap` of image `name` to read.
    pub async fn open_snapshot(
        client: Arc<Client>,
        pool: &str,
        name: &str,
        snap: &str,
    ) -> Result<Image, RbdError> {
        check_name(name)?;
        let header = read_header(&client, pool, name).await?;
        let found = header.snap_named(snap).cloned();
        Self::at_snapshot(client, pool, name, header, found, || {
            format!("{name}@{snap}")
        })
        .await
    }

    /// Snapshot `id` of image `name` to read (a clone's parent).
    pub(crate) async fn open_snapshot_id(
        client: Arc<Client>,
        pool: &str,
        name: &str,
        id: u64,
    ) -> Result<Image, RbdError> {
        let header = read_header(&client, pool, name).await?;
        let found = header.snaps.iter().find(|s| s.id == id).cloned();
        Self::at_snapshot(client, pool, name, header, found, || {
            format!("{name}@{id} (snapshot id)")
        })
        .await
    }

    /// A reader of `found`, a snapshot of `header`; `missing` names it when there is none.
    async fn at_snapshot(
        client: Arc<Client>,
        pool: &str,
        name: &str,
        header: Header,
        found: Option<crate::header::Snapshot>,
        missing: impl FnOnce() -> String,
    ) -> Result<Image, RbdError> {
        let Some(s) = found else {
            return Err(RbdError::NotFound(missing()));
        };
        let access = Access::Snapshot {
            id: s.id,
            size: s.size,
        };
        Self::with(client, pool, name, header, access).await
    }

    /// A handle over `header`, with its parent opened when it is a clone.
    async fn with(
        client: Arc<Client>,
        pool: &str,
        name: &str,
        header: Header,
        access: Access,
    ) -> Result<Image, RbdError> {
        let parent = match &header.parent {
            Some(p) => {
                let opened = Box::pin(Self::open_snapshot_id(
                    client.clone(),
                    &p.pool,
                    &p.image,
                    p.snap,
                ))
                .await;
                match opened {
                    Ok(image) => Some(Box::new(image)),
                    Err(e) => {
                        if let Access::Exclusive(lock) = &access {
                            let _ = lock.release().await;
                        }
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        Ok(Image {
            client,
            pool: pool.to_string(),
            name: name.to_string(),
            header: RwLock::new(header),
            access,
            parent,
            io_gate: tokio::sync::RwLock::new(()),
            prepared: Mutex::new(HashSet::new()),
            prepare_locks: (0..PREPARE_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        })
    }

    /// Removes image `name`: its data objects, its header, its directory entry (and its
    /// entry among its parent's clones). Refused while it has snapshots or clones, or while
    /// another client holds its lock.
    pub async fn remove(client: Arc<Client>, pool: &str, name: &str) -> Result<(), RbdError> {
        let image = Image::open(client.clone(), pool, name).await?;
        let header = image.header();
        if !header.snaps.is_empty() {
            image.close().await?;
            return Err(RbdError::Busy(format!(
                "image {name} has {} snapshots: remove them first",
                header.snaps.len()
            )));
        }
        let children = crate::clone::children(&client, pool, name).await?;
        if let Some((child, _)) = children.first() {
            image.close().await?;
            return Err(RbdError::Busy(format!(
                "image {name} has clones ({child}): remove them first"
            )));
        }
        let removed = async {
            image.remove_objects_from(0).await?;
            match client
                .remove(pool, &crate::requests::requests_object(name))
                .await
            {
                Ok(()) | Err(ClientError::NotFound(_)) => {}
                Err(e) => return Err(RbdError::from(e)),
            }
            // The header goes while the lock (an attribute of it) is still held: no writer can
            // take the lock between the data's removal and the header's and leave data behind.
            image.lock()?.check().await?;
            client.remove(pool, &header_object(name)).await?;
            Ok(())
        };
        let removed = removed.await;
        let released = image.close().await;
        removed?;
        released?;
        client
            .omap_remove(pool, DIRECTORY, &[name.as_bytes().to_vec()])
            .await?;
        if let Some(p) = &header.parent {
            crate::clone::unregister(&client, p, pool, name).await?;
        }
        Ok(())
    }

    /// Releases the exclusive lock (a writer), so that another client may take it at once.
    pub async fn close(&self) -> Result<(), RbdError> {
        match &self.access {
            Access::Exclusive(lock) => lock.release().await,
            _ => Ok(()),
        }
    }

    /// The image's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The size this handle serves: the image's, or its snapshot's.
    pub fn size(&self) -> u64 {
        match self.access {
            Access::Snapshot { size, .. } => size,
            _ => self.header().size,
        }
    }

    /// Whether writes are refused (a snapshot, or an image opened to read).
    pub fn read_only(&self) -> bool {
        !matches!(self.access, Access::Exclusive(_))
    }

    /// Bytes per data object.
    pub fn object_bytes(&self) -> u64 {
        self.header().object_bytes()
    }

    /// The header as this handle knows it.
    pub fn header(&self) -> Header {
        self.header
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The lock, for a writer; [`RbdError::ReadOnly`] otherwise.
    pub(crate) fn lock(&self) -> Result<&Arc<ExclusiveLock>, RbdError> {
        match &self.access {
            Access::Exclusive(lock) => Ok(lock),
            Access::ReadOnly => Err(RbdError::ReadOnly(format!(
                "image {} was opened to read",
                self.name
            ))),
            Access::Snapshot { .. } => Err(RbdError::ReadOnly(format!(
                "a snapshot of image {} is read-only",
                self.name
            ))),
        }
    }

    /// Forgets which objects were prepared: each is prepared again before its next write.
    pub(crate) fn forget_prepared(&self) {
        self.prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Stores `header` (the writer's compare-and-swap under its lock), then keeps it.
    pub(crate) async fn store_header(&self, header: Header) -> Result<(), RbdError> {
        header.check().map_err(RbdError::Invalid)?;
        self.lock()?.write_header(&header.encode()).await?;
        *self.header.write().unwrap_or_else(|p| p.into_inner()) = header;
        Ok(())
    }

    /// Checks that `len` bytes at `offset` lie within the image.
    fn check_range(&self, offset: u64, len: u64) -> Result<(), RbdError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(RbdError::Invalid(format!(
                "{len} bytes at {offset} reach past the image's {} bytes",
                self.size()
            ))),
        }
    }

    /// Reads `len` bytes at `offset`; what was never written reads as zeros (or, in a clone,
    /// as its parent snapshot's bytes).
    pub async fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>, RbdError> {
        self.check_range(offset, len)?;
        let len_usize = usize::try_from(len)
            .map_err(|_| RbdError::Invalid(format!("{len} bytes in one read")))?;
        let object_bytes = self.object_bytes();
        let pieces = extents(offset, len, object_bytes);
        let reads = pieces
            .iter()
            .map(|e| async move { Ok::<_, RbdError>((*e, self.read_extent(e).await?)) });
        let mut out = vec![0u8; len_usize];
        for (e, data) in try_join_all(reads).await? {
            // A short object reads as zeros past its end.
            let got = data.len().min(e.buffer_len());
            let at = e.buffer_at();
            out[at..at + got].copy_from_slice(&data[..got]);
        }
        Ok(out)
    }

    /// One extent's bytes (fewer when the object ends early: zeros follow).
    async fn read_extent(&self, e: &Extent) -> Result<Vec<u8>, RbdError> {
        if let Access::Snapshot { id, .. } = self.access {
            return match crate::cow::read_at_snap(self, e, id).await? {
                Some(data) => Ok(data),
                None => self.read_parent(e).await,
            };
        }
        let object = data_object(&self.name, e.index);
        match self
            .client
            .read_range_bytes(&self.pool, &object, e.object_offset, e.len)
            .await
        {
            Ok(data) => Ok(data.to_vec()),
            Err(ClientError::NotFound(_)) => self.read_parent(e).await,
            Err(err) => Err(RbdError::from(err)),
        }
    }

    /// What an object this image lacks reads as: its parent's bytes within the overlap,
    /// zeros past it (and without a parent).
    pub(crate) async fn read_parent(&self, e: &Extent) -> Result<Vec<u8>, RbdError> {
        let (Some(parent), Some(p)) = (&self.parent, self.header().parent) else {
            return Ok(Vec::new());
        };
        let at = e.index * self.object_bytes() + e.object_offset;
        let overlap = match self.access {
            Access::Snapshot { id, size } => self
                .header()
                .snaps
                .iter()
                .find(|s| s.id == id)
                .and_then(|s| s.parent_overlap)
                .unwrap_or(p.overlap)
                .min(size),
            _ => p.overlap,
        };
        let within = overlap.saturating_sub(at).min(e.len);
        if within == 0 {
            return Ok(Vec::new());
        }
        Box::pin(parent.read(at, within)).await
    }

    /// Writes `data` at `offset`; durable on every copy when it returns. Only the lock's
    /// holder writes; what a snapshot or a clone's parent still needs is copied first.
    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<(), RbdError> {
        self.lock()?.check().await?;
        let _gate = self.io_gate.read().await;
        self.check_range(offset, data.len() as u64)?;
        let pieces = extents(offset, data.len() as u64, self.object_bytes());
        let writes = pieces.iter().map(|e| async move {
            crate::cow::prepare(self, e.index).await?;
            let at = e.buffer_at();
            let object = data_object(&self.name, e.index);
            self.client
                .write(
                    &self.pool,
                    &object,
                    e.object_offset,
                    &data[at..at + e.buffer_len()],
                )
                .await
                .map_err(RbdError::from)
        });
        try_join_all(writes).await?;
        Ok(())
    }

    /// Makes `len` bytes at `offset` read as zeros, freeing what it can: a whole object is
    /// removed (emptied, in a clone, where removing it would show the parent's bytes), an
    /// object's tail cut off, any other piece written with zeros.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<(), RbdError> {
        self.lock()?.check().await?;
        let _gate = self.io_gate.read().await;
        self.check_range(offset, len)?;
        let object_bytes = self.object_bytes();
        let pieces = extents(offset, len, object_bytes);
        let header = self.header();
        let size = header.size;
        let overlap = header.parent.as_ref().map_or(0, |p| p.overlap);
        let ops = pieces.iter().map(|e| async move {
            crate::cow::prepare(self, e.index).await?;
            let object = data_object(&self.name, e.index);
            let start = e.index * object_bytes;
            let object_end = ((e.index + 1) * object_bytes).min(size) - start;
            let outcome = if e.object_offset == 0 && e.len >= object_end && start >= overlap {
                self.prepared
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&e.index);
                self.client.remove(&self.pool, &object).await
            } else if e.object_offset + e.len >= object_end {
                self.client
                    .truncate(&self.pool, &object, e.object_offset)
                    .await
                    .map(|_| ())
            } else {
                let zeros = vec![0u8; e.buffer_len()];
                self.client
                    .write(&self.pool, &object, e.object_offset, &zeros)
                    .await
                    .map(|_| ())
            };
            match outcome {
                Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
                Err(err) => Err(RbdError::from(err)),
            }
        });
        try_join_all(ops).await?;
        Ok(())
    }

    /// Changes the image's size; shrinking removes the data past the new end (copied first
    /// for the snapshots that still see it). A clone's overlap with its parent shrinks with
    /// it and never grows back.
    pub async fn resize(&self, new_size: u64) -> Result<(), RbdError> {
        self.lock()?.check().await?;
        let _gate = self.io_gate.write().await;
        let old = self.header();
        let mut header = old.clone();
        header.size = new_size;
        if let Some(p) = &mut header.parent {
            p.overlap = p.overlap.min(new_size);
        }
        header.check().map_err(RbdError::Invalid)?;
        if new_size < old.size {
            // Data past the end goes first: a crash in between leaves the old size with
            // zeros at its end, never the new size with stale bytes past it.
            let keep = header.objects();
            for index in keep..old.objects() {
                crate::cow::prepare(self, index).await?;
            }
            self.remove_objects_from(keep).await?;
            self.forget_prepared();
            let tail = new_size % self.object_bytes();
            if tail != 0 {
                crate::cow::prepare(self, keep - 1).await?;
                let object = data_object(&self.name, keep - 1);
                match self.client.truncate(&self.pool, &object, tail).await {
                    Ok(_) | Err(ClientError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        self.store_header(header).await
    }

    /// Removes data objects `first..` of the image (absent ones are skipped), 32 at a time.
    pub(crate) async fn remove_objects_from(&self, first: u64) -> Result<(), RbdError> {
        let last = self.header().objects();
        let mut index = first;
        while index < last {
            let batch = (index..last.min(index + 32)).map(|i| async move {
                match self
                    .client
                    .remove(&self.pool, &data_object(&self.name, i))
                    .await
                {
                    Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
                    Err(e) => Err(RbdError::from(e)),
                }
            });
            try_join_all(batch).await?;
            index += 32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_split_at_object_boundaries() {
        let mib = 1 << 20;
        assert_eq!(extents(0, 0, mib), []);
        assert_eq!(
            extents(mib - 10, 30, mib),
            [
                Extent {
                    index: 0,
                    object_offset: mib - 10,
                    len: 10,
                    buffer_offset: 0
                },
                Extent {
                    index: 1,
                    object_offset: 0,
                    len: 20,
                    buffer_offset: 10
                }
            ]
        );
        let pieces = extents(3, 5 * mib, mib);
        assert_eq!(pieces.len(), 6);
        assert_eq!(pieces.iter().map(|e| e.len).sum::<u64>(), 5 * mib);
        assert_eq!(pieces[5].len, 3);
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "vm-disk.0", &"x".repeat(MAX_NAME_BYTES)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "a/b",
            "sp ace",
            "é",
            &"x".repeat(MAX_NAME_BYTES + 1),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_names_sort_by_index() {
        assert_eq!(data_object("d", 10), "rbd_data.d.000000000000000a");
        assert!(data_object("d", 9) < data_object("d", 10));
        assert_eq!(header_object("d"), "rbd_header.d");
    }
}
