//! Integration tests of block devices, one binary: each module is one former test file,
//! linked once instead of once per file.

mod aio;
mod profiles;
