//! Integration tests of placement-group logic, one binary: each module is one former test file,
//! linked once instead of once per file.

mod acting;
mod log_index;
mod log_wire;
mod machine;
mod peering;
mod scrub;
