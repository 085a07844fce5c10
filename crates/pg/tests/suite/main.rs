//! Integration tests of placement-group logic, one binary: each module is one former test file,
//! linked once instead of once per file.

mod log_index;
mod log_wire;
mod peering;
mod scrub;
