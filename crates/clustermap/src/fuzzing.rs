//! Internal encodings exposed to the fuzz targets (`crates/fuzz`), behind the `fuzzing`
//! feature.

/// Wraps `payload` in the envelope (magic, version, length, crc32c) that maps and
/// incrementals travel and are stored in, so a fuzzer's bytes reach the JSON inside.
pub fn envelope(payload: &[u8]) -> Vec<u8> {
    crate::cluster_map::envelope(payload)
}
