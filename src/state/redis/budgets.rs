//! Tenants' budgets shared by replicas, under the prefix `P`:
//! - `P:budget:KEY`: a hash `{l: level, t: ms}`, a token bucket as Redis's clock last refilled
//!   it, expiring two windows after its last draw (a full bucket needs no key);
//! - `P:inflight:KEY`: the requests in flight under a concurrency limit, expiring when no request
//!   started for [`INFLIGHT_TTL`] (so a replica that died holding slots frees them).
//!
//! Admission is one Lua script, one round trip: every bucket refilled by Redis's own clock (one
//! clock for every replica), checked, and only if all fit, drawn; every concurrency count
//! checked and incremented. Corrections and releases go through the write queue, off the
//! request path.

use super::RedisTier;
use crate::state::budgets::{Draw, Level, Refused};
use std::sync::LazyLock;
use std::time::Duration;

/// A count of requests in flight outlives its last start by this much at most.
pub(super) const INFLIGHT_TTL: Duration = Duration::from_secs(600);

/// KEYS: the limits' keys; ARGV: per key its capacity, window in ms (0 for a count in flight)
/// and need, then the in-flight TTL in ms. Returns `{1, level, reset_ms, ...}` when admitted, or
/// `{0, index, retry_ms}` (retry -1: never) for the first draw that does not fit.
const ADMIT: &str = r"
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local levels = {}
for i = 1, #KEYS do
  local cap = tonumber(ARGV[3 * i - 2])
  local win = tonumber(ARGV[3 * i - 1])
  local need = tonumber(ARGV[3 * i])
  if win > 0 then
    if need > cap then return {0, i - 1, -1} end
    local saved = redis.call('HMGET', KEYS[i], 'l', 't')
    local level = tonumber(saved[1]) or cap
    local at = tonumber(saved[2]) or now
    level = math.min(cap, level + math.max(0, now - at) * cap / win)
    local target = need
    if need <= 0 then target = cap * 1e-6 end
    if level < target then
      return {0, i - 1, math.ceil((target - level) * win / cap)}
    end
    levels[i] = level
  else
    local held = tonumber(redis.call('GET', KEYS[i]) or '0')
    if held + 1 > cap then return {0, i - 1, 1000} end
    levels[i] = held
  end
end
local out = {1}
local ttl = tonumber(ARGV[3 * #KEYS + 1])
for i = 1, #KEYS do
  local cap = tonumber(ARGV[3 * i - 2])
  local win = tonumber(ARGV[3 * i - 1])
  local need = tonumber(ARGV[3 * i])
  if win > 0 then
    local level = levels[i] - need
    redis.call('HSET', KEYS[i], 'l', tostring(level), 't', tostring(now))
    redis.call('PEXPIRE', KEYS[i], 2 * win)
    table.insert(out, tostring(math.max(0, level)))
    table.insert(out, tostring(math.ceil((cap - level) * win / cap)))
  else
    local held = redis.call('INCR', KEYS[i])
    redis.call('PEXPIRE', KEYS[i], ttl)
    table.insert(out, tostring(math.max(0, cap - held)))
    table.insert(out, '0')
  end
end
return out
";

/// KEYS[1]: a bucket; ARGV: capacity, window in ms, delta. Refills it, then adds `delta` (at most
/// to capacity).
const ADJUST: &str = r"
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local cap = tonumber(ARGV[1])
local win = tonumber(ARGV[2])
local saved = redis.call('HMGET', KEYS[1], 'l', 't')
local level = tonumber(saved[1]) or cap
local at = tonumber(saved[2]) or now
level = math.min(cap, level + math.max(0, now - at) * cap / win + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'l', tostring(level), 't', tostring(now))
redis.call('PEXPIRE', KEYS[1], 2 * win)
return 1
";

/// KEYS[1]: a bucket; ARGV: capacity, window in ms. Its level now, refilled, without a draw.
const PEEK: &str = r"
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local cap = tonumber(ARGV[1])
local saved = redis.call('HMGET', KEYS[1], 'l', 't')
local level = tonumber(saved[1]) or cap
local at = tonumber(saved[2]) or now
return tostring(math.min(cap, level + math.max(0, now - at) * cap / tonumber(ARGV[2])))
";

/// Ends one request in flight, never below zero (the count may have expired meanwhile).
const RELEASE: &str = r"
for i = 1, #KEYS do
  local held = tonumber(redis.call('GET', KEYS[i]) or '0')
  if held > 0 then redis.call('DECR', KEYS[i]) end
end
return 1
";

static ADMIT_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ADMIT));
static ADJUST_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ADJUST));
static RELEASE_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE));
static PEEK_SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PEEK));

/// A Redis reply value as a number (the script returns levels as strings, counts as integers).
fn number(value: &redis::Value) -> Option<f64> {
    match value {
        redis::Value::Int(n) => Some(*n as f64),
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        redis::Value::SimpleString(text) => text.parse().ok(),
        _ => None,
    }
}

impl RedisTier {
    fn budget_key(&self, draw: &Draw<'_>) -> String {
        match draw.window {
            Some(_) => self.key(&format!("budget:{}", draw.key)),
            None => self.key(&format!("inflight:{}", draw.key)),
        }
    }

    /// Runs the admission script: `Ok(Ok(levels))` admitted, `Ok(Err(refused))` refused, `Err`
    /// when Redis did not answer in time.
    pub(in crate::state) async fn admit(
        &self,
        draws: &[Draw<'_>],
    ) -> Result<Result<Vec<Level>, Refused>, ()> {
        let mut invocation = ADMIT_SCRIPT.prepare_invoke();
        for draw in draws {
            let window = draw.window.map_or(0, |w| w.as_millis().max(1) as u64);
            invocation
                .key(self.budget_key(draw))
                .arg(draw.capacity)
                .arg(window)
                .arg(draw.need);
        }
        invocation.arg(INFLIGHT_TTL.as_millis() as u64);
        let mut connection = self.connection.clone();
        let call = invocation.invoke_async::<Vec<redis::Value>>(&mut connection);
        let reply = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(reply)) => reply,
            _ => {
                self.fell_back("budget");
                return Err(());
            }
        };
        let numbers: Vec<f64> = reply.iter().filter_map(number).collect();
        match numbers.as_slice() {
            [admitted, rest @ ..] if *admitted == 1.0 && rest.len() == 2 * draws.len() => {
                Ok(Ok(rest
                    .chunks(2)
                    .map(|pair| Level {
                        remaining: pair[0],
                        reset: Duration::from_millis(pair[1].max(0.0) as u64),
                    })
                    .collect()))
            }
            [_, index, retry] => Ok(Err(Refused {
                index: *index as usize,
                retry_after: (*retry >= 0.0).then(|| Duration::from_millis(*retry as u64)),
            })),
            _ => {
                self.fell_back("budget");
                Err(())
            }
        }
    }

    /// Adds `delta` to a shared bucket.
    pub(super) async fn adjust_budget(
        &self,
        key: &str,
        capacity: f64,
        window: Duration,
        delta: f64,
    ) -> redis::RedisResult<()> {
        let mut connection = self.connection.clone();
        ADJUST_SCRIPT
            .key(self.key(&format!("budget:{key}")))
            .arg(capacity)
            .arg(window.as_millis().max(1) as u64)
            .arg(delta)
            .invoke_async::<()>(&mut connection)
            .await
    }

    /// Ends a request in flight under each of the concurrency limits `keys`.
    pub(super) async fn release(&self, keys: &[String]) -> redis::RedisResult<()> {
        let mut invocation = RELEASE_SCRIPT.prepare_invoke();
        for key in keys {
            invocation.key(self.key(&format!("inflight:{key}")));
        }
        let mut connection = self.connection.clone();
        invocation.invoke_async::<()>(&mut connection).await
    }

    /// A shared bucket's level now, or requests in flight under a concurrency limit; `None`
    /// when Redis did not answer in time.
    pub(in crate::state) async fn peek(
        &self,
        key: &str,
        capacity: f64,
        window: Option<Duration>,
    ) -> Option<f64> {
        let mut connection = self.connection.clone();
        let read = async {
            match window {
                Some(window) => {
                    PEEK_SCRIPT
                        .key(self.key(&format!("budget:{key}")))
                        .arg(capacity)
                        .arg(window.as_millis().max(1) as u64)
                        .invoke_async::<redis::Value>(&mut connection)
                        .await
                }
                None => {
                    redis::cmd("GET")
                        .arg(self.key(&format!("inflight:{key}")))
                        .query_async::<redis::Value>(&mut connection)
                        .await
                }
            }
        };
        match tokio::time::timeout(self.timeout, read).await {
            Ok(Ok(redis::Value::Nil)) => Some(0.0),
            Ok(Ok(value)) => number(&value),
            _ => {
                self.fell_back("budget");
                None
            }
        }
    }

    /// The queue's sender, for a release made when a request ends.
    pub(in crate::state) fn writer(&self) -> tokio::sync::mpsc::Sender<super::Write> {
        self.writes.clone()
    }
}
