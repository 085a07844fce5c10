//! libFuzzer entry of the `store_wal` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("store_wal", data);
});
