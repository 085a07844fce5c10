//! Integration tests of CRUSH placement, one binary: each module is one former test file,
//! linked once instead of once per file.

mod crushtool_crosscheck;
mod text_errors;
mod vectors;
