//! Any bytes as a bundle archive through `import`: refused with an error and nothing left
//! behind, or unpacked into the new folder only (never outside it) and verified.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mom_router::config::bundle;

fuzz_target!(|archive: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else { return };
    let path = dir.path().join("in.tar");
    if std::fs::write(&path, archive).is_err() {
        return;
    }
    let out = dir.path().join("out");
    match bundle::import(&path, &out) {
        Ok(manifest) => assert!(bundle::open(&out).is_ok_and(|b| b.manifest == manifest)),
        Err(_) => assert!(!out.exists(), "a refused import left files behind"),
    }
    // Nothing was written beside the archive and the output folder.
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        entries.iter().all(|name| name == "in.tar" || name == "out"),
        "{entries:?}"
    );
});
