//! An image: creating, listing, opening, resizing and removing it, and reading, writing and
//! discarding its bytes, each spread over the data objects the range touches (in parallel).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_client::{Client, ClientError};
use futures_util::future::try_join_all;

use crate::error::RbdError;
use crate::header::{Header, DEFAULT_ORDER};

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

/// An open image.
pub struct Image {
    client: Arc<Client>,
    pool: String,
    name: String,
    order: u8,
    size: AtomicU64,
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
        check_name(name)?;
        let header =
            Header::new(size, order.unwrap_or(DEFAULT_ORDER)).map_err(RbdError::Invalid)?;
        match client.stat(pool, &header_object(name)).await {
            Ok(_) => return Err(RbdError::Exists(name.to_string())),
            Err(ClientError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        client
            .write_full(pool, &header_object(name), &header.encode())
            .await?;
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

    /// Opens image `name` of `pool`.
    pub async fn open(client: Arc<Client>, pool: &str, name: &str) -> Result<Image, RbdError> {
        check_name(name)?;
        let bytes = match client.read(pool, &header_object(name)).await {
            Ok(b) => b,
            Err(ClientError::NotFound(_)) => return Err(RbdError::NotFound(name.to_string())),
            Err(e) => return Err(e.into()),
        };
        let header = Header::decode(&bytes).map_err(|why| RbdError::Corrupt {
            name: name.to_string(),
            why,
        })?;
        Ok(Image {
            client,
            pool: pool.to_string(),
            name: name.to_string(),
            order: header.order,
            size: AtomicU64::new(header.size),
        })
    }

    /// Removes image `name`: its data objects, its header, its directory entry.
    pub async fn remove(client: Arc<Client>, pool: &str, name: &str) -> Result<(), RbdError> {
        let image = Image::open(client.clone(), pool, name).await?;
        image.remove_objects_from(0).await?;
        client.remove(pool, &header_object(name)).await?;
        client
            .omap_remove(pool, DIRECTORY, &[name.as_bytes().to_vec()])
            .await?;
        Ok(())
    }

    /// The image's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Bytes per data object.
    pub fn object_bytes(&self) -> u64 {
        1 << self.order
    }

    fn header(&self) -> Header {
        Header {
            size: self.size(),
            order: self.order,
        }
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

    /// Reads `len` bytes at `offset`; what was never written reads as zeros.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>, RbdError> {
        self.check_range(offset, len)?;
        let len_usize = usize::try_from(len)
            .map_err(|_| RbdError::Invalid(format!("{len} bytes in one read")))?;
        let pieces = extents(offset, len, self.object_bytes());
        let reads = pieces.iter().map(|e| async move {
            let object = data_object(&self.name, e.index);
            match self
                .client
                .read_range_bytes(&self.pool, &object, e.object_offset, e.len)
                .await
            {
                Ok(data) => Ok((*e, data)),
                Err(ClientError::NotFound(_)) => Ok((*e, bytes::Bytes::new())),
                Err(err) => Err(RbdError::from(err)),
            }
        });
        let mut out = vec![0u8; len_usize];
        for (e, data) in try_join_all(reads).await? {
            // A short object reads as zeros past its end.
            let got = data.len().min(e.buffer_len());
            let at = e.buffer_at();
            out[at..at + got].copy_from_slice(&data[..got]);
        }
        Ok(out)
    }

    /// Writes `data` at `offset`; durable on every copy when it returns.
    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<(), RbdError> {
        self.check_range(offset, data.len() as u64)?;
        let pieces = extents(offset, data.len() as u64, self.object_bytes());
        let writes = pieces.iter().map(|e| async move {
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
    /// removed, an object's tail cut off, any other piece written with zeros.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<(), RbdError> {
        self.check_range(offset, len)?;
        let object_bytes = self.object_bytes();
        let pieces = extents(offset, len, object_bytes);
        let size = self.size();
        let ops = pieces.iter().map(|e| async move {
            let object = data_object(&self.name, e.index);
            let object_end = ((e.index + 1) * object_bytes).min(size) - e.index * object_bytes;
            let outcome = if e.object_offset == 0 && e.len >= object_end {
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

    /// Changes the image's size; shrinking removes the data past the new end.
    pub async fn resize(&self, new_size: u64) -> Result<(), RbdError> {
        let header = Header::new(new_size, self.order).map_err(RbdError::Invalid)?;
        let old = self.header();
        if new_size < old.size {
            // Data past the end goes first: a crash in between leaves the old size with
            // zeros at its end, never the new size with stale bytes past it.
            let keep = header.objects();
            self.remove_objects_from(keep).await?;
            let tail = new_size % self.object_bytes();
            if tail != 0 {
                let object = data_object(&self.name, keep - 1);
                match self.client.truncate(&self.pool, &object, tail).await {
                    Ok(_) | Err(ClientError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        self.client
            .write_full(&self.pool, &header_object(&self.name), &header.encode())
            .await?;
        self.size.store(new_size, Ordering::Release);
        Ok(())
    }

    /// Removes data objects `first..` of the image (absent ones are skipped), 32 at a time.
    async fn remove_objects_from(&self, first: u64) -> Result<(), RbdError> {
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
