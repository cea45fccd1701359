//! Backends' own queue metrics: the exporters whose `/metrics` say how many requests a backend
//! is running and holding. `serve` reads them for every model that declares `queueMetrics` and
//! reports the sum to the pool.

use serde::Deserialize;

/// The exporter a backend's `/metrics` follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueFormat {
    /// llama.cpp's server: `llamacpp:requests_processing` and `llamacpp:requests_deferred`.
    Llamacpp,
    /// vLLM: `vllm:num_requests_running` and `vllm:num_requests_waiting`.
    Vllm,
}

impl QueueFormat {
    /// The gauges whose values add up to the requests the backend holds.
    fn gauges(self) -> [&'static str; 2] {
        match self {
            Self::Llamacpp => ["llamacpp:requests_processing", "llamacpp:requests_deferred"],
            Self::Vllm => ["vllm:num_requests_running", "vllm:num_requests_waiting"],
        }
    }

    /// Requests running and waiting in a Prometheus text exposition (every label set of the
    /// gauges summed); `None` when neither gauge is there.
    pub fn queued(self, text: &str) -> Option<u32> {
        let mut total = 0.0;
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = name.split('{').next().unwrap_or_default().trim();
            if self.gauges().contains(&name) {
                if let Ok(value) = value.trim().parse::<f64>() {
                    total += value.max(0.0);
                    seen = true;
                }
            }
        }
        seen.then(|| total.round().min(f64::from(u32::MAX)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_read_from_each_exporters_gauges() {
        let llama = "# HELP llamacpp:requests_processing Number of requests processing.\n\
                     # TYPE llamacpp:requests_processing gauge\n\
                     llamacpp:requests_processing 2\n\
                     llamacpp:requests_deferred 5\n\
                     llamacpp:prompt_tokens_total 1234\n";
        assert_eq!(QueueFormat::Llamacpp.queued(llama), Some(7));
        let vllm = "vllm:num_requests_running{model_name=\"a\"} 3.0\n\
                    vllm:num_requests_waiting{model_name=\"a\"} 1.0\n\
                    vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.4\n";
        assert_eq!(QueueFormat::Vllm.queued(vllm), Some(4));
        assert_eq!(QueueFormat::Vllm.queued(llama), None);
        assert_eq!(QueueFormat::Llamacpp.queued("garbage\n{}"), None);
    }
}
