//! libFuzzer entry of the `msgr_hello` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("msgr_hello", data);
});
