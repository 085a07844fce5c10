//! Integration tests of block images against an in-process cluster (a monitor and three
//! OSDs on loopback, file-backed stores), one binary: the exclusive lock, snapshots and
//! clones, each checked byte for byte against a model of what every view should read, and
//! the NBD server's handling of its connections.

#[path = "../../../client/tests/suite/common/mod.rs"]
mod common;

mod clones;
mod locks;
mod model;
mod nbd;
mod requests;
mod snapshots;
