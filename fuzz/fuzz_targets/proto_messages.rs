//! libFuzzer entry of the `proto_messages` target (see `cairn_fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairn_fuzz::run("proto_messages", data);
});
