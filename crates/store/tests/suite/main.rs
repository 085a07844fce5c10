//! Integration tests of the object store, one binary: each module is one former test file,
//! linked once instead of once per file.

mod basic;
mod common;
mod corruption;
mod crash;
mod deferred;
mod early;
mod extents;
mod model;
mod pipeline;
mod reads;
mod shutdown;
mod wal;
