//! libFuzzer entry of the `store_codec` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("store_codec", data);
});
