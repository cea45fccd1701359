//! A Redis that requires a password: the sidecar reads it from the environment variable the
//! configuration names (`state.redis.passwordEnv`) and shares state through it; a variable
//! that is not set stops `serve` at start with an error naming the setting. (One test in its
//! own binary: it sets a process environment variable.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use std::time::Duration;
use support::redis::Redis;
use support::stack::{header, Stack};

fn policy(url: &str, variable: &str) -> String {
    format!(
        "version: auth-test\n\
         state: {{backend: redis, redis: {{url: \"{url}\", keyPrefix: auth, passwordEnv: {variable}}}}}\n\
         models: [{{name: smollm2-135m, providerModel: smollm2-135m}}]\n\
         identities: [{{name: mom/auto, defaultModel: smollm2-135m}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_password_comes_from_the_named_environment_variable() {
    std::env::set_var("MOM_TEST_REDIS_PASSWORD", "correct horse");
    let redis = Redis::start_with_password("correct horse");

    // Unset: serve refuses to start, naming the setting and the variable.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, policy(&redis.url(), "MOM_TEST_REDIS_UNSET")).unwrap();
    let refused = mom_router::app::start(mom_router::app::ServeOptions {
        source: mom_router::config::Source::File(config),
        lock: None,
        grpc_listen: Some("127.0.0.1:0".to_owned()),
        admin_listen: Some("127.0.0.1:0".to_owned()),
        reload_interval: Duration::from_secs(1),
        drain: mom_router::app::Drain {
            grace: Duration::ZERO,
            limit: Duration::from_secs(1),
        },
    })
    .await;
    let error = refused
        .err()
        .expect("serve must not start without its password")
        .to_string();
    assert!(
        error.contains("state.redis.passwordEnv") && error.contains("MOM_TEST_REDIS_UNSET"),
        "{error}"
    );

    // Set: a forwarded request's run reaches Redis, written with that password.
    let stack = Stack::start_with_config(&policy(&redis.url(), "MOM_TEST_REDIS_PASSWORD")).await;
    let response = stack.chat(&support::stack::ask("hello"), "auth").await;
    assert_eq!(response.status(), 200);
    let run_id = header(&response, "x-mom-run-id");
    let url = format!("redis://:correct%20horse@127.0.0.1:{}", redis.port);
    let mut connection = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let key = format!("auth:run:{run_id}");
    let found = support::eventually(Duration::from_secs(5), async || {
        let exists: bool = redis::cmd("EXISTS").arg(&key).query(&mut connection).ok()?;
        exists.then_some(())
    })
    .await;
    assert!(
        found.is_some(),
        "the run was not written to the password-protected Redis"
    );
}
