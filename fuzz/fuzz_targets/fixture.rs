//! The policy and runtime the request-phase targets share: a rule-only policy with every kind of
//! signal that needs no model, compiled once, and a current-thread runtime to run it on.

use mom_router::config::{compile_str, Snapshot};
use mom_router::engine::Services;
use std::sync::OnceLock;

const POLICY: &str = include_str!("../../tests/fixtures/rule-signals.yaml");

/// The compiled policy, its offline services and a runtime, built on first use.
pub fn fixture() -> &'static (Snapshot, Services, tokio::runtime::Runtime) {
    static FIXTURE: OnceLock<(Snapshot, Services, tokio::runtime::Runtime)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let snapshot = compile_str(POLICY).unwrap_or_else(|e| panic!("fuzz policy: {e}"));
        let services = Services::offline(&snapshot);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        (snapshot, services, runtime)
    })
}
