//! Fuzz targets for every decoder that takes bytes from a network or a disk: the messenger's
//! frames and handshake, the wire messages, the monitor's maps and incrementals, the store's
//! codec and write-ahead log, the cache's superblock and line entries, the PG log, and the S3
//! gateway's SigV4, aws-chunked and index entries.
//!
//! Each target is a plain function of bytes, so the same code runs under libFuzzer
//! (`fuzz/`, coverage-guided, `cargo +nightly fuzz run NAME`) and in this crate's tests (the
//! corpus in `fuzz/corpus/` plus a bounded run of seeded mutations, on stable). Where a format
//! is sealed by a magic number and a checksum, the target also wraps the fuzzer's bytes in a
//! valid seal, so they reach the parser behind it instead of failing the checksum every time.
//! A target panics only when a decoder does: on malformed input every decoder must return an
//! error.

// Narrowing conversions are checked (`try_from`): a cast would silently write a wrong length
// or offset.
#![deny(clippy::cast_possible_truncation)]

pub mod cache;
pub mod mon;
pub mod msgr;
pub mod pg;
pub mod proto;
pub mod s3;
pub mod store;

/// A fuzz target: feeds one input to a decoder; panics only on a decoder bug.
pub type Target = fn(&[u8]);

/// Every target, by name (the name of its libFuzzer binary and corpus directory).
pub const TARGETS: &[(&str, Target)] = &[
    ("msgr_frame", msgr::frame),
    ("msgr_hello", msgr::hello),
    ("proto_messages", proto::messages),
    ("proto_pairs", proto::pairs_and_images),
    ("mon_map", mon::map),
    ("mon_incremental", mon::incremental),
    ("mon_messages", mon::messages),
    ("store_codec", store::codec),
    ("store_wal", store::wal),
    ("cache_superblock", cache::superblock),
    ("cache_entry", cache::entry),
    ("pg_log", pg::log),
    ("s3_sigv4", s3::sigv4),
    ("s3_chunked", s3::chunked),
    ("s3_entry", s3::entry),
];

/// Valid inputs of target `name` (empty for an unknown name): where the corpus starts.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "msgr_frame" => msgr::frame_seeds(),
        "msgr_hello" => msgr::hello_seeds(),
        "proto_messages" => proto::message_seeds(),
        "proto_pairs" => proto::pairs_seeds(),
        "mon_map" => mon::map_seeds(),
        "mon_incremental" => mon::incremental_seeds(),
        "mon_messages" => mon::message_seeds(),
        "store_codec" => store::codec_seeds(),
        "store_wal" => store::wal_seeds(),
        "cache_superblock" => cache::superblock_seeds(),
        "cache_entry" => cache::entry_seeds(),
        "pg_log" => pg::log_seeds(),
        "s3_sigv4" => s3::sigv4_seeds(),
        "s3_chunked" => s3::chunked_seeds(),
        "s3_entry" => s3::entry_seeds(),
        _ => Vec::new(),
    }
}

/// Runs target `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, target)) => {
            target(data);
            true
        }
        None => false,
    }
}

/// Splits off the first byte (a selector), 0 for empty input.
pub(crate) fn selector(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((s, rest)) => (*s, rest),
        None => (0, data),
    }
}
