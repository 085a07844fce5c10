//! Small sequential writes gathered into one object write. An application writing a file in
//! 64 KiB pieces hands the mount one FUSE write per piece; sent as they came, a 4 MiB object
//! would take 64 operations where `cairn bench` uses one. A [`Gather`] holds the writes that
//! continue one another within one object, and the mount sends them as one write when the
//! object's piece is complete, when anything else touches that range or the file (an
//! overlapping write, a read, flush, fsync, truncate), or after [`GATHER_LINGER`].

use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

/// Longest a gathered write waits for the write that would continue it.
pub const GATHER_LINGER: Duration = Duration::from_millis(20);

/// Writes that continue one another within one object of a file, not yet sent.
pub struct Gather {
    /// Offset in the file of the first byte.
    pub offset: u64,
    /// The bytes, in file order.
    pub data: Vec<u8>,
    /// The write-behind budget the bytes hold until they are written.
    pub room: OwnedSemaphorePermit,
    /// Which gather of the mount this is (the linger timer sends only its own).
    pub generation: u64,
    /// The file's object size (its layout).
    pub object_size: u32,
}

impl Gather {
    /// The file offset just past the gathered bytes.
    pub fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }

    /// Whether a write of `len` bytes at `offset` continues this gather within its object of
    /// `object_size` bytes.
    pub fn continued_by(&self, offset: u64, len: usize, object_size: u32) -> bool {
        offset == self.end()
            && len > 0
            && offset + len as u64 <= object_end(self.offset, object_size)
    }

    /// Whether the gather reaches its object's end: nothing more can join it.
    pub fn complete(&self, object_size: u32) -> bool {
        self.end() == object_end(self.offset, object_size)
    }
}

/// The file offset where the object holding byte `offset` ends.
pub fn object_end(offset: u64, object_size: u32) -> u64 {
    let os = u64::from(object_size.max(1));
    (offset / os + 1) * os
}

/// Writes of this size or more are sent as they come: the kernel's largest, whose operation
/// costs little beside its bytes (gathering them measured a few percent slower, the bytes
/// copied once more).
pub const GATHER_BELOW: usize = 1 << 20;

/// Whether a write of `len` bytes at `offset` should start a gather: it is smaller than
/// [`GATHER_BELOW`] and ends inside its object (a write reaching the object's end is as large
/// as gathering would make it).
pub fn worth_gathering(offset: u64, len: usize, object_size: u32) -> bool {
    len > 0 && len < GATHER_BELOW && offset + (len as u64) < object_end(offset, object_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    fn gather(offset: u64, len: usize) -> Gather {
        let room = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        Gather {
            offset,
            data: vec![0; len],
            room,
            generation: 1,
            object_size: 4 << 20,
        }
    }

    #[test]
    fn only_the_next_bytes_of_the_same_object_continue_a_gather() {
        const OS: u32 = 4 << 20;
        let g = gather(0, 1 << 20);
        assert!(g.continued_by(1 << 20, 1 << 20, OS));
        assert!(
            g.continued_by(1 << 20, 3 << 20, OS),
            "up to the object's end"
        );
        assert!(
            !g.continued_by(1 << 20, (3 << 20) + 1, OS),
            "past the object's end"
        );
        assert!(!g.continued_by(2 << 20, 1 << 20, OS), "a hole");
        assert!(!g.continued_by(0, 1 << 20, OS), "an overwrite");
        assert!(!g.complete(OS));
        assert!(gather(4 << 20, 4 << 20).complete(OS));
        let ends_object = gather(3 << 20, 1 << 20);
        assert!(ends_object.complete(OS));
        assert!(
            !ends_object.continued_by(4 << 20, 1, OS),
            "the next object starts a gather of its own"
        );
    }

    #[test]
    fn a_write_reaching_its_objects_end_is_sent_at_once() {
        const OS: u32 = 4 << 20;
        assert!(worth_gathering(0, 64 << 10, OS));
        assert!(
            !worth_gathering(0, 1 << 20, OS),
            "the kernel's largest write"
        );
        assert!(!worth_gathering(0, 4 << 20, OS));
        assert!(!worth_gathering((4 << 20) - 4096, 4096, OS));
        assert!(!worth_gathering(3 << 20, 1 << 20, OS));
        assert!(!worth_gathering(5, 0, OS));
        assert_eq!(object_end(4 << 20, OS), 8 << 20);
        assert_eq!(object_end((4 << 20) - 1, OS), 4 << 20);
    }
}
