//! libFuzzer entry of the `mon_incremental` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("mon_incremental", data);
});
