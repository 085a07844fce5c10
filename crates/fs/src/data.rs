//! File data in the data pool: a file of layout `object_size` is cut into objects named
//! [`data_object`]`(ino, index)`, byte `o` of the file at byte `o % object_size` of object
//! `o / object_size`. Objects are made by the first write into them; a missing object, or
//! bytes past an object's end, read as zeros (a sparse file's holes).

use bytes::Bytes;
use cairn_client::{Client, ClientError};
use futures_util::future::try_join_all;

use crate::backing::data_object;
use crate::error::FsError;

/// Most objects touched at once by one read, write or purge.
const PARALLEL_OBJECTS: usize = 16;
/// Objects past the recorded size a purge or truncate still probes for (data a client wrote
/// but had not reported when it went away).
const PROBE_PAST_END: u64 = 4;

/// One piece of a byte range: its object, the offset in that object, the offset in the
/// caller's buffer, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The object's index.
    pub index: u64,
    /// Offset in the object.
    pub object_offset: u64,
    /// Offset in the caller's buffer.
    pub buffer_offset: usize,
    /// Bytes.
    pub len: usize,
}

/// The pieces of `len` bytes at `offset` in a file of layout `object_size`.
pub fn pieces(offset: u64, len: usize, object_size: u32) -> Vec<Piece> {
    assert!(object_size > 0, "a layout has a non-zero object size");
    let os = u64::from(object_size);
    let mut out = Vec::new();
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        let index = at / os;
        let object_offset = at % os;
        let room = usize::try_from(os - object_offset).unwrap_or(usize::MAX);
        let n = room.min(len - done);
        out.push(Piece {
            index,
            object_offset,
            buffer_offset: done,
            len: n,
        });
        done += n;
    }
    out
}

/// Writes `data` at `offset` of file `ino`.
pub async fn write(
    client: &Client,
    pool: &str,
    ino: u64,
    object_size: u32,
    offset: u64,
    data: &[u8],
) -> Result<(), FsError> {
    let all = pieces(offset, data.len(), object_size);
    for chunk in all.chunks(PARALLEL_OBJECTS) {
        try_join_all(chunk.iter().map(|p| async move {
            let bytes = &data[p.buffer_offset..p.buffer_offset + p.len];
            client
                .write(pool, &data_object(ino, p.index), p.object_offset, bytes)
                .await
        }))
        .await?;
    }
    Ok(())
}

/// Reads up to `len` bytes at `offset` of file `ino` whose size is `size`: fewer at the end
/// of the file, holes as zeros. A range inside one object comes back as the buffer the OSD's
/// reply arrived in, uncopied, when the object holds all of it.
pub async fn read(
    client: &Client,
    pool: &str,
    ino: u64,
    object_size: u32,
    offset: u64,
    len: usize,
    size: u64,
) -> Result<Bytes, FsError> {
    let len = usize::try_from(size.saturating_sub(offset))
        .unwrap_or(usize::MAX)
        .min(len);
    let all = pieces(offset, len, object_size);
    let read_piece = |p: Piece| async move {
        let name = data_object(ino, p.index);
        match client
            .read_range_bytes(pool, &name, p.object_offset, p.len as u64)
            .await
        {
            Ok(b) => Ok((p, b)),
            Err(ClientError::NotFound(_)) => Ok((p, Bytes::new())),
            Err(e) => Err(e),
        }
    };
    if let [one] = all.as_slice() {
        let (_, bytes) = read_piece(*one).await?;
        if bytes.len() >= len {
            return Ok(bytes.slice(..len));
        }
        let mut short = bytes.to_vec();
        short.resize(len, 0);
        return Ok(Bytes::from(short));
    }
    let mut out = vec![0u8; len];
    for chunk in all.chunks(PARALLEL_OBJECTS) {
        let got = try_join_all(chunk.iter().map(|p| read_piece(*p))).await?;
        for (p, bytes) in got {
            let n = bytes.len().min(p.len);
            out[p.buffer_offset..p.buffer_offset + n].copy_from_slice(&bytes[..n]);
        }
    }
    Ok(Bytes::from(out))
}

async fn remove_object(client: &Client, pool: &str, name: &str) -> Result<bool, FsError> {
    match client.remove(pool, name).await {
        Ok(()) => Ok(true),
        Err(ClientError::NotFound(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes the objects of file `ino` from index `first` on: every index below the last one
/// its `size` covers, then onwards while objects are found (unreported data).
async fn remove_from(
    client: &Client,
    pool: &str,
    ino: u64,
    first: u64,
    size: u64,
    object_size: u32,
) -> Result<(), FsError> {
    let covered = size.div_ceil(u64::from(object_size));
    let indices: Vec<u64> = (first..covered.max(first)).collect();
    for chunk in indices.chunks(PARALLEL_OBJECTS) {
        try_join_all(
            chunk
                .iter()
                .map(|i| async move { remove_object(client, pool, &data_object(ino, *i)).await }),
        )
        .await?;
    }
    let mut index = covered.max(first);
    let mut misses = 0;
    while misses < PROBE_PAST_END {
        match remove_object(client, pool, &data_object(ino, index)).await? {
            true => misses = 0,
            false => misses += 1,
        }
        index += 1;
    }
    Ok(())
}

/// Cuts file `ino` (known size `old_size`) to `new_size`: objects wholly past it removed, the
/// one it ends in truncated.
pub async fn truncate(
    client: &Client,
    pool: &str,
    ino: u64,
    object_size: u32,
    old_size: u64,
    new_size: u64,
) -> Result<(), FsError> {
    let os = u64::from(object_size);
    let keep = new_size.div_ceil(os);
    remove_from(client, pool, ino, keep, old_size, object_size).await?;
    if !new_size.is_multiple_of(os) {
        let last = new_size / os;
        match client
            .truncate(pool, &data_object(ino, last), new_size % os)
            .await
        {
            Ok(_) | Err(ClientError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Removes every data object of a deleted file.
pub async fn purge(
    client: &Client,
    pool: &str,
    ino: u64,
    size: u64,
    object_size: u32,
) -> Result<(), FsError> {
    remove_from(client, pool, ino, 0, size, object_size).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cut_at_object_boundaries() {
        assert_eq!(pieces(0, 0, 4), vec![]);
        assert_eq!(
            pieces(3, 6, 4),
            vec![
                Piece {
                    index: 0,
                    object_offset: 3,
                    buffer_offset: 0,
                    len: 1
                },
                Piece {
                    index: 1,
                    object_offset: 0,
                    buffer_offset: 1,
                    len: 4
                },
                Piece {
                    index: 2,
                    object_offset: 0,
                    buffer_offset: 5,
                    len: 1
                },
            ]
        );
        let ps = pieces(4 << 20, 8 << 20, 4 << 20);
        assert_eq!(ps.len(), 2);
        assert_eq!((ps[0].index, ps[1].index), (1, 2));
        let total: usize = pieces(12345, 10 << 20, 1 << 20).iter().map(|p| p.len).sum();
        assert_eq!(total, 10 << 20);
    }
}
