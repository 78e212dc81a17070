//! A command's arguments as data: what `COMMAND DOCS` lists (names, types,
//! tokens, optional and repeated parts), and the usage line rendered from
//! it the way the Redis documentation writes one (`LOCK.ACQUIRE key token
//! ttl-ms [WAIT timeout-ms]`). One declaration per command (its file in
//! `commands/`) gives both: Redis is told the arguments at registration,
//! and `docs/commands.md` shows the rendered line (a test per server
//! compares what `COMMAND DOCS` answers with the docs).

use std::ffi::CStr;

/// What kind of value an argument is (Redis' `REDISMODULE_ARG_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A key name (the command's key spec says where).
    Key,
    /// Any string.
    String,
    /// An integer.
    Integer,
    /// The token alone (`STARTUP`), as one choice of a [`ArgKind::OneOf`].
    PureToken,
    /// Exactly one of the sub-arguments.
    OneOf,
    /// The sub-arguments, in order.
    Block,
}

/// One argument of a command.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    /// The name shown in the usage line (`ttl-ms`).
    pub name: &'static CStr,
    pub kind: ArgKind,
    /// The option word before it (`WAIT` in `[WAIT timeout-ms]`).
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// It may repeat (`key [key ...]`).
    pub multiple: bool,
    /// The parts of a [`ArgKind::OneOf`] or a [`ArgKind::Block`].
    pub subargs: &'static [Arg],
}

impl Arg {
    const fn new(name: &'static CStr, kind: ArgKind) -> Arg {
        Arg { name, kind, token: None, optional: false, multiple: false, subargs: &[] }
    }

    /// A key name.
    pub const fn key(name: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::Key)
    }

    /// A string (a token, an owner, a mode).
    pub const fn string(name: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::String)
    }

    /// An integer (a time in ms, a count).
    pub const fn integer(name: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::Integer)
    }

    /// One of `choices` (each a [`Arg::word`]).
    pub const fn one_of(name: &'static CStr, choices: &'static [Arg]) -> Arg {
        Arg { subargs: choices, ..Arg::new(name, ArgKind::OneOf) }
    }

    /// A word given as it is (`STARTUP`): its name is its token.
    pub const fn word(token: &'static CStr) -> Arg {
        Arg { token: Some(token), ..Arg::new(token, ArgKind::PureToken) }
    }

    /// `[TOKEN value]`: an optional option with one value.
    pub const fn option(token: &'static CStr, value: Arg) -> Arg {
        Arg { token: Some(token), optional: true, ..value }
    }

    /// `value [value ...]`.
    pub const fn repeated(self) -> Arg {
        Arg { multiple: true, ..self }
    }

    fn name_text(&self) -> &'static str {
        self.name.to_str().unwrap_or_default()
    }

    fn token_text(&self) -> Option<&'static str> {
        self.token.map(|t| t.to_str().unwrap_or_default())
    }

    /// This argument as a usage line writes it.
    pub fn render(&self) -> String {
        let value = match self.kind {
            ArgKind::PureToken => String::new(),
            ArgKind::OneOf => {
                let choices: Vec<String> = self.subargs.iter().map(Arg::render).collect();
                choices.join(" | ")
            }
            ArgKind::Block => render_all(self.subargs),
            ArgKind::Key | ArgKind::String | ArgKind::Integer => self.name_text().to_string(),
        };
        let one = match (self.token_text(), value.is_empty()) {
            (Some(token), true) => token.to_string(),
            (Some(token), false) => format!("{token} {value}"),
            (None, _) => value.clone(),
        };
        let one = if self.kind == ArgKind::OneOf && self.token.is_none() && !self.optional {
            format!("<{one}>")
        } else {
            one
        };
        let all = if self.multiple { format!("{one} [{value} ...]") } else { one };
        if self.optional {
            format!("[{all}]")
        } else {
            all
        }
    }
}

/// Arguments in order, as a usage line writes them.
pub fn render_all(args: &[Arg]) -> String {
    args.iter().map(Arg::render).collect::<Vec<_>>().join(" ")
}

/// A command's usage line: its name in capitals, then its arguments.
pub fn usage(name: &CStr, args: &[Arg]) -> String {
    let name = name.to_str().unwrap_or_default().to_ascii_uppercase();
    if args.is_empty() {
        name
    } else {
        format!("{name} {}", render_all(args))
    }
}

/// Arguments shared by several commands.
pub mod common {
    use super::Arg;

    pub const KEY: Arg = Arg::key(c"key");
    pub const TOKEN: Arg = Arg::string(c"token");
    pub const OWNER: Arg = Arg::string(c"owner");
    pub const TTL_MS: Arg = Arg::integer(c"ttl-ms");
    pub const WAIT: Arg = Arg::option(c"WAIT", Arg::integer(c"timeout-ms"));
    pub const COUNT: Arg = Arg::option(c"COUNT", Arg::integer(c"count"));
    pub const KEYS: Arg = Arg::key(c"key").repeated();
}

#[cfg(test)]
mod tests {
    use super::common::*;
    use super::*;

    #[test]
    fn usage_lines_read_as_the_redis_docs_write_them() {
        assert_eq!(
            usage(c"lock.acquire", &[KEY, TOKEN, TTL_MS, WAIT]),
            "LOCK.ACQUIRE key token ttl-ms [WAIT timeout-ms]"
        );
        assert_eq!(usage(c"lock.contended", &[COUNT]), "LOCK.CONTENDED [COUNT count]");
        assert_eq!(usage(c"lock.mrelease", &[TOKEN, KEYS]), "LOCK.MRELEASE token key [key ...]");
        let modes = Arg::option(c"MODES", Arg::string(c"mode").repeated());
        assert_eq!(modes.render(), "[MODES mode [mode ...]]");
        const CHOICES: &[Arg] = &[Arg::word(c"STARTUP"), Arg::word(c"PROMOTION")];
        let reason = Arg::one_of(c"reason", CHOICES);
        assert_eq!(reason.render(), "<STARTUP | PROMOTION>");
        assert_eq!(Arg { optional: true, ..reason }.render(), "[STARTUP | PROMOTION]");
        assert_eq!(usage(c"lock.x", &[]), "LOCK.X");
        const PAIR: &[Arg] = &[KEY, TOKEN];
        let block = Arg { subargs: PAIR, optional: true, ..Arg::new(c"pair", ArgKind::Block) };
        assert_eq!(block.render(), "[key token]");
    }
}
