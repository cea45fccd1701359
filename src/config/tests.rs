//! Compile-level tests: wording of errors and what a valid document compiles to. One fixture
//! per failure lives in `tests/fixtures/bad-config/`.

use super::compile_str;

const BASE: &str = r#"
version: t1
models:
  - { name: small, providerModel: small-v1 }
  - { name: large, providerModel: large-v2 }
identities:
  - { name: mom/auto, defaultModel: small }
signals:
  - { name: code, type: keyword, keywords: [python] }
decisions:
  - { name: code, rules: { signal: code }, modelRefs: [{ model: large }] }
"#;

#[test]
fn a_valid_document_compiles_with_a_content_hash_version() {
    let snapshot = compile_str(BASE).unwrap();
    assert!(snapshot.version.starts_with("t1@"));
    assert_eq!(snapshot.version.len(), "t1@".len() + 12);
    let identity = snapshot.identity("mom/auto").unwrap();
    assert_eq!(identity.signals, vec![0]);
    assert_eq!(identity.decisions, vec![0]);
    assert_eq!(snapshot.model_index("large"), Some(1));
    assert_eq!(snapshot.server.max_body_bytes, 1024 * 1024);
}

#[test]
fn every_error_is_reported_at_once_with_its_path() {
    let text = BASE
        .replace(
            "modelRefs: [{ model: large }]",
            "modelRefs: [{ model: qwen-7b }]",
        )
        .replace("defaultModel: small", "defaultModel: tiny")
        .replace("keywords: [python]", "keywords: [python], colour: red");
    let errors = compile_str(&text).unwrap_err().0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("signals[0]: unknown field `colour`")),
        "{lines:?}"
    );
    assert!(lines.contains(
        &"decisions[0].modelRefs[0].model: unknown model \"qwen-7b\"; known models: small, large"
            .to_owned()
    ), "{lines:?}");
    assert!(
        lines.contains(
            &"identities[0].defaultModel: unknown model \"tiny\"; known models: small, large"
                .to_owned()
        ),
        "{lines:?}"
    );
}

#[test]
fn the_same_text_always_has_the_same_version_and_any_change_moves_it() {
    let a = compile_str(BASE).unwrap().version;
    let b = compile_str(BASE).unwrap().version;
    let c = compile_str(&BASE.replace("python", "rust"))
        .unwrap()
        .version;
    assert_eq!(a, b);
    assert_ne!(a, c);
}
