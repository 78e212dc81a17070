//! `redlock`: take, release, extend and inspect quorum locks, and run a
//! command while holding one (`exec`). See `redlock --help`.

mod cli {
    pub mod exec;
    pub mod exit;
}

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use redlock_client::{Config, Error, Guard, LockInfo, Mode, NodeInfo, Redlock, RetryPolicy};

use cli::exit;

const EXAMPLES: &str = "\
Exit codes:
  0    done
  1    invalid argument
  2    usage error
  69   no quorum: too many nodes unreachable, quarantined, timing out or
       failing (or the rounds took longer than the TTL)
  73   not acquired: another owner holds the lock (acquire, exec, also
       after --wait); release/extend: the token does not hold the lock on
       a majority (it expired or was taken)
  75   exec: the lock was lost while the command ran; the command was
       stopped (SIGTERM, then SIGKILL after --grace)
  126  exec: the command could not be run; 127: it was not found
  exec otherwise exits with the command's own status (128+N if it was
  killed by signal N).

Examples:
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379

  # A cron job that must never run twice at once, on any host: a run that
  # finds the lock held is skipped (exit 73); a run that loses the lock
  # (nodes down, process paused past its validity) is stopped (exit 75).
  */5 * * * *  redlock exec nightly-report --ttl 30000 -- /usr/local/bin/report

  # The same, waiting up to a minute for the previous run to finish:
  redlock exec nightly-report --ttl 30000 --wait 60000 -- /usr/local/bin/report

  # The command sees REDLOCK_RESOURCE, REDLOCK_TOKEN and REDLOCK_FENCING_TOKEN;
  # give the fencing token to the storage so that it refuses stale writers:
  redlock exec db-migrate -- sh -c 'migrate --fence \"$REDLOCK_FENCING_TOKEN\"'

  # Mutual exclusion only, no fencing token (one round trip less; the
  # command gets no REDLOCK_FENCING_TOKEN):
  redlock exec --no-fence nightly-report -- /usr/local/bin/report

  # By hand, in a script (the lock stays until its TTL or the release):
  out=$(redlock acquire deploy --ttl 20000 --wait 5000) || exit 1
  eval \"$out\"      # sets REDLOCK_TOKEN, REDLOCK_FENCING_TOKEN, REDLOCK_VALIDITY_MS
  deploy --fence \"$REDLOCK_FENCING_TOKEN\"
  redlock release deploy --token \"$REDLOCK_TOKEN\"

  # Who holds it, node by node:
  redlock info deploy

  # At most 2 backup jobs at once, cluster-wide (a semaphore with 2 permits;
  # a third run finds both permits taken and exits 73, or waits with --wait):
  redlock exec --mode permit --permits 2 backups -- ./backup.sh

  # Many readers at once, or one writer alone (a read-write lock):
  redlock exec --mode read catalog -- ./export-catalog.sh
  redlock exec --mode write catalog --wait 30000 -- ./rebuild-catalog.sh

  # Several resources at once, all or nothing (one LOCK.MACQUIRE per node;
  # no deadlock whatever order other clients name them in): the command
  # gets one REDLOCK_FENCING_TOKEN for the set, and REDLOCK_RESOURCES lists
  # them, one per line. One --mode for all, or one per resource, in order:
  redlock exec accounts:17 accounts:42 ledger --wait 5000 -- ./transfer.sh
  redlock exec --mode read --mode read --mode write rates fees ledger -- ./post.sh
  out=$(redlock acquire a b c --ttl 20000) && eval \"$out\"
  redlock release a b c --token \"$REDLOCK_TOKEN\"

Modes (--mode, for acquire and exec; release and extend take the same
--mode/--permits so that they count the right quorum; with several
resources, give it once for all or once per resource, and never permit):
  exclusive  the plain lock (LOCK.ACQUIRE), the default: one holder
  read       a read hold (LOCK.SHARED): shared with readers, never a writer
  write      a write hold (LOCK.EXCLUSIVE): no reader, no other writer
  permit     one of --permits permits (LOCK.SEMAPHORE); every client must
             give the same count
exclusive, read and write need a majority (N/2+1) of grants (a set too: a
node counts only if it granted, extended or released the whole set). A semaphore
with L permits needs floor(L*N/(L+1))+1, more than a majority from L=2 on:
with majorities, 3 clients could each hold 2 of 3 nodes while every node has
only 2 holders. For 5 nodes: L=1 -> 3, L=2 or 3 -> 4, L>=4 -> 5 (no node may
be down).";

/// Quorum locks over N Redis masters running the `lock` module.
///
/// Runs the Redlock majority protocol: a lock is held when a majority of
/// the nodes (N/2+1) granted it within its validity (a semaphore with 2 or
/// more permits needs more: see Modes below), and it carries a fencing
/// token that strictly increases from one holder to the next.
#[derive(Parser, Debug)]
#[command(name = "redlock", version, after_help = EXAMPLES)]
struct Cli {
    /// The lock nodes, comma-separated: redis://host:port[/db],...
    #[arg(long, env = "REDLOCK_NODES", value_delimiter = ',', required = true)]
    nodes: Vec<String>,

    /// Timeout for connecting to one node, in ms.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    connect_timeout: u64,

    /// Timeout for one command on one node, in ms.
    #[arg(long, value_name = "MS", default_value_t = 250)]
    timeout: u64,

    #[command(subcommand)]
    command: Command,
}

/// The `--mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModeName {
    /// The plain lock: one holder.
    Exclusive,
    /// A read hold of a read-write lock.
    Read,
    /// The write hold of a read-write lock.
    Write,
    /// One of --permits permits of a semaphore.
    Permit,
}

/// Whether to run the fencing round after the grant.
#[derive(Args, Clone, Copy, Debug)]
struct FenceArgs {
    /// Skip the fencing round: mutual exclusion only, one round trip less,
    /// and no REDLOCK_FENCING_TOKEN (no token that increases across the
    /// holders of the quorum).
    #[arg(long)]
    no_fence: bool,
}

/// What to take (or what was taken, for release/extend).
#[derive(Args, Clone, Debug)]
struct ModeArgs {
    /// Lock kind: the plain lock (the default), a read or write hold of a
    /// read-write lock, or a semaphore permit. With several resources:
    /// once for all, or once per resource in their order (repeated, or
    /// comma-separated); permit takes one resource only.
    #[arg(long, value_enum, value_delimiter = ',')]
    mode: Vec<ModeName>,
    /// The semaphore's permit count (with --mode permit, and required by it).
    #[arg(long, value_name = "N", required_if_eq("mode", "permit"))]
    permits: Option<u32>,
}

impl ModeArgs {
    /// The mode of each of `resources` resources.
    fn modes(&self, resources: usize) -> Result<Vec<Mode>, String> {
        let names = match self.mode.as_slice() {
            [] => vec![ModeName::Exclusive; resources],
            [one] => vec![*one; resources],
            each if each.len() == resources => each.to_vec(),
            each => {
                return Err(format!(
                    "--mode given {} times for {resources} resources: give it once (for all of \
                     them) or once per resource",
                    each.len()
                ))
            }
        };
        let permit = names.contains(&ModeName::Permit);
        if permit && resources > 1 {
            return Err("--mode permit takes one resource: a semaphore permit cannot be part of a set".into());
        }
        match (permit, self.permits) {
            (true, None) => return Err("--mode permit needs --permits".into()),
            (false, Some(_)) => return Err("--permits goes with --mode permit".into()),
            _ => {}
        }
        Ok(names
            .into_iter()
            .map(|name| match name {
                ModeName::Exclusive => Mode::Exclusive,
                ModeName::Read => Mode::Read,
                ModeName::Write => Mode::Write,
                ModeName::Permit => Mode::Permit { permits: self.permits.unwrap_or(0) },
            })
            .collect())
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Take the lock (several resources: all or nothing, one token and one
    /// fencing token for the set) and print its token and fencing token
    /// (as shell assignments). The lock stays held after this exits, until
    /// its TTL runs out or `release`.
    Acquire {
        #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
        resources: Vec<String>,
        /// Time to live, in ms (at most the nodes' lock.max-ttl-ms).
        #[arg(long, value_name = "MS")]
        ttl: u64,
        /// Keep retrying (random delays of 50-200 ms) for up to this long.
        #[arg(long, value_name = "MS", default_value_t = 0)]
        wait: u64,
        #[command(flatten)]
        mode: ModeArgs,
        #[command(flatten)]
        fence: FenceArgs,
    },
    /// Release the lock held with TOKEN, on every node (several resources:
    /// the set acquired together, LOCK.MRELEASE).
    Release {
        #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
        resources: Vec<String>,
        #[arg(long, env = "REDLOCK_TOKEN")]
        token: String,
        #[command(flatten)]
        mode: ModeArgs,
    },
    /// Extend the lock held with TOKEN to TTL from now (several resources:
    /// the set acquired together, LOCK.RENEW).
    Extend {
        #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
        resources: Vec<String>,
        #[arg(long, env = "REDLOCK_TOKEN")]
        token: String,
        #[arg(long, value_name = "MS")]
        ttl: u64,
        #[command(flatten)]
        mode: ModeArgs,
    },
    /// Show LOCK.INFO from every node, as a table.
    Info { resource: String },
    /// Run a command while holding the lock (several resources: all or
    /// nothing, as one set): renewed in the background every ttl/3, the
    /// command stopped if the lock is lost, released when the command
    /// exits. The command gets REDLOCK_RESOURCE (the first resource),
    /// REDLOCK_RESOURCES (all of them, one per line), REDLOCK_TOKEN and
    /// REDLOCK_FENCING_TOKEN (unless --no-fence) in its environment.
    Exec {
        #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
        resources: Vec<String>,
        /// Time to live, in ms; renewed every ttl/3 while the command runs.
        #[arg(long, value_name = "MS", default_value_t = 10_000)]
        ttl: u64,
        /// Keep retrying to acquire for up to this long, in ms (0: one try).
        #[arg(long, value_name = "MS", default_value_t = 0)]
        wait: u64,
        /// After the lock is lost: time between SIGTERM and SIGKILL, in ms.
        #[arg(long, value_name = "MS", default_value_t = 5_000)]
        grace: u64,
        /// Stop renewing after this long, in ms (the command is then
        /// stopped when the lock runs out, exit 75).
        #[arg(long, value_name = "MS", default_value_t = 86_400_000)]
        max_hold: u64,
        #[command(flatten)]
        mode: ModeArgs,
        #[command(flatten)]
        fence: FenceArgs,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redlock: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INVALID);
        }
    };
    let code = runtime.block_on(run(cli));
    // Do not wait for background tasks (a node that does not answer).
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

async fn run(cli: Cli) -> u8 {
    let config = Config {
        connect_timeout: Duration::from_millis(cli.connect_timeout),
        command_timeout: Duration::from_millis(cli.timeout),
        ..Config::default()
    };
    let nodes: Vec<&str> = cli.nodes.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
    let redlock = match Redlock::connect(&nodes, config).await {
        Ok(redlock) => redlock,
        Err(e) => {
            eprintln!("redlock: {e}");
            return exit::code(&e);
        }
    };
    let resources = match cli.command.resources() {
        Ok(resources) => resources,
        Err(why) => {
            eprintln!("redlock: {why}");
            return exit::USAGE;
        }
    };
    let code = match cli.command {
        Command::Acquire { ttl, wait, fence, .. } => {
            acquire(&redlock, &resources, ttl, wait, !fence.no_fence).await
        }
        Command::Release { token, .. } => {
            let released = match resources.as_slice() {
                [(resource, mode)] => redlock.release(resource, &token, *mode).await,
                set => redlock.release_many(&names(set), &token).await,
            };
            match released {
                Ok(tally) => {
                    let what = label(&resources);
                    eprintln!("redlock: released '{what}' on {} of {} nodes", tally.yes, tally.nodes);
                    exit::OK
                }
                Err(e) => failed(&e),
            }
        }
        Command::Extend { token, ttl, .. } => {
            let ttl = Duration::from_millis(ttl);
            let extended = match resources.as_slice() {
                [(resource, mode)] => redlock.extend(resource, &token, *mode, ttl).await,
                set => redlock.extend_many(&names(set), &token, ttl).await,
            };
            match extended {
                Ok(lease) => {
                    let left = lease.deadline.saturating_duration_since(tokio::time::Instant::now());
                    println!("REDLOCK_VALIDITY_MS={}", left.as_millis());
                    exit::OK
                }
                Err(e) => failed(&e),
            }
        }
        Command::Info { resource } => {
            print!("{}", info_table(&redlock.info(&resource).await));
            exit::OK
        }
        Command::Exec { ttl, wait, grace, max_hold, command, fence, .. } => {
            let options = cli::exec::Options {
                fenced: !fence.no_fence,
                ttl: Duration::from_millis(ttl),
                wait: Duration::from_millis(wait),
                grace: Duration::from_millis(grace),
                max_hold: Duration::from_millis(max_hold),
            };
            cli::exec::run(&redlock, &resources, &command, options).await
        }
    };
    // Rounds return at their majority and leave the slower nodes' calls
    // running in the background (for `exec`: the release). Let them end
    // before the runtime shuts down, so that every node gets its command;
    // bounded by the timeouts.
    redlock.settle().await;
    code
}

fn failed(error: &Error) -> u8 {
    eprintln!("redlock: {error}");
    exit::code(error)
}

pub fn retry_policy(wait: Duration) -> RetryPolicy {
    if wait.is_zero() {
        RetryPolicy::attempts(1)
    } else {
        RetryPolicy::within(wait)
    }
}

impl Command {
    /// The resources named, each with its mode (`--mode` once for all, or
    /// once per resource); none for `info`.
    fn resources(&self) -> Result<Vec<(String, Mode)>, String> {
        let (resources, mode) = match self {
            Command::Acquire { resources, mode, .. }
            | Command::Release { resources, mode, .. }
            | Command::Extend { resources, mode, .. }
            | Command::Exec { resources, mode, .. } => (resources, mode),
            Command::Info { .. } => return Ok(Vec::new()),
        };
        let modes = mode.modes(resources.len())?;
        Ok(resources.iter().cloned().zip(modes).collect())
    }
}

fn names(resources: &[(String, Mode)]) -> Vec<&str> {
    resources.iter().map(|(resource, _)| resource.as_str()).collect()
}

/// What messages call the resources: the one, or `{a, b, c}` for a set.
fn label(resources: &[(String, Mode)]) -> String {
    match resources {
        [(one, _)] => one.clone(),
        set => format!("{{{}}}", names(set).join(", ")),
    }
}

/// Takes the lock (one resource, or the set all or nothing) within
/// `policy`, and with `fenced` its fencing token too: an attempt whose
/// fencing round fails is released and retried like one whose grant
/// failed (as when the fencing round was part of every acquire). A fencing
/// round that ends past the validity counts as the rounds taking too long
/// (`ExpiredBeforeUse`, retried), as it did then.
pub async fn take(
    redlock: &Redlock,
    resources: &[(String, Mode)],
    ttl: Duration,
    policy: &RetryPolicy,
    fenced: bool,
) -> Result<(Guard, Option<u64>), Error> {
    policy
        .retry(|| async {
            let guard = match resources {
                [(resource, mode)] => redlock.try_acquire(resource, *mode, ttl).await?,
                set => redlock.try_acquire_many(set, ttl).await?,
            };
            if !fenced {
                return Ok((guard, None));
            }
            match guard.fencing_token().await {
                Ok(fence) => Ok((guard, Some(fence))),
                Err(error) => {
                    let elapsed = guard.lease().start.elapsed();
                    let _ = guard.release().await;
                    Err(match error {
                        Error::Lost { resource, .. } => {
                            let drift = redlock_client::quorum::drift(ttl);
                            Error::ExpiredBeforeUse { resource, ttl, elapsed, drift }
                        }
                        other => other,
                    })
                }
            }
        })
        .await
}

async fn acquire(redlock: &Redlock, resources: &[(String, Mode)], ttl: u64, wait: u64, fenced: bool) -> u8 {
    let policy = retry_policy(Duration::from_millis(wait));
    match take(redlock, resources, Duration::from_millis(ttl), &policy, fenced).await {
        Ok((guard, fence)) => {
            let validity = guard.validity_remaining();
            let held = guard.detach();
            println!("REDLOCK_RESOURCE={}", shell_quote(&held.resource));
            // Only for a set, so that one resource's output is as before.
            if let [_, _, ..] = resources {
                println!("REDLOCK_RESOURCES={}", shell_quote(&names(resources).join("\n")));
            }
            println!("REDLOCK_TOKEN={}", held.token);
            if let Some(fence) = fence {
                println!("REDLOCK_FENCING_TOKEN={fence}");
            }
            println!("REDLOCK_VALIDITY_MS={}", validity.as_millis());
            // Only for the new kinds, so the plain lock's output is as before;
            // `release`/`extend` need them back as --mode/--permits (not for
            // a set, which always needs a majority).
            if let [(_, mode)] = resources {
                if *mode != Mode::Exclusive {
                    println!("REDLOCK_MODE={}", mode.name());
                }
                if let Mode::Permit { permits } = mode {
                    println!("REDLOCK_PERMITS={permits}");
                }
            }
            exit::OK
        }
        Err(e) => failed(&e),
    }
}

/// A word the shell reads back as `text`.
fn shell_quote(text: &str) -> String {
    let plain =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:@%+=,".contains(&b));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// One row per node, or per holder on a node that has several (a
/// read-write lock's readers, a semaphore's permit holders).
fn info_table(nodes: &[NodeInfo]) -> String {
    let header = ["node", "state", "kind", "mode", "holder", "holds", "fence", "ttl-ms", "waiters"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let dash = || "-".to_string();
    for node in nodes {
        let url = node.node.clone();
        match &node.info {
            Ok(None) => rows
                .push([url, "free".to_string()].into_iter().chain(std::iter::repeat_n(dash(), 7)).collect()),
            Ok(Some(LockInfo { refused: Some(refused), kind, waiters, .. })) => rows.push(vec![
                url,
                format!("refused: {} ({} ms)", refused.code, refused.ms),
                kind.clone(),
                dash(),
                dash(),
                "0".to_string(),
                dash(),
                dash(),
                waiters.to_string(),
            ]),
            Ok(Some(info)) if info.holders.is_empty() => rows.push(vec![
                url,
                "held".to_string(),
                info.kind.clone(),
                dash(),
                info.holder.clone(),
                info.holds.to_string(),
                info.fence.to_string(),
                info.ttl_ms.to_string(),
                info.waiters.to_string(),
            ]),
            Ok(Some(info)) => {
                let kind = match info.permits {
                    Some(permits) => format!("{}/{permits}", info.kind),
                    None => info.kind.clone(),
                };
                for holder in &info.holders {
                    rows.push(vec![
                        url.clone(),
                        "held".to_string(),
                        kind.clone(),
                        holder.mode.clone(),
                        holder.holder.clone(),
                        info.holds.to_string(),
                        holder.fence.to_string(),
                        holder.ttl_ms.to_string(),
                        info.waiters.to_string(),
                    ]);
                }
            }
            Err(why) => rows.push(vec![url, format!("error: {why}")]),
        }
    }
    let columns = header.len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter(|r| r.len() == columns).map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| if row.len() == columns { format!("{cell:<w$}") } else { cell.clone() })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("job-1"), "job-1");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn info_lists_every_holder_of_a_semaphore() {
        use redlock_client::HolderInfo;
        let permit = |holder: &str, fence| HolderInfo {
            holder: holder.into(),
            mode: "permit".into(),
            fence,
            ttl_ms: 900,
            deadline_ms: 0,
        };
        let nodes = [
            NodeInfo {
                node: "n1".into(),
                info: Ok(Some(LockInfo {
                    kind: "semaphore".into(),
                    holds: 2,
                    permits: Some(2),
                    holders: vec![permit("aaa", 7), permit("bbb", 9)],
                    ..LockInfo::default()
                })),
            },
            NodeInfo { node: "n2".into(), info: Ok(None) },
        ];
        let table = info_table(&nodes);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].starts_with("node") && lines[0].contains("mode"), "{table}");
        assert!(lines[1].contains("semaphore/2") && lines[1].contains("aaa") && lines[1].contains("permit"));
        assert!(lines[2].contains("bbb") && lines[2].contains(" 9 "), "{table}");
        assert!(lines[3].starts_with("n2") && lines[3].contains("free"), "{table}");
    }

    #[test]
    fn modes_from_flags() {
        use ModeName::*;
        let one = |mode, permits| ModeArgs { mode: vec![mode], permits }.modes(1);
        assert_eq!(ModeArgs { mode: vec![], permits: None }.modes(1), Ok(vec![Mode::Exclusive]));
        assert_eq!(one(Exclusive, None), Ok(vec![Mode::Exclusive]));
        assert_eq!(one(Read, None), Ok(vec![Mode::Read]));
        assert_eq!(one(Write, None), Ok(vec![Mode::Write]));
        assert_eq!(one(Permit, Some(2)), Ok(vec![Mode::Permit { permits: 2 }]));
        assert!(one(Permit, None).is_err());
        assert!(one(Read, Some(2)).is_err());
        // Several resources: none or one --mode for all, or one each.
        let many = |mode: Vec<ModeName>, n| ModeArgs { mode, permits: None }.modes(n);
        assert_eq!(many(vec![], 3), Ok(vec![Mode::Exclusive; 3]));
        assert_eq!(many(vec![Read], 2), Ok(vec![Mode::Read; 2]));
        assert_eq!(many(vec![Read, Write, Exclusive], 3), Ok(vec![Mode::Read, Mode::Write, Mode::Exclusive]));
        assert!(many(vec![Read, Write], 3).unwrap_err().contains("--mode given 2 times for 3 resources"));
        let permit = ModeArgs { mode: vec![Permit], permits: Some(2) }.modes(2);
        assert!(permit.unwrap_err().contains("cannot be part of a set"));
    }

    #[test]
    fn several_resources_parse_before_the_command() {
        let cli = Cli::try_parse_from([
            "redlock",
            "--nodes",
            "redis://n1",
            "exec",
            "a",
            "b",
            "--mode",
            "read,write",
            "c",
            "--mode",
            "exclusive",
            "--ttl",
            "900",
            "--",
            "sh",
            "-c",
            "x",
        ])
        .unwrap();
        let resources = cli.command.resources().unwrap();
        let expected = [("a", Mode::Read), ("b", Mode::Write), ("c", Mode::Exclusive)];
        assert_eq!(resources, expected.map(|(r, m)| (r.to_string(), m)));
        let Command::Exec { command, ttl, .. } = cli.command else { panic!("exec") };
        assert_eq!((command.len(), ttl), (3, 900));
        assert_eq!(label(&resources), "{a, b, c}");
        // One resource, as before.
        let cli =
            Cli::try_parse_from(["redlock", "--nodes", "n", "release", "deploy", "--token", "t"]).unwrap();
        assert_eq!(cli.command.resources().unwrap(), [("deploy".to_string(), Mode::Exclusive)]);
        assert!(Cli::try_parse_from(["redlock", "--nodes", "n", "acquire", "--ttl", "5"]).is_err(), "none");
    }

    #[test]
    fn the_cli_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
