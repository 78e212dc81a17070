//! Reading replies: commands given as words, `LOCK.INFO` and `INFO lock`
//! fields, error texts, and what a lock key stores.

use redis::{cmd, Connection, Value};

/// Runs a command given as words that must answer an integer.
pub fn int(c: &mut Connection, words: &[&str]) -> i64 {
    let mut command = redis::cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c).unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

/// Runs a command given as words; returns the raw reply or the error.
pub fn run(c: &mut Connection, words: &[&[u8]]) -> redis::RedisResult<Value> {
    let mut command = redis::cmd(std::str::from_utf8(words[0]).unwrap());
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c)
}

/// `LOCK.INFO key` as (field, value) pairs; None when nil.
pub fn lock_info(c: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    let reply: Value = redis::cmd("LOCK.INFO").arg(key).query(c).expect("LOCK.INFO");
    match reply {
        Value::Nil => None,
        Value::Array(items) => Some(
            items
                .chunks(2)
                .map(|pair| (redis::from_redis_value::<String>(&pair[0]).unwrap(), pair[1].clone()))
                .collect(),
        ),
        other => panic!("unexpected LOCK.INFO reply {other:?}"),
    }
}

/// One integer field of `LOCK.INFO key`.
pub fn info_int(c: &mut Connection, key: &str, field: &str) -> Option<i64> {
    let fields = lock_info(c, key)?;
    fields.iter().find(|(name, _)| name == field).map(|(_, v)| redis::from_redis_value(v).unwrap())
}

/// Whether anyone holds the lock at `key` now (`LOCK.INFO` counts live
/// holds; a key that is free but refused to newcomers counts 0).
pub fn is_held(c: &mut Connection, key: &str) -> bool {
    info_int(c, key, "holds").unwrap_or(0) > 0
}

/// Why `LOCK.INFO` says a free key is refused to newcomers now: its
/// `refused` code and `refused-ms`; None when it is held, or grantable.
pub fn refusal(c: &mut Connection, key: &str) -> Option<(String, i64)> {
    let fields = lock_info(c, key)?;
    let code = fields.iter().find(|(name, _)| name == "refused")?;
    let code: String = redis::from_redis_value(&code.1).unwrap();
    let left = fields
        .iter()
        .find(|(name, _)| name == "refused-ms")
        .map(|(_, v)| redis::from_redis_value(v).unwrap());
    Some((code, left.expect("refused-ms with refused")))
}

/// The `refused` code of a free key's `LOCK.INFO` (see [`refusal`]).
pub fn refused_code(c: &mut Connection, key: &str) -> Option<String> {
    refusal(c, key).map(|(code, _)| code)
}

/// One field of `INFO lock` as an integer.
pub fn info_stat(c: &mut Connection, field: &str) -> i64 {
    let text: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    let prefix = format!("lock_{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO lock has no {field}: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The error text of a reply that must be an error.
pub fn err_text(result: redis::RedisResult<Value>) -> String {
    match result {
        Err(e) => {
            let code = e.code().unwrap_or("").to_string();
            let detail = e.detail().unwrap_or("").to_string();
            format!("{code} {detail}").trim().to_string()
        }
        Ok(v) => panic!("expected an error reply, got {v:?}"),
    }
}

/// What must survive a restart, or reach a replica, exactly, for one lock.
#[derive(Debug, Clone, PartialEq)]
pub struct LockSnapshot {
    /// `LOCK.INFO` without `ttl-ms` (relative, so it shrinks between reads).
    pub info: Vec<(String, Value)>,
    /// The stored value ([`stored_bytes`]).
    pub raw: Vec<u8>,
    /// The key's native absolute expiry (`PEXPIRETIME key`, epoch ms).
    pub pexpiretime: i64,
}

impl LockSnapshot {
    fn field(&self, field: &str) -> &Value {
        let (_, v) = self
            .info
            .iter()
            .find(|(name, _)| name == field)
            .unwrap_or_else(|| panic!("LOCK.INFO has no {field}: {:?}", self.info));
        v
    }

    pub fn int(&self, field: &str) -> i64 {
        redis::from_redis_value(self.field(field)).unwrap()
    }

    pub fn text(&self, field: &str) -> String {
        redis::from_redis_value(self.field(field)).unwrap()
    }
}

/// What a lock key stores, as bytes to compare: a plain or reentrant lock's
/// string, or a group's hash fields (sorted: a hash's field order is not
/// part of what it stores), each `field=value` on its own line.
/// None when the key does not exist.
pub fn stored_bytes(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    let kind: String = cmd("TYPE").arg(key).query(c).unwrap();
    match kind.as_str() {
        "none" => return None,
        "hash" => {}
        _ => return Some(cmd("GET").arg(key).query(c).unwrap()),
    }
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = cmd("HGETALL").arg(key).query(c).unwrap();
    fields.sort();
    let mut out = Vec::new();
    for (field, value) in fields {
        out.extend_from_slice(&field);
        out.push(b'=');
        out.extend_from_slice(&value);
        out.push(b'\n');
    }
    Some(out)
}

/// LOCK.INFO, the stored bytes and PEXPIRETIME of a held lock; panics if it
/// is not held.
pub fn lock_snapshot(c: &mut Connection, key: &str) -> LockSnapshot {
    let info: Vec<(String, Value)> = lock_info(c, key)
        .unwrap_or_else(|| panic!("{key} is not held"))
        .into_iter()
        .filter(|(name, _)| name != "ttl-ms")
        .collect();
    let raw = stored_bytes(c, key).unwrap_or_else(|| panic!("{key} is gone"));
    let pexpiretime: i64 = cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    LockSnapshot { info, raw, pexpiretime }
}

/// The holders in one `LOCK.INFO` reply (see [`holders`](crate::holders)).
pub fn holders_in(reply: &redis::Value) -> Vec<(String, i64)> {
    fn fields(items: &[redis::Value]) -> Vec<(String, redis::Value)> {
        items.chunks(2).map(|p| (redis::from_redis_value(&p[0]).unwrap(), p[1].clone())).collect()
    }
    fn holder(fields: &[(String, redis::Value)]) -> Option<(String, i64)> {
        let get = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let who: String = redis::from_redis_value(&get("holder")?).unwrap();
        Some((who, redis::from_redis_value(&get("fence")?).unwrap()))
    }
    let redis::Value::Array(items) = reply else { return Vec::new() };
    let top = fields(items);
    match top.iter().find(|(name, _)| name == "holders") {
        Some((_, redis::Value::Array(entries))) => entries
            .iter()
            .filter_map(|e| match e {
                redis::Value::Array(items) => holder(&fields(items)),
                _ => None,
            })
            .collect(),
        _ => holder(&top).into_iter().collect(),
    }
}
