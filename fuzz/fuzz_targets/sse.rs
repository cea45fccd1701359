//! Any bytes as an upstream event stream, cut into chunks by the input's first byte: the PII
//! restorer, the usage scanner and the assembler never panic, and the restorer gives the same
//! output for every chunking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mom_router::engine::answer::pii_mask::{Masker, SseRestorer};
use mom_router::llm::{sse, UsageScanner};
use serde_json::json;
use std::sync::{Arc, OnceLock};

fn masker() -> Arc<Masker> {
    static MASKER: OnceLock<Arc<Masker>> = OnceLock::new();
    MASKER
        .get_or_init(|| {
            let mut object = json!({"messages": [{"role": "user",
                "content": "mail jane.doe@example.com or +44 20 7946 0958"}]});
            let map = object.as_object_mut().unwrap_or_else(|| unreachable!());
            Arc::new(Masker::mask(map, |_| true))
        })
        .clone()
}

fn restored(body: &[u8], size: usize) -> Vec<u8> {
    let mut restorer = SseRestorer::new(masker());
    let mut out = Vec::new();
    for chunk in body.chunks(size.max(1)) {
        out.extend(restorer.push(chunk));
    }
    out.extend(restorer.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = restored(body, body.len());
    assert_eq!(restored(body, usize::from(cut)), whole);
    let mut usage = UsageScanner::new(true);
    for chunk in body.chunks(usize::from(cut).max(1)) {
        usage.push(chunk);
    }
    let _ = usage.finish();
    if let Some(completion) = sse::assemble(body) {
        let _ = sse::events(&completion);
    }
    let _ = masker().restore_body(body);
});
