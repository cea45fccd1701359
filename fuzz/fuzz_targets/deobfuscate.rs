//! Every de-obfuscated reading of any text (base64, hex, binary, ROT13, leetspeak, escapes, …)
//! is computed without a panic and is valid UTF-8 by construction.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mom_router::signals::deobfuscate::readings;

fuzz_target!(|text: &str| {
    for (name, reading) in readings(text) {
        assert!(!name.is_empty());
        let _ = reading.len();
    }
});
