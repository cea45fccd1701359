//! Layers import only downward (ARCHITECTURE.md §4): a module may name `crate::x` only when `x`
//! sits in a lower layer. `decision/` stays pure: no async runtime, no backend.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use std::path::Path;

/// Top-level modules by layer, top first. A module may import only from later layers.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["app"],
    &["extproc", "admin", "train", "eval"],
    &["engine"],
    &["records"],
    &["lock"],
    &["config"],
    &["state"],
    &["signals", "decision", "selection"],
    &["inference"],
    // The wire formats: OpenAI chat (llm) and the protocols translated to and from it.
    &["llm", "protocol"],
    &["observability"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn crate_references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.push(name);
        }
    }
    found
}

#[test]
fn every_module_imports_only_from_lower_layers() {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs");
        let Some(own) = layer_of(module) else {
            assert!(
                ["lib", "main"].contains(&module),
                "{} is not assigned a layer",
                relative.display()
            );
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for target in crate_references(&text) {
            let target_layer = layer_of(&target).unwrap_or_else(|| {
                panic!("{}: unknown module crate::{target}", relative.display())
            });
            if target != module && target_layer <= own {
                violations.push(format!("{} imports crate::{target}", relative.display()));
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} imports scanned");
    assert!(
        violations.is_empty(),
        "upward or sideways imports:\n{}",
        violations.join("\n")
    );
}

/// The names a file takes from `crate::engine::` (or `engine::`): `engine::{a, b::c}` gives
/// `a` and `b`, `engine::x::y` gives `x`.
fn engine_names(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (i, _) in text.match_indices("engine::") {
        let rest = &text[i + "engine::".len()..];
        match rest.strip_prefix('{') {
            Some(list) => {
                let list = &list[..list.find('}').unwrap_or(list.len())];
                names.extend(list.split(',').map(ident).filter(|n| !n.is_empty()));
            }
            None => names.push(ident(rest)),
        }
    }
    names
}

/// What `src/engine/mod.rs` re-exports from each folder: `pub use request::x::{A, B as C}`
/// makes `engine::A` and `engine::C` names of `request`.
fn reexports(folders: &[&str]) -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(root().join("src/engine/mod.rs")).unwrap();
    let mut found = Vec::new();
    for line in text.lines() {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some(rank) = folders
            .iter()
            .position(|f| path.starts_with(&format!("{f}::")))
        else {
            continue;
        };
        let tail = path.trim_end_matches(';');
        let list = match (tail.find('{'), tail.rfind("::")) {
            (Some(open), _) => tail[open + 1..].trim_end_matches('}').to_owned(),
            (None, Some(last)) => tail[last + 2..].to_owned(),
            (None, None) => continue,
        };
        for item in list.split(',') {
            let name = item.rsplit(" as ").next().unwrap_or(item).trim();
            if !name.is_empty() {
                found.push((name.to_owned(), rank));
            }
        }
    }
    found
}

/// Inside the engine the folders layer too: an exchange runs the request pipeline and settles
/// its response; the request pipeline runs loopers, and both bind
/// an answer's obligations; what settles an answer never reaches back into how it was asked
/// for, neither by a folder's path nor by a name `engine/mod.rs` re-exports from it.
#[test]
fn engine_folders_import_only_downward() {
    const FOLDERS: &[&str] = &["exchange", "request", "loopers", "answer"];
    let exported = reexports(FOLDERS);
    assert!(
        exported.iter().any(|(name, _)| name == "answer_matches"),
        "re-exports not read: {exported:?}"
    );
    let mut checked = 0;
    let mut violations = Vec::new();
    for (rank, folder) in FOLDERS.iter().enumerate() {
        let mut files = Vec::new();
        rust_files(&root().join("src/engine").join(folder), &mut files);
        assert!(!files.is_empty(), "src/engine/{folder} is empty");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for name in engine_names(&text) {
                let higher = FOLDERS[..rank].iter().position(|f| *f == name).or_else(|| {
                    exported
                        .iter()
                        .find(|(n, r)| *n == name && *r < rank)
                        .map(|(_, r)| *r)
                });
                if let Some(higher) = higher {
                    violations.push(format!(
                        "{} takes engine::{name} from {}",
                        file.display(),
                        FOLDERS[higher]
                    ));
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 15, "only {checked} engine files scanned");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn decisions_stay_free_of_the_async_runtime_and_backends() {
    let dir = root().join("src/decision");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for forbidden in ["tokio", "tonic", "envoy_types", "crate::"] {
            assert!(
                !text.contains(forbidden),
                "{} mentions {forbidden}",
                file.display()
            );
        }
    }
}

/// The repository root, read when the test runs (a shared build must not carry the path of
/// the checkout that compiled it).
fn root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
