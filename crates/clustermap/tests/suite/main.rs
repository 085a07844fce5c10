//! Integration tests of the cluster map, one binary: each module is one former test file,
//! linked once instead of once per file.

mod balancer;
mod osdmaptool_crosscheck;
mod osdmaptool_vectors;
