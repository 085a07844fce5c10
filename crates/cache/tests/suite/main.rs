//! Integration tests of the SSD cache, one binary: each module is one former test file,
//! linked once instead of once per file.

mod cancelled;
mod common;
mod crash;
mod data_path;
mod policies;
mod prop;
