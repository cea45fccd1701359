//! Observability: logging set-up, the metrics registry, request spans and their OTLP export.

pub mod logging;
pub mod memory;
pub mod metrics;
pub mod otlp;
pub mod spans;

pub use metrics::Metrics;
