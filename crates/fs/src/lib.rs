//! A POSIX file system over the cluster, as CephFS builds one: a metadata server (MDS) keeps
//! the namespace (directories, inodes, a journal) in RADOS objects of a metadata pool and
//! answers clients' metadata requests; clients mount it through FUSE and read and write file
//! data straight on the OSDs, striped over objects of a data pool.
#![deny(clippy::cast_possible_truncation)]

pub mod active;
pub mod backing;
pub mod data;
pub mod dirlease;
pub mod error;
pub mod evict;
pub mod full;
pub mod gather;
pub mod holds;
pub mod journal;
pub mod kernel;
pub mod layout;
pub mod link;
pub mod locks;
pub mod mds;
pub mod mount;
pub mod namespace;
pub mod opens;
pub mod outbox;
pub mod readahead;
pub mod replay;
pub mod space;
pub mod status;

pub use error::FsError;
