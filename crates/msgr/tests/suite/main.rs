//! Integration tests of the messenger, one binary: each module is one former test file,
//! linked once instead of once per file.

mod auth;
mod decoder_props;
mod lifetimes;
mod loopback;
mod proxy;
