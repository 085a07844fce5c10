//! Fuzzes the `crushtool --dump` JSON reader.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        if let Ok(map) = cairn_crush::json::from_json(src) {
            let reweights = map.default_reweights();
            for rule in map.rules.keys() {
                let _ = map.map_x(*rule, 1, 3, &reweights);
            }
        }
    }
});
