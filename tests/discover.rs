//! What a user discovers inside redis-cli, on the server under test:
//! `COMMAND DOCS` lists every `LOCK.*` command's arguments (types, option
//! tokens, optional and repeated parts), summary, complexity and version,
//! and they read, rendered the way the Redis docs write a syntax, exactly
//! as docs/commands.md gives each usage line; `COMMAND INFO` keeps each
//! command's arity; and a call with too few arguments gets Redis' own
//! arity error (docs/commands.md says why the module does not answer it).

use std::collections::BTreeMap;

use lock_testkit::*;

/// The usage line under each command's heading in docs/commands.md, by
/// command name (upper case).
fn documented_usage() -> BTreeMap<String, String> {
    let path = repo_dir().join("docs/commands.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(3)
        .filter_map(|w| {
            let name = w[0].strip_prefix("### LOCK.")?;
            let usage = w[2].strip_prefix('`')?.strip_suffix('`')?;
            Some((format!("LOCK.{name}"), usage.to_string()))
        })
        .collect()
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A RESP2 flat map (`name value name value ...`) or a RESP3 map.
fn fields(v: &Value) -> BTreeMap<String, Value> {
    match v {
        Value::Array(items) => items.chunks(2).map(|pair| (text(&pair[0]), pair[1].clone())).collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        other => panic!("not a map: {other:?}"),
    }
}

/// One argument of a `COMMAND DOCS` reply, written as a syntax line writes
/// it: `name`, `TOKEN name`, `[...]` when optional, `x [x ...]` when
/// repeated, `<A | B>` for a choice.
fn syntax_of(argument: &Value) -> String {
    let arg = fields(argument);
    let kind = text(&arg["type"]);
    let flags: Vec<String> = match arg.get("flags") {
        Some(Value::Array(f)) | Some(Value::Set(f)) => f.iter().map(text).collect(),
        _ => Vec::new(),
    };
    let token = arg.get("token").map(text);
    let value = match kind.as_str() {
        "pure-token" => String::new(),
        "oneof" | "block" => {
            let Some(Value::Array(subs)) = arg.get("arguments") else {
                panic!("{kind} without arguments: {arg:?}")
            };
            let parts: Vec<String> = subs.iter().map(syntax_of).collect();
            parts.join(if kind == "oneof" { " | " } else { " " })
        }
        _ => text(&arg["name"]),
    };
    let mut one = match (&token, value.is_empty()) {
        (Some(token), true) => token.clone(),
        (Some(token), false) => format!("{token} {value}"),
        (None, _) => value.clone(),
    };
    let optional = flags.iter().any(|f| f == "optional");
    if kind == "oneof" && token.is_none() && !optional {
        one = format!("<{one}>");
    }
    if flags.iter().any(|f| f == "multiple") {
        one = format!("{one} [{value} ...]");
    }
    if optional {
        format!("[{one}]")
    } else {
        one
    }
}

#[test]
fn command_docs_list_every_argument_as_the_reference_gives_it() {
    let server = Server::start();
    let mut c = server.conn();
    let documented = documented_usage();
    let mut listed: Vec<String> =
        cmd("COMMAND").arg("LIST").arg("FILTERBY").arg("MODULE").arg("lock").query(&mut c).unwrap();
    listed.sort();
    let mut names: Vec<String> = documented.keys().map(|n| n.to_lowercase()).collect();
    names.sort();
    assert_eq!(listed, names, "the module's commands are the ones docs/commands.md documents");
    for (name, usage) in &documented {
        let reply: Value = cmd("COMMAND").arg("DOCS").arg(name).query(&mut c).unwrap();
        let docs = fields(&reply);
        let doc = fields(docs.values().next().unwrap_or_else(|| panic!("COMMAND DOCS {name}: {reply:?}")));
        assert_eq!(text(&doc["group"]), "module", "{name}");
        assert_eq!(text(&doc["module"]), "lock", "{name}");
        assert_eq!(text(&doc["since"]), "0.1.0", "{name}");
        assert!(
            !text(&doc["summary"]).is_empty() && text(&doc["complexity"]).starts_with("O("),
            "{name}: {doc:?}"
        );
        let Some(Value::Array(arguments)) = doc.get("arguments") else {
            panic!("{name} lists no arguments: {doc:?}")
        };
        let rendered: Vec<String> = arguments.iter().map(syntax_of).collect();
        assert_eq!(
            format!("{name} {}", rendered.join(" ")),
            *usage,
            "COMMAND DOCS {name} against docs/commands.md"
        );
        // Key arguments point at the command's key spec.
        for argument in arguments {
            let arg = fields(argument);
            if text(&arg["type"]) == "key" {
                assert_eq!(arg.get("key_spec_index"), Some(&Value::Int(0)), "{name}: {arg:?}");
            }
        }
    }
}

#[test]
fn command_info_keeps_the_arity_and_too_few_arguments_get_the_servers_error() {
    let server = Server::start();
    let mut c = server.conn();
    for (name, arity) in
        [("lock.acquire", -4), ("lock.release", 3), ("lock.macquire", -5), ("lock.unquarantine", 2)]
    {
        let reply: Value = cmd("COMMAND").arg("INFO").arg(name).query(&mut c).unwrap();
        let Value::Array(entries) = reply else { panic!("{name}: {reply:?}") };
        let Value::Array(entry) = &entries[0] else { panic!("{name}: {entries:?}") };
        assert_eq!(entry[1], Value::Int(arity), "{name}");
    }
    let e = err_text(cmd("LOCK.ACQUIRE").arg("k").query(&mut c));
    assert_eq!(e, "ERR wrong number of arguments for 'lock.acquire' command");
    let e = err_text(cmd("LOCK.RELEASE").arg("k").arg("t").arg("extra").query(&mut c));
    assert_eq!(e, "ERR wrong number of arguments for 'lock.release' command");
}

#[test]
fn every_info_field_is_in_the_operations_guide() {
    let server = Server::start();
    let mut c = server.conn();
    let info: String = cmd("INFO").arg("lock").query(&mut c).unwrap();
    let path = repo_dir().join("docs/operations.md");
    let guide = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fields: Vec<&str> = info
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name))
        .filter(|n| n.starts_with("lock_"))
        .collect();
    assert!(fields.len() > 40, "{info}");
    for field in fields {
        assert!(
            guide.contains(&format!("`{field}`")),
            "docs/operations.md does not document INFO lock's {field}"
        );
    }
}

/// `MODULE LIST` and `INFO lock` show the workspace version (Cargo.toml's
/// `[workspace.package]`): the integer major*10000+minor*100+patch and the
/// version's text (scripts/release --check compares them with every other
/// artifact's).
#[test]
fn module_list_and_info_show_the_workspace_version() {
    let server = Server::start();
    let mut c = server.conn();
    let version = env!("CARGO_PKG_VERSION");
    let parts: Vec<i64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    let number = parts[0] * 10000 + parts[1] * 100 + parts[2];
    let modules: Vec<Value> = cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    let lock = modules
        .iter()
        .map(fields)
        .find(|m| text(&m["name"]) == "lock")
        .unwrap_or_else(|| panic!("MODULE LIST has no lock: {modules:?}"));
    assert_eq!(lock["ver"], Value::Int(number), "MODULE LIST's ver for {version}: {lock:?}");
    let info: String = cmd("INFO").arg("lock").query(&mut c).unwrap();
    let shown = info.lines().find_map(|l| l.trim_end().strip_prefix("lock_version:"));
    assert_eq!(shown, Some(version), "INFO lock: {info}");
}
