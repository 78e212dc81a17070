//! An open key: reads and writes, each write replicated in the same place
//! as a core command (`SET ... PXAT`, `HSET`, `HDEL`, `PEXPIREAT`, `DEL`), so
//! that replicas and the AOF reproduce it exactly without the module.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::slice;

use redis_module::raw;

use super::api::{api, constant, string_bytes, Constant, OwnedString};
use super::call::Call;

/// What a key holds, as far as locks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    String,
    Hash,
    Other,
}

impl Call<'_> {
    /// Opens the call's key for reading, or for writing too.
    pub fn open_key(&self, write: bool) -> Option<Key<'_>> {
        Key::open(self, write)
    }
}

/// An open key (the call's key), closed on drop.
pub struct Key<'c> {
    call: &'c Call<'c>,
    raw: *mut raw::RedisModuleKey,
}

impl<'c> Key<'c> {
    fn open(call: &'c Call<'c>, write: bool) -> Option<Key<'c>> {
        if call.key.is_null() {
            return None;
        }
        let mode = if write { raw::REDISMODULE_READ | raw::REDISMODULE_WRITE } else { raw::REDISMODULE_READ };
        // SAFETY: ctx and the key name are live for this call; the handle is
        // closed in Drop before the call returns.
        let key = unsafe { api(raw::RedisModule_OpenKey)(call.ctx, call.key, mode as c_int) };
        if key.is_null() {
            return None;
        }
        Some(Key { call, raw: key.cast() })
    }

    /// The key's name.
    pub fn name(&self) -> &[u8] {
        self.call.key_name()
    }

    /// The database the key is in.
    pub fn db(&self) -> i32 {
        self.call.db()
    }

    pub fn kind(&self) -> KeyKind {
        // SAFETY: the key handle is open.
        let kind = unsafe { api(raw::RedisModule_KeyType)(self.raw) };
        match kind as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            _ => KeyKind::Other,
        }
    }

    /// The string value, read in place. Valid until the key is written
    /// (writing takes `&mut self`, so the borrow checker enforces it).
    pub fn value(&self) -> Option<&[u8]> {
        if self.kind() != KeyKind::String {
            return None;
        }
        let mut len: usize = 0;
        // SAFETY: the key holds a string; DMA in READ mode returns a pointer
        // to its bytes that stays valid until the key is modified or closed.
        unsafe {
            let ptr = api(raw::RedisModule_StringDMA)(self.raw, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return None;
            }
            Some(slice::from_raw_parts(ptr.cast::<u8>(), len))
        }
    }

    /// Makes the key the string `value` with its native expiry at the
    /// absolute wall-clock instant `expire_at_ms`, and replicates
    /// `SET key value PXAT expire_at_ms`.
    ///
    /// The value is written in place into a string Redis allocates
    /// (Truncate, then DMA): such a string is stored raw, so the next read
    /// of it (DMA) is free. A string handed over whole (`StringSet`) may be
    /// stored embedded with its key (Valkey 9 does so for values this
    /// short), and every later DMA read would then copy it out again
    /// (about 2,000 instructions per RELEASE or EXTEND, measured).
    pub fn set_string(&mut self, value: &[u8], expire_at_ms: i64) -> bool {
        // The instant goes to Replicate as text ("b"), as Redis would store
        // it: an "l" argument costs Redis a second allocation (an sds, then
        // its object) and its own formatting, about 300 instructions a write.
        let mut digits = itoa::Buffer::new();
        let expire_at = digits.format(expire_at_ms);
        // SAFETY: the key is open for writing. Truncate creates or resizes
        // the string to exactly `value.len()` bytes; DMA in WRITE mode then
        // gives a pointer to those bytes, valid until the key is modified or
        // closed, and we copy into it at once. Replicate's format "sbsb"
        // matches: key name, a buffer with its length (copied by Redis), the
        // PXAT constant (kept for the process's life), a buffer with its
        // length.
        unsafe {
            if api(raw::RedisModule_StringTruncate)(self.raw, value.len()) != raw::REDISMODULE_OK as c_int
                || api(raw::RedisModule_SetAbsExpire)(self.raw, expire_at_ms) != raw::REDISMODULE_OK as c_int
            {
                return false;
            }
            let mut len: usize = 0;
            let ptr = api(raw::RedisModule_StringDMA)(self.raw, &mut len, raw::REDISMODULE_WRITE as c_int);
            if ptr.is_null() || len != value.len() {
                return false;
            }
            slice::from_raw_parts_mut(ptr.cast::<u8>(), len).copy_from_slice(value);
            api(raw::RedisModule_Replicate)(
                self.call.ctx,
                c"SET".as_ptr(),
                c"sbsb".as_ptr(),
                self.call.key,
                value.as_ptr().cast::<c_char>(),
                value.len(),
                constant(Constant::Pxat),
                expire_at.as_ptr().cast::<c_char>(),
                expire_at.len(),
            );
        }
        true
    }

    /// Deletes the key and replicates `DEL key`.
    pub fn delete(&mut self) -> bool {
        // SAFETY: the key is open for writing; the format "s" matches the
        // one key-name argument.
        unsafe {
            if api(raw::RedisModule_DeleteKey)(self.raw) != raw::REDISMODULE_OK as c_int {
                return false;
            }
            api(raw::RedisModule_Replicate)(self.call.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.call.key);
        }
        true
    }

    /// One field of a hash key.
    pub fn hash_get(&self, field: &[u8]) -> Option<Vec<u8>> {
        let field = OwnedString::new(field);
        let mut value: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: the key is open; HashGet takes (field, out-pointer) pairs
        // ended by NULL and stores a new string (or NULL) in `value`, which
        // we own (no automatic memory) and free after copying it.
        unsafe {
            api(raw::RedisModule_HashGet)(
                self.raw,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.ptr(),
                &mut value as *mut *mut raw::RedisModuleString,
                ptr::null_mut::<c_void>(),
            );
            if value.is_null() {
                return None;
            }
            let bytes = string_bytes(value).to_vec();
            api(raw::RedisModule_FreeString)(self.call.ctx, value);
            Some(bytes)
        }
    }

    /// The number of elements of the key's value (fields of a hash).
    pub fn len(&self) -> usize {
        // SAFETY: the key handle is open.
        unsafe { api(raw::RedisModule_ValueLength)(self.raw) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every field and value of a hash key.
    pub fn hash_all(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        extern "C" fn collect(
            _key: *mut raw::RedisModuleKey,
            field: *mut raw::RedisModuleString,
            value: *mut raw::RedisModuleString,
            data: *mut c_void,
        ) {
            // SAFETY: `data` is the Vec passed to ScanKey below, alive and
            // not otherwise borrowed during the scan; the strings are valid
            // for the duration of this callback.
            let out = unsafe { &mut *data.cast::<Vec<(Vec<u8>, Vec<u8>)>>() };
            out.push((string_bytes(field).to_vec(), string_bytes(value).to_vec()));
        }
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(self.len());
        // SAFETY: the cursor is created and destroyed here; the callback
        // only touches `out` through the pointer given to it. Each ScanKey
        // call returns 0 when the scan is complete; a hash is bounded
        // (HOLDERS_MAX records), so the loop ends.
        unsafe {
            let cursor = api(raw::RedisModule_ScanCursorCreate)();
            let data = (&mut out as *mut Vec<(Vec<u8>, Vec<u8>)>).cast::<c_void>();
            while api(raw::RedisModule_ScanKey)(self.raw, cursor, Some(collect), data) != 0 {}
            api(raw::RedisModule_ScanCursorDestroy)(cursor);
        }
        out
    }

    /// Deletes `deletes` and sets `sets` in a hash key (creating it), and
    /// replicates `HDEL key ...` and `HSET key ...`.
    pub fn hash_edit<'b>(
        &mut self,
        deletes: impl Iterator<Item = &'b [u8]>,
        sets: impl ExactSizeIterator<Item = (&'b [u8], &'b [u8])>,
    ) -> bool {
        let deleted: Vec<OwnedString> = deletes.map(OwnedString::new).collect();
        let mut set: Vec<OwnedString> = Vec::with_capacity(sets.len() * 2);
        for (field, value) in sets {
            set.push(OwnedString::new(field));
            set.push(OwnedString::new(value));
        }
        // SAFETY: the key is open for writing; HashSet takes (field, value)
        // pairs ended by NULL, and a value of REDISMODULE_HASH_DELETE deletes
        // the field. Replicate's "sv" takes the key name, then an array of
        // strings with its length; Redis retains what it keeps.
        unsafe {
            for field in &deleted {
                api(raw::RedisModule_HashSet)(
                    self.raw,
                    raw::REDISMODULE_HASH_NONE as c_int,
                    field.ptr(),
                    raw::REDISMODULE_HASH_DELETE,
                    ptr::null_mut::<c_void>(),
                );
            }
            for pair in set.chunks_exact(2) {
                if let [field, value] = pair {
                    api(raw::RedisModule_HashSet)(
                        self.raw,
                        raw::REDISMODULE_HASH_NONE as c_int,
                        field.ptr(),
                        value.ptr(),
                        ptr::null_mut::<c_void>(),
                    );
                }
            }
            if self.kind() != KeyKind::Hash && !set.is_empty() {
                return false;
            }
            for (command, args) in [(c"HDEL", &deleted), (c"HSET", &set)] {
                if args.is_empty() {
                    continue;
                }
                let ptrs: Vec<*mut raw::RedisModuleString> = args.iter().map(OwnedString::ptr).collect();
                api(raw::RedisModule_Replicate)(
                    self.call.ctx,
                    command.as_ptr(),
                    c"sv".as_ptr(),
                    self.call.key,
                    ptrs.as_ptr(),
                    ptrs.len(),
                );
            }
        }
        true
    }

    /// The key's native expiry (absolute epoch ms), if it has one.
    pub fn expire_at(&self) -> Option<i64> {
        // SAFETY: the key handle is open.
        let at = unsafe { api(raw::RedisModule_GetAbsExpire)(self.raw) };
        (at >= 0).then_some(at)
    }

    /// Sets the key's native expiry to the absolute instant `at_ms` and
    /// replicates `PEXPIREAT key at_ms`.
    pub fn set_expire_at(&mut self, at_ms: i64) -> bool {
        // As text, as in `set_string`.
        let mut digits = itoa::Buffer::new();
        let at = digits.format(at_ms);
        // SAFETY: the key is open for writing; "sb" matches the key name and
        // a buffer with its length (copied by Redis).
        unsafe {
            if api(raw::RedisModule_SetAbsExpire)(self.raw, at_ms) != raw::REDISMODULE_OK as c_int {
                return false;
            }
            api(raw::RedisModule_Replicate)(
                self.call.ctx,
                c"PEXPIREAT".as_ptr(),
                c"sb".as_ptr(),
                self.call.key,
                at.as_ptr().cast::<c_char>(),
                at.len(),
            );
        }
        true
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle was opened by `open` and is closed once.
        unsafe { api(raw::RedisModule_CloseKey)(self.raw) };
    }
}
