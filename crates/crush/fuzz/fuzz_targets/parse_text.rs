//! Fuzzes the crushtool text parser: any input must give Ok or a typed error, and anything
//! accepted must evaluate its rules without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        if let Ok(map) = cairn_crush::text::parse(src) {
            let reweights = map.default_reweights();
            for rule in map.rules.keys() {
                let _ = map.map_x(*rule, 1, 3, &reweights);
            }
        }
    }
});
