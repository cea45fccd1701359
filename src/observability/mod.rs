//! Observability: logging set-up and the metrics registry.

pub mod logging;
pub mod metrics;

pub use metrics::Metrics;
