//! The exchange driven in its own terms, with no proxy and no wire format: messages in, steps
//! out. A chat request is forwarded and its response passed on with the `x-mom-*` headers; a
//! refusal is answered on the immediate path; a proxy that adds the headers itself skips the
//! response phases and reads each from the outcome, as `envoy/quickstart.yaml` lists them.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use mom_router::config::compile_str;
use mom_router::engine::exchange::{Body, Exchange, Field, Head, Message, Outcome, Proxy, Step};
use mom_router::engine::{Headers, ReplyCode, Services};
use mom_router::observability::Metrics;
use std::sync::Arc;

const POLICY: &str = include_str!("fixtures/rule-signals.yaml");

fn exchange(proxy: Proxy) -> Exchange {
    let snapshot = compile_str(POLICY).unwrap();
    let services = Services::offline(&snapshot);
    Exchange::new(Arc::new(snapshot), Arc::new(Metrics::new()), services).with_proxy(proxy)
}

fn head(pairs: &[(&str, &str)], end_of_stream: bool) -> Message {
    let headers = Headers::new(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Message::RequestHeaders(Head {
        headers,
        end_of_stream,
        run_id: None,
    })
}

fn chat_headers() -> Message {
    head(
        &[
            (":method", "POST"),
            (":path", "/v1/chat/completions"),
            ("content-type", "application/json"),
        ],
        false,
    )
}

fn chat_body(text: &str) -> Message {
    let body =
        serde_json::json!({"model": "mom/auto", "messages": [{"role": "user", "content": text}]});
    Message::RequestBody(Body {
        bytes: body.to_string().into_bytes(),
        end_of_stream: true,
    })
}

/// The response headers of a 200 answer.
fn ok_response() -> Message {
    Message::ResponseHeaders(Head {
        headers: Headers::new([(":status".to_owned(), "200".to_owned())]),
        end_of_stream: false,
        run_id: None,
    })
}

fn text<'a>(outcome: &'a Outcome, name: &str) -> Option<&'a str> {
    outcome.fields().find_map(|(n, field)| match field {
        Field::Text(value) if n == name => Some(value),
        _ => None,
    })
}

#[tokio::test]
async fn a_chat_request_is_forwarded_and_its_response_passed_on_with_the_decision() {
    let mut exchange = exchange(Proxy::default());
    let step = exchange.handle(chat_headers()).await;
    assert!(
        matches!(
            step,
            Step::PassRequestHeaders {
                watch_response: true
            }
        ),
        "{step:?}"
    );
    let step = exchange.handle(chat_body("write a python function")).await;
    let Step::Forward { forward, outcome } = step else {
        panic!("not forwarded: {step:?}");
    };
    assert_eq!(&*forward.model, "coder");
    let sent: serde_json::Value = serde_json::from_slice(&forward.body).unwrap();
    assert_eq!(sent["model"], "c", "the body names the provider model");
    assert_eq!(text(&outcome, "decision"), Some("code"));
    assert_eq!(text(&outcome, "response_path"), Some("upstream"));
    let run_id = text(&outcome, "run_id").unwrap();
    assert_eq!(run_id.len(), 32);
    assert!(
        !outcome.fields().any(|(name, _)| name == "headers"),
        "a watched response gets its headers in the response phase"
    );

    let response = ok_response();
    let Step::PassResponseHeaders { set, .. } = exchange.handle(response).await else {
        panic!("response headers not passed on");
    };
    let header = |name: &str| {
        set.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("x-mom-model"), Some("coder"));
    assert_eq!(header("x-mom-response-path"), Some("upstream"));
    assert_eq!(header("x-mom-run-id"), Some(run_id));
    let chunk = Message::ResponseBody(Body {
        bytes: br#"{"choices":[]}"#.to_vec(),
        end_of_stream: true,
    });
    let step = exchange.handle(chunk).await;
    assert!(
        matches!(&step, Step::PassResponseBody { body: None, .. }),
        "{step:?}"
    );
    assert!(exchange.resume().await.is_none(), "nothing was held");
}

#[tokio::test]
async fn a_refusal_is_answered_now_on_the_immediate_path() {
    let mut exchange = exchange(Proxy::default());
    let wrong_method = head(
        &[(":method", "GET"), (":path", "/v1/chat/completions")],
        true,
    );
    let Step::Reply {
        reply,
        headers,
        outcome,
    } = exchange.handle(wrong_method).await
    else {
        panic!("not refused");
    };
    assert_eq!(reply.status, 405);
    assert_ne!(reply.code, ReplyCode::Answer);
    let error: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("GET"));
    assert!(headers
        .iter()
        .any(|(name, value)| *name == "x-mom-response-path" && value == "immediate"));
    assert_eq!(text(&outcome, "response_path"), Some("immediate"));
    assert_eq!(text(&outcome, "error"), Some(reply.code.label()));
}

/// The `x-mom-*` response headers `envoy/quickstart.yaml` adds from the `mom_router` metadata,
/// each with the field it reads.
fn headers_envoy_adds() -> Vec<(String, String)> {
    fn walk(value: &serde_yaml::Value, found: &mut Vec<(String, String)>) {
        match value {
            serde_yaml::Value::Mapping(map) => {
                let key = value["header"]["key"].as_str();
                let read = value["header"]["value"].as_str();
                let field = read.and_then(|v| v.strip_prefix("%DYNAMIC_METADATA(mom_router:"));
                if let (Some(key), Some(field)) = (key, field.and_then(|f| f.strip_suffix(")%"))) {
                    let pair = (key.to_owned(), field.to_owned());
                    if !found.contains(&pair) {
                        found.push(pair);
                    }
                }
                map.values().for_each(|v| walk(v, found));
            }
            serde_yaml::Value::Sequence(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let config: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../envoy/quickstart.yaml")).unwrap();
    let mut found = Vec::new();
    walk(&config, &mut found);
    found
}

#[tokio::test]
async fn a_proxy_that_adds_the_headers_skips_the_response_phases_and_reads_each_from_the_outcome() {
    let added = headers_envoy_adds();
    assert_eq!(added.len(), 14, "{added:?}");

    // The headers mom-router sets itself when it watches the response.
    let mut watched = exchange(Proxy::default());
    watched.handle(chat_headers()).await;
    watched.handle(chat_body("hello there")).await;
    let response = ok_response();
    let Step::PassResponseHeaders { set, .. } = watched.handle(response).await else {
        panic!("response headers not passed on");
    };

    let mut exchange = exchange(Proxy {
        adds_headers: true,
        ..Proxy::default()
    });
    let step = exchange.handle(chat_headers()).await;
    assert!(
        matches!(
            step,
            Step::PassRequestHeaders {
                watch_response: false
            }
        ),
        "{step:?}"
    );
    let Step::Forward { outcome, .. } = exchange.handle(chat_body("hello there")).await else {
        panic!("not forwarded");
    };
    assert_eq!(text(&outcome, "model"), Some("small"));
    for (name, _) in set.iter().filter(|(name, _)| name.starts_with("x-mom-")) {
        assert!(
            added.iter().any(|(header, _)| header == name),
            "the proxy adds {name} too"
        );
    }
    for (header, field) in &added {
        let own = set
            .iter()
            .find(|(name, _)| name == header)
            .map(|(_, v)| v.as_str());
        let read = text(&outcome, field);
        if header == "x-mom-run-id" {
            // Each request has its own.
            assert_eq!(read.map(str::len), Some(32), "{outcome:?}");
            assert_eq!(own.map(str::len), Some(32));
        } else {
            assert_eq!(read, own, "{header} reads {field}: {outcome:?}");
        }
    }
    assert!(text(&outcome, "confidence_label").is_some(), "{outcome:?}");
}
