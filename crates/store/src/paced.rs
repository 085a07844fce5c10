//! The KV's file backend: redb's own, except that a sync writes the pages dirtied since the
//! last one back in small batches before the final `fdatasync`.
//!
//! A checkpoint's redb commit dirties a few hundred scattered pages of the KV file; a plain
//! `fdatasync` hands them to the device all at once, and the group commits' durable record
//! writes, which share the device, queue behind the whole burst (1 OSD, 4 KiB writes: one
//! record write in ten took over 1 ms while a checkpoint committed, against one in a thousand
//! otherwise). Written back [`PACE_BYTES`] at a time, the pages leave room between batches.
//! The sync is as durable as before: the final `fdatasync` still runs, and an error of any
//! batch fails the sync (a write-back error consumed by a batch would otherwise be missed by
//! the `fdatasync` on the same open file).

use redb::backends::FileBackend;
use redb::StorageBackend;
use std::fs::File;
use std::io;
use std::sync::Mutex;

/// Dirty bytes written back per batch before waiting for them.
pub(crate) const PACE_BYTES: u64 = 256 << 10;

/// Most dirty ranges remembered between syncs; past it the next sync writes everything back
/// at once (as a plain `fdatasync` would), so memory stays bounded.
const MAX_DIRTY_RANGES: usize = 1 << 16;

/// redb's [`FileBackend`] with paced write-back on sync (see the module documentation).
#[derive(Debug)]
pub(crate) struct PacedFileBackend {
    inner: FileBackend,
    /// The same open file, for `sync_file_range`.
    file: File,
    /// Byte ranges written since the last sync; `None` once more than [`MAX_DIRTY_RANGES`].
    dirty: Mutex<Option<Vec<(u64, u64)>>>,
}

impl PacedFileBackend {
    /// Wraps `file` (opened read-write) as redb's file backend does, locking it.
    pub(crate) fn new(file: File) -> Result<Self, redb::DatabaseError> {
        let twin = file.try_clone()?;
        Ok(Self {
            inner: FileBackend::new(file)?,
            file: twin,
            dirty: Mutex::new(Some(Vec::new())),
        })
    }

    fn note_dirty(&self, offset: u64, len: u64) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ranges) = dirty.as_mut() {
            if ranges.len() < MAX_DIRTY_RANGES {
                ranges.push((offset, len));
            } else {
                *dirty = None;
            }
        }
    }

    /// Writes the dirty ranges back, [`PACE_BYTES`] at a time, waiting for each batch.
    fn write_back(&self) -> io::Result<()> {
        let taken = self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(Vec::new());
        let Some(ranges) = taken else {
            return Ok(());
        };
        for batch in batches(merge(ranges), PACE_BYTES) {
            for &(offset, len) in &batch {
                sync_range(&self.file, offset, len, true)?;
            }
            let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
                continue;
            };
            sync_range(&self.file, first.0, last.0 + last.1 - first.0, false)?;
        }
        Ok(())
    }
}

impl StorageBackend for PacedFileBackend {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.inner.read(offset, len)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self, eventual: bool) -> io::Result<()> {
        self.write_back()?;
        self.inner.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write(offset, data)?;
        self.note_dirty(offset, data.len() as u64);
        Ok(())
    }
}

/// Sorts `ranges` and joins those that overlap or touch.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (offset, len) in ranges {
        match out.last_mut() {
            Some((o, l)) if offset <= *o + *l => *l = (*l).max(offset + len - *o),
            _ => out.push((offset, len)),
        }
    }
    out
}

/// Splits sorted, disjoint `ranges` into batches of about `pace` bytes each (a range longer
/// than `pace` is cut into pieces of `pace`).
fn batches(ranges: Vec<(u64, u64)>, pace: u64) -> Vec<Vec<(u64, u64)>> {
    let pace = pace.max(1);
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0u64;
    for (mut offset, mut len) in ranges {
        while len > 0 {
            let piece = len.min(pace - bytes);
            batch.push((offset, piece));
            bytes += piece;
            offset += piece;
            len -= piece;
            if bytes == pace {
                out.push(std::mem::take(&mut batch));
                bytes = 0;
            }
        }
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// Starts write-back of a byte range of `file` (`start`), or waits for the write-back in
/// flight over it to end and reports its error (`!start`).
fn sync_range(file: &File, offset: u64, len: u64, start: bool) -> io::Result<()> {
    cairn_blockdev::os::sync_file_range(file, offset, len, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_and_touching_ranges_are_joined() {
        let merged = merge(vec![
            (8192, 4096),
            (0, 4096),
            (4096, 100),
            (2000, 50),
            (20000, 10),
        ]);
        assert_eq!(merged, vec![(0, 4196), (8192, 4096), (20000, 10)]);
    }

    #[test]
    fn batches_hold_at_most_the_pace_and_cover_every_byte() {
        let ranges = merge(vec![(0, 10), (100, 25), (1000, 7)]);
        let got = batches(ranges, 16);
        assert!(got.iter().all(|b| b.iter().map(|r| r.1).sum::<u64>() <= 16));
        let flat: Vec<(u64, u64)> = got.into_iter().flatten().collect();
        assert_eq!(
            flat,
            vec![(0, 10), (100, 6), (106, 16), (122, 3), (1000, 7)]
        );
    }

    #[test]
    fn a_sync_after_writes_leaves_the_file_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let b = PacedFileBackend::new(file).unwrap();
        b.set_len(1 << 20).unwrap();
        let page: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        for i in (0..256u64).rev().step_by(3) {
            b.write(i * 4096, &page).unwrap();
        }
        b.sync_data(false).unwrap();
        assert!(b.dirty.lock().unwrap().as_ref().unwrap().is_empty());
        let on_disk = std::fs::read(&path).unwrap();
        for i in (0..256u64).rev().step_by(3) {
            let at = usize::try_from(i * 4096).unwrap();
            assert_eq!(&on_disk[at..at + 4096], page.as_slice());
        }
    }
}
