//! libFuzzer entry of the `s3_entry` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("s3_entry", data);
});
