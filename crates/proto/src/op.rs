//! Client operations (client -> primary), replica writes (primary -> replica) and their replies.
//! Keys, values and bulk data travel in the message's data section, never in the header.

use cairn_pg::log::{LogEntry, ReqId};
use serde::{Deserialize, Serialize};

/// What an operation does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Replace the object's content with the data.
    WriteFull,
    /// Write the data at `offset` (the object grows as needed; holes read as zeros).
    Write {
        /// Byte offset.
        offset: u64,
    },
    /// Write the data at the object's end (the primary turns it into a `Write` at that offset).
    Append,
    /// Set the object's size, cutting or zero-extending.
    Truncate {
        /// New size in bytes.
        size: u64,
    },
    /// Read `len` bytes at `offset` (0, u64::MAX = whole object).
    Read {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// Size and version.
    Stat,
    /// Delete the object.
    Remove,
    /// Set an extended attribute; the value is the data.
    SetXattr {
        /// Attribute name (names starting with `_` are reserved for the OSD).
        name: String,
    },
    /// Read one extended attribute; the reply's data is its value.
    GetXattr {
        /// Attribute name.
        name: String,
    },
    /// Read every user extended attribute; the reply's data is [`crate::pairs`]-encoded.
    GetXattrs,
    /// Remove an extended attribute.
    RemoveXattr {
        /// Attribute name.
        name: String,
    },
    /// Set omap entries; the data is [`crate::pairs`]-encoded (key, value) pairs.
    OmapSet,
    /// Remove omap keys; the data is [`crate::pairs`]-encoded (key, empty) pairs.
    OmapRemove,
    /// List omap entries in key order, strictly after `after`, starting with `prefix`, at most
    /// `max`; the reply's data is [`crate::pairs`]-encoded and `more` says whether more follow.
    OmapList {
        /// Resume point (exclusive), or empty to start at the beginning.
        after: Vec<u8>,
        /// Only keys with this prefix.
        prefix: Vec<u8>,
        /// Most entries returned.
        max: u32,
    },
    /// List the PG's object names in byte order strictly after `after`, at most `max`; the
    /// reply's data holds one name per [`crate::pairs`] key; `more` says whether more follow.
    ListObjects {
        /// Resume point (exclusive), or empty.
        after: String,
        /// Most names returned.
        max: u32,
    },
}

impl OpKind {
    /// True for operations that change the object (ordered, logged and replicated).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            OpKind::WriteFull
                | OpKind::Write { .. }
                | OpKind::Append
                | OpKind::Truncate { .. }
                | OpKind::Remove
                | OpKind::SetXattr { .. }
                | OpKind::RemoveXattr { .. }
                | OpKind::OmapSet
                | OpKind::OmapRemove
        )
    }

    /// A write that can only take space away (a removal of an object, an xattr or omap
    /// keys): the only writes a pool past its quota still takes.
    pub fn frees_only(&self) -> bool {
        matches!(
            self,
            OpKind::Remove | OpKind::RemoveXattr { .. } | OpKind::OmapRemove
        )
    }

    /// Short name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::WriteFull => "write_full",
            OpKind::Write { .. } => "write",
            OpKind::Append => "append",
            OpKind::Truncate { .. } => "truncate",
            OpKind::Read { .. } => "read",
            OpKind::Stat => "stat",
            OpKind::Remove => "remove",
            OpKind::SetXattr { .. } => "setxattr",
            OpKind::GetXattr { .. } => "getxattr",
            OpKind::GetXattrs => "getxattrs",
            OpKind::RemoveXattr { .. } => "rmxattr",
            OpKind::OmapSet => "omap_set",
            OpKind::OmapRemove => "omap_rm",
            OpKind::OmapList { .. } => "omap_list",
            OpKind::ListObjects { .. } => "list",
        }
    }
}

/// Header of a client operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpHeader {
    /// Request id chosen by the sender, echoed in the reply.
    pub tid: u64,
    /// Sender's map epoch.
    pub epoch: u64,
    /// Pool id.
    pub pool: i64,
    /// PG seed within the pool.
    pub pg_seed: u32,
    /// Object name (empty for `ListObjects`).
    pub object: String,
    /// The operation.
    pub kind: OpKind,
    /// crc32c of the data, checked on receipt.
    pub data_crc: u32,
    /// A write's identity, the same on every resend: the primary answers a resend whose first
    /// attempt it logged from its log instead of applying it again. None for reads (and from
    /// clients that do not send one: their resends may apply twice).
    #[serde(default)]
    pub reqid: Option<ReqId>,
    /// A write's precondition (RADOS's `assert_version`): applied only while the object's
    /// version is this one, 0 meaning the object does not exist (an exclusive create);
    /// otherwise refused with [`OpResult::VersionMismatch`]. None: unconditional.
    #[serde(default)]
    pub assert_version: Option<u64>,
    /// Background work of a service (the S3 gateway's lifecycle pass): the OSDs schedule it,
    /// and its replica writes, in the best-effort class instead of the client class.
    #[serde(default)]
    pub background: bool,
    /// The sending client's id (the one it connected as): what the OSDs' schedulers group and
    /// match its requests by (CRR-N's queues, TBF's `client=` rules), the same on every OSD.
    /// 0 from a client that does not say: its session's id stands in.
    #[serde(default)]
    pub client: u64,
    /// The sending client instance (random per process's client): what the blocklist fences
    /// (see `ClusterMap::blocklist`). 0 from a client that does not say: never fenced.
    #[serde(default)]
    pub instance: u64,
    /// A metadata server's own write (Ceph's `FULL_FORCE`): taken past the full ratio, up to
    /// the failsafe ratio, so that a full cluster's file system still journals the deletions
    /// that free its space. Only a sender with the `mds` monitor profile (or admin) may set it.
    #[serde(default)]
    pub full_force: bool,
}

/// Header of a replica write: the primary's resolved operation and its PG log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepOpHeader {
    /// Request id chosen by the primary.
    pub tid: u64,
    /// Epoch of the primary's interval.
    pub epoch: u64,
    /// Pool id.
    pub pool: i64,
    /// PG seed.
    pub pg_seed: u32,
    /// Object name.
    pub object: String,
    /// Operation, resolved (never `Append`).
    pub kind: OpKind,
    /// The PG log entry the write creates.
    pub entry: LogEntry,
    /// crc32c of the data.
    pub data_crc: u32,
    /// The client op was background work ([`OpHeader::background`]).
    #[serde(default)]
    pub background: bool,
    /// The client op's [`OpHeader::client`]: replicas schedule the write as that client's.
    #[serde(default)]
    pub client: u64,
    /// Nonzero: the write is forwarded to a copy being filled in the background (outside the
    /// acting set), by the fill attempt of this number; the copy applies it to the object
    /// alone (its log comes with the fill) and refuses it once a later attempt reached it.
    /// Zero: a write to an acting copy.
    #[serde(default)]
    pub fill: u64,
}

/// Result codes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    /// Done.
    Ok,
    /// This OSD is not the primary in its map; retry with a newer map.
    NotPrimary,
    /// No such pool, object or attribute.
    NotFound,
    /// The request itself is wrong (bad name, checksum, limit); retrying will not help.
    Invalid(String),
    /// An OSD of the acting set is out of space; retrying will not help until space is freed.
    NoSpace(String),
    /// The operation failed (replica unreachable, PG peering, store error); safe to retry.
    Failed(String),
    /// The object's data failed its checksum on the primary and no other copy could replace
    /// it (every copy damaged, or none reachable): no bytes are returned. Like Ceph's EIO;
    /// retrying will not help until a copy is restored.
    Damaged(String),
    /// The pool reached its quota (Ceph's EDQUOT): writes are refused, except removals, until
    /// removals bring it back under; retrying will not help before that.
    QuotaExceeded(String),
    /// A write's `assert_version` did not hold: the object is at `current` (0: absent), and
    /// nothing was applied. Retrying as is will not help; the caller reads again and decides.
    VersionMismatch {
        /// The object's version now.
        current: u64,
    },
    /// The sending client instance is fenced (blocklisted in the map, Ceph's EBLOCKLISTED):
    /// it lost what it held to another client, and none of its ops is served any more.
    /// Retrying will not help; the client must start again as a new instance.
    Blocklisted(String),
}

/// Header of a reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyHeader {
    /// The request's id.
    pub tid: u64,
    /// Responder's map epoch.
    pub epoch: u64,
    /// Outcome.
    pub result: OpResult,
    /// Object size (stat, read).
    pub size: u64,
    /// Object version, `epoch << 32 | counter` of its last PG log entry.
    pub version: u64,
    /// crc32c of the data.
    pub data_crc: u32,
    /// A listing stopped at its limit: more entries follow.
    #[serde(default)]
    pub more: bool,
}

impl ReplyHeader {
    /// A reply with nothing but a result.
    pub fn bare(tid: u64, epoch: u64, result: OpResult) -> Self {
        ReplyHeader {
            tid,
            epoch,
            result,
            size: 0,
            version: 0,
            data_crc: 0,
            more: false,
        }
    }
}
