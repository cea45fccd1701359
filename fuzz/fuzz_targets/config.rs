//! Any text as a configuration: compiling it gives a snapshot or errors naming paths, never a
//! panic (paths it names resolve under a folder that holds nothing).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Err(errors) = mom_router::config::compile_in(text, std::path::Path::new("/nonexistent"))
    {
        assert!(!errors.to_string().is_empty());
    }
});
