//! libFuzzer entry of the `mon_map` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("mon_map", data);
});
