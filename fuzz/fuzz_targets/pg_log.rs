//! libFuzzer entry of the `pg_log` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("pg_log", data);
});
