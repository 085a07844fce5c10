//! Transactions: ordered lists of operations applied atomically (all or nothing).
//!
//! Owns the operation vocabulary and the builder API. It must never perform I/O: applying a
//! transaction is the store's job.

/// crc32c of each `block_bytes` block of a write's data, from its first byte (the last block
/// may be short). The store keeps them as its block checksums instead of computing them when
/// they fit its blocks exactly (same block size, a block-aligned write of whole blocks) and
/// ignores them otherwise. Whoever supplies them vouches for them: a wrong value is not
/// detected at the write but makes every later read of that block fail its checksum, so it can
/// never be returned as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataCrcs {
    /// Bytes per checksummed block.
    pub block_bytes: u64,
    /// One crc32c per block.
    pub crcs: std::sync::Arc<[u32]>,
}

/// One operation. Object-level operations on a missing object create it, except `Remove`,
/// `Clone` (source), `Rename` (source), `RmAttr` and `OmapRemove`, which fail the whole
/// transaction with `NoSuchObject`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Creates a collection.
    CreateCollection {
        /// Collection name.
        coll: String,
    },
    /// Removes an empty collection.
    RemoveCollection {
        /// Collection name.
        coll: String,
    },
    /// Creates the object if missing.
    Touch {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
    },
    /// Writes bytes at an offset, extending the object if needed.
    Write {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// Byte offset.
        offset_bytes: u64,
        /// The bytes (shared, not copied: a write can hand over a received message's buffer).
        data: bytes::Bytes,
        /// Checksums of the bytes computed by whoever last read them (the messenger, as they
        /// arrived), so the store need not read them again; see [`DataCrcs`].
        crcs: Option<DataCrcs>,
    },
    /// Makes a range read as zeros (whole blocks are deallocated), extending if needed.
    Zero {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// Byte offset.
        offset_bytes: u64,
        /// Length.
        len_bytes: u64,
    },
    /// Sets the object's size, dropping or zero-extending data.
    Truncate {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// New size.
        size_bytes: u64,
    },
    /// Deletes the object with its data, xattrs and omap.
    Remove {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
    },
    /// Makes `dst` a full copy of `src` (data, xattrs, omap), replacing `dst`.
    Clone {
        /// Collection name.
        coll: String,
        /// Source object.
        src: String,
        /// Destination object.
        dst: String,
    },
    /// Renames `src` to `dst`, replacing `dst`.
    Rename {
        /// Collection name.
        coll: String,
        /// Source object.
        src: String,
        /// Destination object.
        dst: String,
    },
    /// Sets an extended attribute.
    SetAttr {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// Attribute name.
        name: String,
        /// Attribute value.
        value: Vec<u8>,
    },
    /// Removes an extended attribute (missing attribute is not an error).
    RmAttr {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// Attribute name.
        name: String,
    },
    /// Sets omap entries.
    OmapSet {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// (key, value) pairs.
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// Removes omap entries (missing keys are not an error).
    OmapRemove {
        /// Collection name.
        coll: String,
        /// Object name.
        obj: String,
        /// Keys.
        keys: Vec<Vec<u8>>,
    },
}

impl Op {
    /// Bytes of user data this operation writes (for limits and write-amplification figures).
    pub fn data_bytes(&self) -> u64 {
        match self {
            Op::Write { data, .. } => data.len() as u64,
            Op::SetAttr { value, .. } => value.len() as u64,
            Op::OmapSet { entries, .. } => entries
                .iter()
                .map(|(k, v)| (k.len() + v.len()) as u64)
                .sum(),
            _ => 0,
        }
    }
}

/// An ordered list of operations, applied atomically by `Store::queue_transaction`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    /// The operations, applied in order; later ones see the effects of earlier ones.
    pub ops: Vec<Op>,
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an operation.
    pub fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Appends `CreateCollection`.
    pub fn create_collection(&mut self, coll: &str) -> &mut Self {
        self.push(Op::CreateCollection { coll: coll.into() })
    }

    /// Appends `Write`.
    pub fn write(&mut self, coll: &str, obj: &str, offset_bytes: u64, data: &[u8]) -> &mut Self {
        self.write_bytes(coll, obj, offset_bytes, bytes::Bytes::copy_from_slice(data))
    }

    /// Appends `Write` with bytes the transaction shares instead of copying.
    pub fn write_bytes(
        &mut self,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        data: bytes::Bytes,
    ) -> &mut Self {
        self.push_write(coll, obj, offset_bytes, data, None)
    }

    /// Like [`Transaction::write_bytes`] with the data's block checksums already known.
    pub fn write_checksummed(
        &mut self,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        data: bytes::Bytes,
        crcs: DataCrcs,
    ) -> &mut Self {
        self.push_write(coll, obj, offset_bytes, data, Some(crcs))
    }

    fn push_write(
        &mut self,
        coll: &str,
        obj: &str,
        offset_bytes: u64,
        data: bytes::Bytes,
        crcs: Option<DataCrcs>,
    ) -> &mut Self {
        self.push(Op::Write {
            coll: coll.into(),
            obj: obj.into(),
            offset_bytes,
            data,
            crcs,
        })
    }

    /// Appends `Zero`.
    pub fn zero(&mut self, coll: &str, obj: &str, offset_bytes: u64, len_bytes: u64) -> &mut Self {
        self.push(Op::Zero {
            coll: coll.into(),
            obj: obj.into(),
            offset_bytes,
            len_bytes,
        })
    }

    /// Appends `Truncate`.
    pub fn truncate(&mut self, coll: &str, obj: &str, size_bytes: u64) -> &mut Self {
        self.push(Op::Truncate {
            coll: coll.into(),
            obj: obj.into(),
            size_bytes,
        })
    }

    /// Appends `Remove`.
    pub fn remove(&mut self, coll: &str, obj: &str) -> &mut Self {
        self.push(Op::Remove {
            coll: coll.into(),
            obj: obj.into(),
        })
    }

    /// Appends `Clone`.
    pub fn clone_object(&mut self, coll: &str, src: &str, dst: &str) -> &mut Self {
        self.push(Op::Clone {
            coll: coll.into(),
            src: src.into(),
            dst: dst.into(),
        })
    }

    /// Appends `Rename`.
    pub fn rename(&mut self, coll: &str, src: &str, dst: &str) -> &mut Self {
        self.push(Op::Rename {
            coll: coll.into(),
            src: src.into(),
            dst: dst.into(),
        })
    }

    /// Appends `SetAttr`.
    pub fn setattr(&mut self, coll: &str, obj: &str, name: &str, value: &[u8]) -> &mut Self {
        self.push(Op::SetAttr {
            coll: coll.into(),
            obj: obj.into(),
            name: name.into(),
            value: value.to_vec(),
        })
    }

    /// Appends `OmapSet` with one entry.
    pub fn omap_set(&mut self, coll: &str, obj: &str, key: &[u8], value: &[u8]) -> &mut Self {
        self.push(Op::OmapSet {
            coll: coll.into(),
            obj: obj.into(),
            entries: vec![(key.to_vec(), value.to_vec())],
        })
    }

    /// Appends `OmapRemove` with one key.
    pub fn omap_remove(&mut self, coll: &str, obj: &str, key: &[u8]) -> &mut Self {
        self.push(Op::OmapRemove {
            coll: coll.into(),
            obj: obj.into(),
            keys: vec![key.to_vec()],
        })
    }
}
