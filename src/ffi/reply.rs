//! Replies, built by safe code and written here.

use std::ffi::{c_char, c_long};

use redis_module::raw;

use super::api::{api, c_string, RawCtx};
use crate::errors;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    /// The whole error line without the leading `-`: `CODE message`.
    Error(String),
    /// Field names and their values: a map to a RESP3 client, a flat
    /// array of alternating names and values (like XINFO) to a RESP2 one.
    Fields(Vec<(&'static str, Field)>),
    /// The client was blocked; the reply comes when it is unblocked.
    Blocked,
    /// An array of integers (one per key of a multi-key command).
    Ints(Vec<i64>),
    /// An array of field/value maps (one per waiter, per key listed).
    List(Vec<Vec<(&'static str, Field)>>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Int(i64),
    Text(&'static str),
    Bytes(Vec<u8>),
    /// An array of field/value maps (the holders of a lock).
    List(Vec<Vec<(&'static str, Field)>>),
}

impl Reply {
    /// The reply to a call of the command the client named `name` (any
    /// case): an `ERR` line names the command (see `errors::of_command`).
    pub(super) fn for_command(self, name: &[u8]) -> Reply {
        match self {
            Reply::Error(line) if !name.is_empty() => {
                Reply::Error(errors::of_command(&String::from_utf8_lossy(name).to_ascii_lowercase(), line))
            }
            other => other,
        }
    }

    /// Writes the reply to the client of `ctx`.
    pub(super) fn send(&self, ctx: RawCtx) {
        // SAFETY: ctx is the live context of the call being answered; the
        // strings passed are valid for the duration of each call.
        unsafe {
            match self {
                Reply::Blocked => {}
                Reply::Ints(values) => {
                    api(raw::RedisModule_ReplyWithArray)(ctx, values.len() as c_long);
                    for n in values {
                        api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
                    }
                }
                Reply::Int(n) => {
                    api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
                }
                Reply::Nil => {
                    api(raw::RedisModule_ReplyWithNull)(ctx);
                }
                Reply::Error(line) => {
                    let line = c_string(line);
                    api(raw::RedisModule_ReplyWithError)(ctx, line.as_ptr());
                }
                Reply::Fields(fields) => reply_fields(ctx, fields),
                Reply::List(items) => {
                    api(raw::RedisModule_ReplyWithArray)(ctx, items.len() as c_long);
                    for item in items {
                        reply_fields(ctx, item);
                    }
                }
            }
        }
    }
}

/// Field/value pairs as a map: a RESP3 map to a client that said `HELLO
/// 3`, the flat array of names and values (as XINFO answers) to a RESP2
/// one; Redis writes whichever the client speaks.
///
/// # Safety
/// `ctx` must be the live context of the current call.
unsafe fn reply_fields(ctx: RawCtx, fields: &[(&'static str, Field)]) {
    api(raw::RedisModule_ReplyWithMap)(ctx, fields.len() as c_long);
    for (name, value) in fields {
        reply_bytes(ctx, name.as_bytes());
        match value {
            Field::Int(n) => {
                api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
            }
            Field::Text(t) => reply_bytes(ctx, t.as_bytes()),
            Field::Bytes(b) => reply_bytes(ctx, b),
            Field::List(items) => {
                api(raw::RedisModule_ReplyWithArray)(ctx, items.len() as c_long);
                for item in items {
                    reply_fields(ctx, item);
                }
            }
        }
    }
}

/// # Safety
/// `ctx` must be the live context of the current call.
unsafe fn reply_bytes(ctx: RawCtx, bytes: &[u8]) {
    api(raw::RedisModule_ReplyWithStringBuffer)(ctx, bytes.as_ptr().cast::<c_char>(), bytes.len());
}
