//! One fixture per configuration failure: each file in `tests/fixtures/bad-config/` starts with
//! `# expect: <error line>` comments, and `check-config` must print exactly those lines.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use std::process::Command;

fn expectations(text: &str) -> (Vec<String>, Vec<String>) {
    let mut exact = Vec::new();
    let mut prefixes = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# expect: ") {
            exact.push(rest.to_owned());
        } else if let Some(rest) = line.strip_prefix("# expect-prefix: ") {
            prefixes.push(rest.to_owned());
        }
    }
    (exact, prefixes)
}

#[test]
fn every_bad_config_fixture_fails_with_its_expected_errors() {
    let dir = root().join("tests/fixtures/bad-config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let (exact, prefixes) = expectations(&text);
        assert!(
            !exact.is_empty() || !prefixes.is_empty(),
            "{} has no # expect line",
            path.display()
        );
        let errors = mom_router::config::load(&path).unwrap_err().0;
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        for expected in &exact {
            assert!(
                lines.contains(expected),
                "{}: expected {expected:?} in {lines:#?}",
                path.display()
            );
        }
        for prefix in &prefixes {
            assert!(
                lines.iter().any(|l| l.starts_with(prefix.as_str())),
                "{}: expected a line starting {prefix:?} in {lines:#?}",
                path.display()
            );
        }
        assert_eq!(
            lines.len(),
            exact.len() + prefixes.len(),
            "{}: unexpected extra errors {lines:#?}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} fixtures found");
}

#[test]
fn check_config_exits_non_zero_and_prints_every_error() {
    let fixture = root().join("tests/fixtures/bad-config/many-errors.yaml");
    let output = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .arg("check-config")
        .arg(&fixture)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("4 error(s)"), "{stderr}");
    for line in expectations(&std::fs::read_to_string(&fixture).unwrap()).0 {
        assert!(stderr.contains(&line), "missing {line:?} in {stderr}");
    }
}

#[test]
fn check_config_accepts_every_shipped_example() {
    let root = root();
    let examples = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("config.yaml"));
    let benches = std::fs::read_dir(root.join("benches"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"));
    let mut checked = 0;
    for path in examples.chain(benches) {
        if !path.exists() {
            continue;
        }
        let output = Command::new(env!("CARGO_BIN_EXE_mom-router"))
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(String::from_utf8_lossy(&output.stdout).contains(": ok, version "));
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} shipped configurations found");
}

/// The repository root, read when the test runs (a shared build must not carry the path of
/// the checkout that compiled it).
fn root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
