//! libFuzzer entry of the `cache_superblock` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("cache_superblock", data);
});
