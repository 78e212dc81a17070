//! The ACL recipes of docs/operations.md ("## ACL"), word for word, on the
//! running server, and the module's ACL categories as docs/commands.md and
//! docs/operations.md state them. What a server can do differs: Redis 7.0
//! puts module commands in no category; Redis 7.2+ and Valkey take the
//! module's categories (RedisModule_SetCommandACLCategories); Redis 7.4+
//! and Valkey 8+ also let it add its own `@lock`
//! (RedisModule_AddACLCategory). Each test asserts what this server must do.

use std::collections::BTreeSet;

use lock_testkit::*;

// The ACL section's code blocks of docs/operations.md, in order and word
// for word: `docs_recipes_are_the_ones_tested` fails when either side
// changes alone. Raw strings: the docs' `\` line continuations stay as
// they are.
const LOCK_CMDS: &str = r"LOCK_CMDS='+lock.acquire +lock.enter +lock.shared +lock.exclusive +lock.semaphore +lock.macquire
  +lock.release +lock.mrelease +lock.exit +lock.extend +lock.renew +lock.fence +lock.check
  +lock.info +lock.waiters +subscribe +unsubscribe +select'";
const LOCKER: &str = r"redis-cli ACL SETUSER locker on '>change-me' resetkeys '~lock:*' \
  resetchannels '&__lock@*__:lock:*' -@all $LOCK_CMDS";
const APP: &str = r#"redis-cli ACL SETUSER app on '>change-me' resetkeys '~app:*' resetchannels '&app:*' \
  +@all -@dangerous -lock.revoke -lock.unquarantine "(~lock:* &__lock@*__:lock:* -@all $LOCK_CMDS)""#;
const MONITOR_AND_ADMIN: &str = r"redis-cli ACL SETUSER monitor on '>change-me' resetkeys '~lock:*' -@all \
  +info +lock.info +lock.waiters +lock.contended
redis-cli ACL SETUSER lock-admin on '>change-me' resetkeys '~lock:*' \
  resetchannels '&__lock@*__:lock:*' -@all $LOCK_CMDS +lock.contended +lock.revoke +lock.unquarantine +info";
const LOCKER_BY_CATEGORY: &str = r"redis-cli ACL SETUSER locker on '>change-me' resetkeys '~lock:*' \
  resetchannels '&__lock@*__:lock:*' -@all +@lock -lock.revoke -lock.unquarantine -lock.contended +subscribe +unsubscribe";

/// The recipes' password.
const PASSWORD: &str = "change-me";

/// The operators' commands, in `@admin` and `@dangerous`.
const OPERATORS: [&str; 2] = ["LOCK.REVOKE", "LOCK.UNQUARANTINE"];

/// The commands docs/operations.md puts in `@read` ("the read-only
/// commands (...) are in `@read`, the others in `@write`").
const READ_ONLY: [&str; 4] = ["LOCK.INFO", "LOCK.CHECK", "LOCK.WAITERS", "LOCK.CONTENDED"];

/// Where the server takes ACL categories for module commands (Redis 7.2+,
/// Valkey, which forked from 7.2): src/ffi/register.rs sets them when
/// RedisModule_SetCommandACLCategories exists.
fn module_commands_have_categories() -> bool {
    let (product, version) = server_version();
    product == "Valkey" || version >= (7, 2)
}

/// Where a module may add its own category (Redis 7.4+, Valkey 8+):
/// src/lib.rs adds `lock` when RedisModule_AddACLCategory exists.
fn module_category_exists() -> bool {
    let (product, version) = server_version();
    if product == "Valkey" {
        version >= (8, 0)
    } else {
        version >= (7, 4)
    }
}

fn read_doc(name: &str) -> String {
    let path = repo_dir().join("docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// docs/operations.md's "## ACL" section.
fn acl_section() -> String {
    let text = read_doc("operations.md");
    let start = text.find("\n## ACL\n").expect("operations.md has an ACL section");
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_string()
}

/// The bodies of the ```sh blocks of `text`.
fn sh_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + "```sh\n".len()..];
        let end = body.find("\n```").expect("a closed code block");
        blocks.push(body[..end].to_string());
        rest = &body[end + 4..];
    }
    blocks
}

/// The commands of a shell snippet as bash would run them, each as its
/// words: quotes, `\` line continuations, and `$NAME` from `vars` (split
/// into words unquoted, verbatim inside double quotes). Only what the
/// recipes use; anything else is a test bug.
fn shell_commands(text: &str, vars: &[(&str, &str)]) -> Vec<Vec<String>> {
    let lookup = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> String {
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if !(c.is_ascii_alphanumeric() || c == '_') {
                break;
            }
            name.push(c);
            chars.next();
        }
        let (_, value) = vars.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("${name} is unset"));
        value.to_string()
    };
    let (mut commands, mut words, mut word) = (Vec::new(), Vec::new(), None::<String>);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                assert_eq!(chars.next(), Some('\n'), "only line continuations are escaped");
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref().take_while(|&c| c != '\'') {
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next().expect("a closed double quote") {
                        '"' => break,
                        '$' => w.push_str(&lookup(&mut chars)),
                        c => w.push(c),
                    }
                }
            }
            '$' => {
                assert!(word.is_none(), "$NAME stands alone in the recipes");
                words.extend(lookup(&mut chars).split_whitespace().map(String::from));
            }
            c if c.is_whitespace() => {
                words.extend(word.take());
                if c == '\n' && !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word.take());
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

/// `$LOCK_CMDS` as the docs' assignment sets it.
fn lock_cmds() -> String {
    let commands = shell_commands(LOCK_CMDS, &[]);
    let [command] = commands.as_slice() else { panic!("one assignment: {commands:?}") };
    let [assignment] = command.as_slice() else { panic!("one word: {command:?}") };
    let (name, value) = assignment.split_once('=').expect("NAME=value");
    assert_eq!(name, "LOCK_CMDS");
    value.to_string()
}

/// The `ACL SETUSER` calls of a recipe: each command's words after
/// `redis-cli`.
fn recipe_calls(recipe: &str) -> Vec<Vec<String>> {
    let cmds = lock_cmds();
    shell_commands(recipe, &[("LOCK_CMDS", &cmds)])
        .into_iter()
        .map(|words| {
            assert_eq!(words[..3], ["redis-cli", "ACL", "SETUSER"], "a recipe line: {words:?}");
            words[1..].to_vec()
        })
        .collect()
}

/// Runs a recipe's calls as the default user; the first error, if any.
fn try_apply(c: &mut Connection, recipe: &str) -> redis::RedisResult<()> {
    for words in recipe_calls(recipe) {
        let refs: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        run(c, &refs)?;
    }
    Ok(())
}

fn apply(c: &mut Connection, recipe: &str) {
    try_apply(c, recipe).unwrap_or_else(|e| panic!("{recipe}: {e}"));
}

/// A connection authenticated as `user`.
fn login(server: &Server, user: &str, password: &str) -> Connection {
    let mut c = server.conn();
    let ok: String = cmd("AUTH").arg(user).arg(password).query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    c
}

fn call(c: &mut Connection, words: &[&str]) -> redis::RedisResult<Value> {
    let refs: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    run(c, &refs)
}

fn ok(c: &mut Connection, words: &[&str]) -> Value {
    call(c, words).unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

fn is_noperm(result: &redis::RedisResult<Value>) -> bool {
    matches!(result, Err(e) if e.code() == Some("NOPERM"))
}

#[track_caller]
fn assert_noperm(c: &mut Connection, words: &[&str]) {
    let result = call(c, words);
    assert!(is_noperm(&result), "{words:?} must be refused by ACL, got {result:?}");
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        other => panic!("not a string: {other:?}"),
    }
}

fn texts(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Set(items) => items.iter().map(text).collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// A command of docs/commands.md: its name (upper case), its Redis flags
/// (the table), and whether its usage line has `WAIT`.
struct Documented {
    name: String,
    flags: Vec<String>,
    waits: bool,
}

/// Every command in docs/commands.md's table.
fn documented_commands() -> Vec<Documented> {
    let doc = read_doc("commands.md");
    let commands: Vec<Documented> = doc
        .lines()
        .filter(|line| line.starts_with("| `LOCK."))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(|cell| cell.trim().trim_matches('`')).collect();
            let name = cells[1].to_string();
            let usage = doc
                .lines()
                .find(|line| line.starts_with(&format!("`{name} ")))
                .unwrap_or_else(|| panic!("docs/commands.md has no usage line for {name}"));
            let flags = cells[3].split_whitespace().map(String::from).collect();
            Documented { waits: usage.contains("[WAIT timeout-ms]"), name, flags }
        })
        .collect();
    assert_eq!(commands.len(), 20, "docs/commands.md's table");
    commands
}

fn documented_names() -> Vec<String> {
    documented_commands().into_iter().map(|command| command.name).collect()
}

/// The ACL categories docs/commands.md and docs/operations.md give a
/// command where the server takes them: `@read` for the read-only
/// commands, `@write` for the others; `@fast` for the `fast` ones, `@slow`
/// otherwise; `@blocking` for the grants that may `WAIT`; `@admin` and
/// `@dangerous` for the operators' `LOCK.REVOKE` and `LOCK.UNQUARANTINE`;
/// `@lock` where the module adds it.
fn documented_categories(command: &Documented) -> BTreeSet<String> {
    let has = |flag: &str| command.flags.iter().any(|f| f == flag);
    let mut categories = BTreeSet::new();
    let mut add = |name: &str| categories.insert(format!("@{name}"));
    if has("readonly") {
        add("read");
    }
    if has("write") {
        add("write");
    }
    add(if has("fast") { "fast" } else { "slow" });
    if command.waits {
        add("blocking");
    }
    if OPERATORS.contains(&command.name.as_str()) {
        add("admin");
        add("dangerous");
    }
    if module_category_exists() {
        add("lock");
    }
    categories
}

/// The ACL categories `COMMAND INFO` reports for `command`.
fn reported_categories(c: &mut Connection, command: &str) -> BTreeSet<String> {
    let reply = ok(c, &["COMMAND", "INFO", command]);
    let Value::Array(entries) = reply else { panic!("COMMAND INFO {command}: {reply:?}") };
    let [Value::Array(entry)] = entries.as_slice() else { panic!("COMMAND INFO {command}: {entries:?}") };
    // Redis 7's COMMAND INFO: name, arity, flags, first, last, step, ACL
    // categories, tips, key specs, subcommands.
    texts(&entry[6]).into_iter().collect()
}

/// One valid call of every LOCK.* command on keys under `prefix`, in an
/// order where each can succeed for a user allowed everything (the fence
/// for LOCK.FENCE and LOCK.CHECK is LOCK.ACQUIRE's, when it was granted):
/// each command's name and reply.
fn every_command(c: &mut Connection, prefix: &str) -> Vec<(&'static str, redis::RedisResult<Value>)> {
    let key = |name: &str| format!("{prefix}{name}");
    let (plain, reentrant, shared, exclusive, semaphore, set_a, set_b) =
        (key("p"), key("r"), key("s"), key("e"), key("m"), key("a"), key("b"));
    let mut out = Vec::new();
    let acquired = call(c, &["LOCK.ACQUIRE", &plain, "t", "20000"]);
    let fence = match &acquired {
        Ok(Value::Int(fence)) => fence.to_string(),
        _ => "1".to_string(),
    };
    out.push(("LOCK.ACQUIRE", acquired));
    let calls: [(&'static str, Vec<&str>); 17] = [
        ("LOCK.EXTEND", vec![&plain, "t", "20000"]),
        ("LOCK.RENEW", vec!["t", "20000", &plain]),
        ("LOCK.FENCE", vec![&plain, "t", &fence]),
        ("LOCK.CHECK", vec![&plain, &fence]),
        ("LOCK.INFO", vec![&plain]),
        ("LOCK.WAITERS", vec![&plain]),
        ("LOCK.CONTENDED", vec![]),
        ("LOCK.RELEASE", vec![&plain, "t"]),
        ("LOCK.ENTER", vec![&reentrant, "o", "20000"]),
        ("LOCK.EXIT", vec![&reentrant, "o"]),
        ("LOCK.SHARED", vec![&shared, "t", "20000"]),
        ("LOCK.EXCLUSIVE", vec![&exclusive, "t", "20000"]),
        ("LOCK.SEMAPHORE", vec![&semaphore, "t", "2", "20000"]),
        ("LOCK.MACQUIRE", vec!["t2", "20000", "2", &set_a, &set_b]),
        ("LOCK.MRELEASE", vec!["t2", &set_a, &set_b]),
        ("LOCK.REVOKE", vec![&shared]),
        ("LOCK.UNQUARANTINE", vec!["STARTUP"]),
    ];
    for (name, args) in calls {
        let mut words = vec![name];
        words.extend(args);
        let result = match call(c, &words) {
            // The test servers start with no quarantine: the module's own
            // answer says the command ran.
            Err(e)
                if name == "LOCK.UNQUARANTINE"
                    && e.to_string().contains("no start-up or promotion quarantine") =>
            {
                Ok(Value::Nil)
            }
            other => other,
        };
        out.push((name, result));
    }
    out
}

/// Runs [`every_command`] and asserts that exactly the commands in
/// `allowed` ran (each without an error) and every other one was refused
/// by ACL (`NOPERM`).
#[track_caller]
fn assert_allowed(c: &mut Connection, who: &str, prefix: &str, allowed: &[&str]) {
    for (name, result) in every_command(c, prefix) {
        if allowed.contains(&name) {
            assert!(result.is_ok(), "{who}: {name} on {prefix}* must run: {result:?}");
        } else {
            assert!(is_noperm(&result), "{who}: {name} on {prefix}* must get NOPERM: {result:?}");
        }
    }
}

/// The LOCK.* commands `$LOCK_CMDS` grants, upper case.
fn lock_cmds_commands() -> Vec<String> {
    lock_cmds()
        .split_whitespace()
        .filter_map(|grant| grant.strip_prefix("+lock."))
        .map(|name| format!("LOCK.{}", name.to_uppercase()))
        .collect()
}

/// The keys a `LOCK.CONTENDED` reply lists (RESP2: one field/value array
/// per key).
fn contended_keys(reply: &Value) -> BTreeSet<String> {
    let Value::Array(rows) = reply else { panic!("LOCK.CONTENDED: {reply:?}") };
    rows.iter()
        .map(|row| {
            let Value::Array(fields) = row else { panic!("LOCK.CONTENDED row: {row:?}") };
            let at = fields.iter().position(|f| matches!(f, Value::BulkString(b) if b == b"key"));
            let at = at.unwrap_or_else(|| panic!("LOCK.CONTENDED row without key: {fields:?}"));
            text(&fields[at + 1])
        })
        .collect()
}

fn keys(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn docs_recipes_are_the_ones_tested() {
    let section = acl_section();
    assert_eq!(
        sh_blocks(&section),
        [LOCK_CMDS, LOCKER, APP, MONITOR_AND_ADMIN, LOCKER_BY_CATEGORY],
        "docs/operations.md's ACL recipes and this test's copies must be the same"
    );
    // The prose the category tests below check.
    let prose = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let read_only = format!(
        "the read-only commands ({}) are in `@read`, the others but `LOCK.UNQUARANTINE` in `@write`; `LOCK.REVOKE` and `LOCK.UNQUARANTINE` in `@admin` and `@dangerous`",
        READ_ONLY.map(|c| format!("`{c}`")).join(", ")
    );
    assert!(prose.contains(&read_only), "operations.md no longer says: {read_only}");
    // $LOCK_CMDS grants every command of the module a client may send:
    // all but the operators', LOCK.CONTENDED (monitoring) and
    // LOCK.FORGOTTEN and LOCK.QUARANTINED (the module's own records,
    // refused to every client).
    let mut granted = lock_cmds_commands();
    granted.sort();
    let mut expected: Vec<String> = documented_names()
        .into_iter()
        .filter(|name| {
            !OPERATORS.contains(&name.as_str())
                && !["LOCK.CONTENDED", "LOCK.FORGOTTEN", "LOCK.QUARANTINED"].contains(&name.as_str())
        })
        .collect();
    expected.sort();
    assert_eq!(granted, expected);
}

/// What a lock-only user (either `locker` recipe) is refused while it
/// holds `lock:x`: a stray DEL or SET would make the module quarantine the
/// key, GET reads the raw value, REVOKE frees without the token,
/// UNQUARANTINE ends a node's quarantine, CONTENDED lists keys, and
/// `other:x` is outside its pattern.
const LOCKER_REFUSED: [&[&str]; 7] = [
    &["GET", "lock:x"],
    &["DEL", "lock:x"],
    &["SET", "lock:x", "v"],
    &["LOCK.REVOKE", "lock:x"],
    &["LOCK.UNQUARANTINE", "STARTUP"],
    &["LOCK.CONTENDED"],
    &["LOCK.ACQUIRE", "other:x", "t", "20000"],
];

#[test]
fn locker_takes_and_releases_locks_and_nothing_else() {
    let server = Server::start();
    let mut admin = server.conn();
    apply(&mut admin, LOCKER);
    let mut c = login(&server, "locker", PASSWORD);
    // AUTH needs no grant: a client may authenticate again on its link.
    ok(&mut c, &["AUTH", "locker", PASSWORD]);

    let fence = ok(&mut c, &["LOCK.ACQUIRE", "lock:x", "t", "20000"]);
    assert!(matches!(fence, Value::Int(_)), "granted: {fence:?}");
    let before = lock_snapshot(&mut admin, "lock:x");
    for words in
        LOCKER_REFUSED.iter().chain(&[&["LOCK.MACQUIRE", "t", "20000", "2", "lock:y", "other:y"][..]])
    {
        assert_noperm(&mut c, words);
    }
    assert_eq!(lock_snapshot(&mut admin, "lock:x"), before, "refused calls changed the lock");
    assert_eq!(int(&mut admin, &["EXISTS", "other:x", "lock:y", "other:y"]), 0, "nothing granted");
    assert_eq!(ok(&mut c, &["LOCK.RELEASE", "lock:x", "t"]), Value::Int(1));
    assert_eq!(int(&mut admin, &["EXISTS", "lock:x"]), 0);

    // Every command of $LOCK_CMDS works on lock:* keys, none outside them.
    let granted = lock_cmds_commands();
    let granted: Vec<&str> = granted.iter().map(String::as_str).collect();
    assert_allowed(&mut c, "locker", "lock:", &granted);
    assert_allowed(&mut c, "locker", "other:", &[]);
    let mut left: Vec<String> = cmd("KEYS").arg("*").query(&mut admin).unwrap();
    left.sort();
    assert_eq!(left, ["lock:e", "lock:m", "lock:s"], "the holds not given back stand, none elsewhere");

    // A client that waits through pub/sub listens to its keys' channels
    // only.
    let mut sub = login(&server, "locker", PASSWORD);
    let mut sub = sub.as_pubsub();
    sub.subscribe("__lock@0__:lock:x").unwrap();
    let refused = sub.subscribe("__lock@0__:other:x");
    assert!(matches!(&refused, Err(e) if e.code() == Some("NOPERM")), "{refused:?}");

    // A URL naming a database makes the client SELECT it.
    ok(&mut c, &["SELECT", "1"]);
    assert!(matches!(ok(&mut c, &["LOCK.ACQUIRE", "lock:x", "t", "20000"]), Value::Int(_)));
}

#[test]
fn app_keeps_its_data_and_takes_locks_through_its_selector() {
    let server = Server::start();
    let mut admin = server.conn();
    apply(&mut admin, APP);
    let mut c = login(&server, "app", PASSWORD);
    assert_eq!(ok(&mut c, &["SET", "app:1", "v"]), Value::Okay);
    assert_eq!(text(&ok(&mut c, &["GET", "app:1"])), "v");
    assert!(matches!(ok(&mut c, &["LOCK.ACQUIRE", "lock:x", "t", "20000"]), Value::Int(_)));
    let before = lock_snapshot(&mut admin, "lock:x");
    // The top level allows DEL and GET but not on lock:*; the selector
    // allows lock:* but neither command; no level allows LOCK.REVOKE, on
    // Redis 7.0 either (where -@dangerous does not reach it).
    for words in [
        &["DEL", "lock:x"][..],
        &["GET", "lock:x"],
        &["LOCK.REVOKE", "lock:x"],
        &["LOCK.REVOKE", "app:1"],
        &["LOCK.UNQUARANTINE", "STARTUP"],
        &["LOCK.ACQUIRE", "other:x", "t", "20000"],
    ] {
        assert_noperm(&mut c, words);
    }
    assert_eq!(lock_snapshot(&mut admin, "lock:x"), before, "refused calls changed the lock");
    assert_eq!(text(&ok(&mut admin, &["GET", "app:1"])), "v");
    let granted = lock_cmds_commands();
    let granted: Vec<&str> = granted.iter().map(String::as_str).collect();
    // LOCK.CONTENDED takes no key: the top level's +@all allows it.
    let mut allowed = granted.clone();
    allowed.push("LOCK.CONTENDED");
    assert_allowed(&mut c, "app", "lock:", &allowed);
    assert_eq!(ok(&mut c, &["LOCK.RELEASE", "lock:x", "t"]), Value::Int(1));
}

#[test]
fn monitor_looks_and_lock_admin_revokes() {
    let server = Server::start();
    let mut admin = server.conn();
    apply(&mut admin, MONITOR_AND_ADMIN);
    ok(&mut admin, &["LOCK.ACQUIRE", "lock:x", "t", "20000"]);

    let mut monitor = login(&server, "monitor", PASSWORD);
    assert_eq!(holders_in(&ok(&mut monitor, &["LOCK.INFO", "lock:x"]))[0].0, "t");
    assert!(text(&ok(&mut monitor, &["INFO", "lock"])).contains("lock_"));
    assert_noperm(&mut monitor, &["LOCK.INFO", "other:x"]);
    assert_noperm(&mut monitor, &["LOCK.REVOKE", "lock:x"]);
    assert_allowed(&mut monitor, "monitor", "lock:", &["LOCK.INFO", "LOCK.WAITERS", "LOCK.CONTENDED"]);

    let mut operator = login(&server, "lock-admin", PASSWORD);
    assert_noperm(&mut operator, &["DEL", "lock:x"]);
    assert_noperm(&mut operator, &["LOCK.REVOKE", "other:x"]);
    assert_eq!(ok(&mut operator, &["LOCK.REVOKE", "lock:x"]), Value::Int(1));
    assert_eq!(int(&mut admin, &["EXISTS", "lock:x"]), 0);
    assert!(text(&ok(&mut operator, &["INFO", "lock"])).contains("lock_revoked:1"));
    let every = documented_names();
    let every: Vec<&str> = every.iter().map(String::as_str).collect();
    assert_allowed(&mut operator, "lock-admin", "lock:", &every);
}

#[test]
fn categories_are_what_the_docs_say() {
    let server = Server::start();
    let mut c = server.conn();
    let commands = documented_commands();
    let mut in_read = BTreeSet::new();
    for command in &commands {
        let name = &command.name;
        let reported = reported_categories(&mut c, &name.to_lowercase());
        if !module_commands_have_categories() {
            // Redis 7.0: no categories for module commands at all.
            assert_eq!(reported, BTreeSet::new(), "{name}");
            continue;
        }
        assert_eq!(reported, documented_categories(command), "{name}");
        if reported.contains("@read") {
            in_read.insert(name.clone());
        }
    }
    if module_commands_have_categories() {
        assert_eq!(in_read, keys(&READ_ONLY));
    }

    let all: Vec<String> = texts(&ok(&mut c, &["ACL", "CAT"]));
    let listed = call(&mut c, &["ACL", "CAT", "lock"]);
    if module_category_exists() {
        assert!(all.contains(&"lock".to_string()), "ACL CAT: {all:?}");
        let listed: BTreeSet<String> = texts(&listed.unwrap()).into_iter().collect();
        let every: BTreeSet<String> = commands.iter().map(|command| command.name.to_lowercase()).collect();
        assert_eq!(listed, every, "ACL CAT lock");
    } else {
        assert!(!all.contains(&"lock".to_string()), "ACL CAT: {all:?}");
        assert!(listed.is_err(), "ACL CAT lock: {listed:?}");
    }
}

#[test]
fn category_recipe_works_where_the_module_has_its_category() {
    let server = Server::start();
    let mut admin = server.conn();
    let applied = try_apply(&mut admin, LOCKER_BY_CATEGORY);
    if !module_category_exists() {
        // No `@lock` here: the recipe is refused whole (ACL SETUSER
        // applies all or nothing), so the operator notices.
        assert!(applied.is_err(), "+@lock must be refused where there is no such category");
        assert_eq!(ok(&mut admin, &["ACL", "GETUSER", "locker"]), Value::Nil);
        return;
    }
    applied.unwrap();
    let mut c = login(&server, "locker", PASSWORD);
    assert!(matches!(ok(&mut c, &["LOCK.ACQUIRE", "lock:x", "t", "20000"]), Value::Int(_)));
    let before = lock_snapshot(&mut admin, "lock:x");
    for words in LOCKER_REFUSED.iter().chain(&[&["SELECT", "1"][..]]) {
        assert_noperm(&mut c, words);
    }
    assert_eq!(lock_snapshot(&mut admin, "lock:x"), before, "refused calls changed the lock");
    assert_eq!(ok(&mut c, &["LOCK.RELEASE", "lock:x", "t"]), Value::Int(1));
    // The same rights as the command list (which also allows SELECT).
    let granted = lock_cmds_commands();
    let granted: Vec<&str> = granted.iter().map(String::as_str).collect();
    assert_allowed(&mut c, "locker (@lock)", "lock:", &granted);
    assert_allowed(&mut c, "locker (@lock)", "other:", &[]);
    let mut sub = login(&server, "locker", PASSWORD);
    sub.as_pubsub().subscribe("__lock@0__:lock:x").unwrap();
}

#[test]
fn read_and_write_categories_reach_module_commands_where_the_server_can() {
    let server = Server::start();
    let mut admin = server.conn();
    ok(&mut admin, &["ACL", "SETUSER", "reader", "on", ">pw", "~*", "&*", "-@all", "+@read"]);
    ok(&mut admin, &["ACL", "SETUSER", "no-writes", "on", ">pw", "~*", "&*", "+@all", "-@write"]);
    let writes: Vec<String> =
        documented_names().into_iter().filter(|name| !READ_ONLY.contains(&name.as_str())).collect();
    let writes: Vec<&str> = writes.iter().map(String::as_str).collect();
    let mut reader = login(&server, "reader", "pw");
    let mut no_writes = login(&server, "no-writes", "pw");
    if module_commands_have_categories() {
        assert_allowed(&mut reader, "+@read", "r:", &READ_ONLY);
        // LOCK.UNQUARANTINE writes no key: not in @write.
        let mut not_writes = READ_ONLY.to_vec();
        not_writes.push("LOCK.UNQUARANTINE");
        assert_allowed(&mut no_writes, "-@write", "w:", &not_writes);
    } else {
        // What docs/operations.md warns of on Redis 7.0: +@read grants no
        // module command, and -@write takes none away from +@all.
        assert_noperm(&mut reader, &["LOCK.INFO", "r:p"]);
        assert_allowed(&mut reader, "+@read", "r:", &[]);
        let mut every = writes.clone();
        every.extend(READ_ONLY);
        assert_allowed(&mut no_writes, "-@write", "w:", &every);
    }
    // The default user (+@all) keeps every command on every server.
    let mut every = writes;
    every.extend(READ_ONLY);
    assert_allowed(&mut admin, "default", "d:", &every);
}

#[test]
fn contended_lists_only_the_keys_the_caller_may_read() {
    let server = Server::start();
    let mut admin = server.conn();
    // A second token refused while the first holds the key counts as
    // contention.
    for key in ["lock:a", "other:b"] {
        assert!(matches!(ok(&mut admin, &["LOCK.ACQUIRE", key, "t1", "20000"]), Value::Int(_)));
        assert_eq!(ok(&mut admin, &["LOCK.ACQUIRE", key, "t2", "20000"]), Value::Nil);
    }
    assert_eq!(contended_keys(&ok(&mut admin, &["LOCK.CONTENDED"])), keys(&["lock:a", "other:b"]));

    apply(&mut admin, MONITOR_AND_ADMIN);
    apply(&mut admin, APP);
    for (user, rules) in [
        ("lock-keys", &["~lock:*"][..]),
        ("lock-reads", &["%R~lock:*"]),
        ("writes-only", &["%W~*"]),
        ("no-keys", &[]),
    ] {
        let mut words = vec!["ACL", "SETUSER", user, "on", ">pw", "resetkeys"];
        words.extend(rules);
        words.extend(["-@all", "+lock.contended"]);
        ok(&mut admin, &words);
    }
    // The module asks ACL whether the user may read each key (its
    // selectors' patterns too: app may LOCK.INFO lock:* through its
    // selector).
    for (user, password, expected) in [
        ("monitor", PASSWORD, &["lock:a"][..]),
        ("lock-admin", PASSWORD, &["lock:a"]),
        ("app", PASSWORD, &["lock:a"]),
        ("lock-keys", "pw", &["lock:a"]),
        ("lock-reads", "pw", &["lock:a"]),
        ("writes-only", "pw", &[]),
        ("no-keys", "pw", &[]),
    ] {
        let mut c = login(&server, user, password);
        assert_eq!(contended_keys(&ok(&mut c, &["LOCK.CONTENDED"])), keys(expected), "{user}");
    }
    assert_eq!(contended_keys(&ok(&mut admin, &["LOCK.CONTENDED"])), keys(&["lock:a", "other:b"]));

    // A script's client has no user the module can read: nothing listed,
    // even to the default user who sees every key otherwise.
    let script = "return redis.call('LOCK.CONTENDED')";
    assert_eq!(contended_keys(&ok(&mut admin, &["EVAL", script, "0"])), BTreeSet::new());
}
