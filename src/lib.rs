//! mom-router: an Envoy ext_proc sidecar that makes a pool of independent LLMs behave as one
//! model. Envoy hands each OpenAI request to mom-router over gRPC; mom-router extracts signals,
//! evaluates policy, picks a model, rewrites the request and lets Envoy route it.
//!
//! Layers import only downward (a test enforces it):
//! `cli`/`app` → `extproc`/`admin`/`train` → `engine` → `config` → `state` → `signals`/`decision`/`selection`
//! → `inference` → `llm` → `observability`.

pub mod admin;
pub mod app;
pub mod cli;
pub mod config;
pub mod decision;
pub mod engine;
pub mod eval;
pub mod extproc;
pub mod inference;
pub mod llm;
pub mod lock;
pub mod observability;
pub mod protocol;
pub mod records;
pub mod selection;
pub mod signals;
pub mod state;
pub mod train;
