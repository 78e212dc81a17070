//! What `redlock` accepts: the flags and subcommands (clap), their help
//! texts, and the resources with their modes read from them.
//!
//! `redlock --help` is short (the commands, a few examples, the exit codes
//! in one breath); `redlock COMMAND --help` is the long help of one
//! command, with its examples and the whole exit-code table.

use std::ffi::{OsStr, OsString};

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand, ValueEnum};
use redlock_client::Mode;

/// The exit-code table, as every long help ends (kept in step with
/// `exit.rs` and client/README.md; a test compares them).
macro_rules! exit_codes {
    () => {
        "\
Exit codes:
  0    done (check: the token is the live grant on a majority)
  1    internal error (the CLI could not start)
  2    usage: a bad flag, argument, node URL or TTL, or an argument the
       nodes refuse (ERR ... out of range): no retry helps
  3    not held: release, extend or check with a token that does not hold
       the lock on a majority (already released, expired, or taken)
  68   unreachable: too many nodes refuse the connection or do not answer
       (or, for a cluster, cannot serve the key: CLUSTERDOWN, no master)
  69   no quorum: too many nodes fail for mixed reasons, or the rounds
       took longer than the TTL
  73   held by another owner (acquire, exec; also after --wait)
  74   quarantined: too many nodes refuse new grants for now (after a
       restart or a promotion); retry after the time the message gives
  75   exec: the lock was lost while the command ran; the command was
       stopped (SIGTERM, then SIGKILL after --grace)
  78   status: a majority can grant, but settings differ between nodes or
       a protection is off on some (the settings are listed)
  126  exec: the command could not be run; 127: it was not found
  exec otherwise exits with the command's own status (128+N if it was
  killed by signal N)."
    };
}

/// The lock kinds, for the long help of the commands that take `--mode`.
macro_rules! modes {
    () => {
        "\
Modes (--mode; release and extend take the same --mode/--permits so that
they count the right quorum; with several resources, give it once for all
or once per resource, and never permit):
  plain      the plain lock (LOCK.ACQUIRE), the default: one holder
  read       a read hold (LOCK.SHARED): shared with readers, never a writer
  write      a write hold (LOCK.EXCLUSIVE): no reader, no other writer
  permit     one of --permits permits (LOCK.SEMAPHORE); every client must
             give the same count
plain, read and write need a majority (N/2+1) of grants (a set too: a
node counts only if it granted, extended or released the whole set). A
semaphore with L permits needs floor(L*N/(L+1))+1, more than a majority
from L=2 on: for 5 nodes, L=1 -> 3, L=2 or 3 -> 4, L>=4 -> 5.

"
    };
}

/// The end of `redlock --help`.
const SHORT_HELP: &str = "\
Examples:
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock exec nightly-report -- /usr/local/bin/report     # never twice at once
  out=$(redlock acquire deploy) && eval \"$out\"             # REDLOCK_TOKEN=...
  redlock release deploy --token \"$REDLOCK_TOKEN\"

Exit codes: 0 done, 2 usage (no retry helps), 3 not held by the token,
68 unreachable, 69 no quorum, 73 held by another owner, 74 quarantined
(retry later), 75 exec: lock lost, 78 status: settings differ or a
protection is off. 'redlock COMMAND --help' says more.";

const EXEC_HELP: &str = concat!(
    "\
Examples:
  # A cron job that must never run twice at once, on any host: a run that
  # finds the lock held is skipped (exit 73); a run that loses the lock
  # (nodes down, process paused past its validity) is stopped (exit 75).
  */5 * * * *  redlock exec nightly-report --ttl 30000 -- /usr/local/bin/report

  # The same, waiting up to a minute for the previous run to finish:
  redlock exec nightly-report --ttl 30000 --wait 60000 -- /usr/local/bin/report

  # Give the fencing token to the storage, so that it refuses stale writers:
  redlock exec db-migrate -- sh -c 'migrate --fence \"$REDLOCK_FENCING_TOKEN\"'

  # Mutual exclusion only, one round trip less (no REDLOCK_FENCING_TOKEN):
  redlock exec --no-fence nightly-report -- /usr/local/bin/report

  # At most 2 backup jobs at once, cluster-wide (a semaphore with 2 permits):
  redlock exec --mode permit --permits 2 backups -- ./backup.sh

  # Many readers at once, or one writer alone (a read-write lock):
  redlock exec --mode read catalog -- ./export-catalog.sh
  redlock exec --mode write catalog --wait 30000 -- ./rebuild-catalog.sh

  # Several resources, all or nothing (no deadlock in any order); one
  # --mode for all, or one per resource:
  redlock exec accounts:17 accounts:42 ledger --wait 5000 -- ./transfer.sh
  redlock exec --mode read --mode read --mode write rates fees ledger -- ./post.sh

",
    modes!(),
    exit_codes!()
);

const ACQUIRE_HELP: &str = concat!(
    "\
Prints shell assignments: REDLOCK_RESOURCE, REDLOCK_RESOURCES (a set only),
REDLOCK_TOKEN, REDLOCK_FENCING_TOKEN (unless --no-fence),
REDLOCK_VALIDITY_MS, and REDLOCK_MODE / REDLOCK_PERMITS for the other kinds.

Examples:
  out=$(redlock acquire deploy --ttl 20000 --wait 5000) || exit
  eval \"$out\"
  deploy --fence \"$REDLOCK_FENCING_TOKEN\"
  redlock release deploy --token \"$REDLOCK_TOKEN\"

  out=$(redlock acquire a b c) && eval \"$out\"     # a set, all or nothing
  redlock release a b c --token \"$REDLOCK_TOKEN\"

",
    modes!(),
    exit_codes!()
);

const RELEASE_HELP: &str = concat!(
    "\
Releasing a lock this token no longer holds (already released, expired, or
taken by another owner) is not an error that a retry fixes: it exits 3 and
says so. For a lock held to protect work, it means another holder may have
done work at the same time.

Examples:
  redlock release deploy --token \"$REDLOCK_TOKEN\"
  redlock release --mode permit --permits 2 backups --token \"$REDLOCK_TOKEN\"
  redlock release a b c --token \"$REDLOCK_TOKEN\"     # a set taken together

",
    exit_codes!()
);

const EXTEND_HELP: &str = concat!(
    "\
Examples:
  redlock extend deploy --token \"$REDLOCK_TOKEN\" --ttl 20000
  redlock extend a b c --token \"$REDLOCK_TOKEN\" --ttl 20000   # a set

",
    exit_codes!()
);

const CHECK_HELP: &str = concat!(
    "\
Example, in a resource server's shell script:
  if redlock check deploy \"$FENCE\"; then apply-change; else refuse; fi

",
    exit_codes!()
);

const STATUS_HELP: &str = concat!(
    "\
Per node: reachable or not, its start-up or promotion quarantine and the ms
left, an evicting maxmemory-policy, its fencing counter, the protections its
settings turn off; then the settings that differ between nodes, and one
line: can a majority grant right now, and if not, why. Exits 0 when a
majority can grant and the nodes agree with every protection on; 78 when a
majority can grant but settings differ or a protection is off; 68, 74 or 69
when no majority can grant (too many unreachable, quarantined, or mixed
causes or nodes without the module).

Examples:
  redlock status
  redlock status || alert-on-call     # in a cron job or a probe

",
    exit_codes!()
);

const INFO_HELP: &str = concat!(
    "\
Example:
  redlock info deploy

",
    exit_codes!()
);

/// Quorum locks (Redlock, with fencing tokens) over N Redis masters or clusters running the lock module
#[derive(Parser, Debug)]
#[command(name = "redlock", version, after_help = SHORT_HELP, disable_help_subcommand = true)]
pub struct Cli {
    /// The quorum's members, each one master (redis://host:port[/db]), one
    /// cluster (redis+cluster://host:port[?addr=host:port&addr=host:port]) or
    /// one master under Sentinel
    /// (redis+sentinel://host:port/master-name[?addr=host:port&addr=host:port])
    #[arg(long, env = "REDLOCK_NODES", value_name = "URL,...", value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,

    /// Timeout for connecting to one node, in ms
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub connect_timeout: u64,

    /// Timeout for one command on one node, in ms
    #[arg(long, value_name = "MS", default_value_t = 250)]
    pub timeout: u64,

    #[command(subcommand)]
    pub command: Command,
}

/// The `--mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeName {
    /// The plain lock: one holder.
    Plain,
    /// A read hold of a read-write lock.
    Read,
    /// The write hold of a read-write lock.
    Write,
    /// One of --permits permits of a semaphore.
    Permit,
}

/// Reads a `--mode` value as `ModeName` does, except that "exclusive"
/// (which could mean `plain` or `write`) is a usage error that says which
/// to write.
#[derive(Clone, Copy, Debug)]
struct ModeParser;

impl TypedValueParser for ModeParser {
    type Value = ModeName;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<ModeName, clap::Error> {
        if value.to_str().is_some_and(|v| v.eq_ignore_ascii_case("exclusive")) {
            let message = format!("{}\n", Mode::EXCLUSIVE_IS_AMBIGUOUS);
            return Err(clap::Error::raw(ErrorKind::InvalidValue, message).with_cmd(cmd));
        }
        EnumValueParser::<ModeName>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(ModeName::value_variants().iter().filter_map(ValueEnum::to_possible_value)))
    }
}

/// Whether to run the fencing round after the grant.
#[derive(Args, Clone, Copy, Debug)]
pub struct FenceArgs {
    /// Skip the fencing round: mutual exclusion only, one round trip less,
    /// and no REDLOCK_FENCING_TOKEN (no token that increases across the
    /// holders of the quorum).
    #[arg(long, verbatim_doc_comment)]
    pub no_fence: bool,
}

/// What to take (or what was taken, for release/extend).
#[derive(Args, Clone, Debug)]
pub struct ModeArgs {
    /// Lock kind: the plain lock (the default), a read or write hold of a
    /// read-write lock, or a semaphore permit. With several resources:
    /// once for all, or once per resource in their order (repeated, or
    /// comma-separated); permit takes one resource only.
    #[arg(long, value_parser = ModeParser, value_delimiter = ',', verbatim_doc_comment)]
    pub mode: Vec<ModeName>,
    /// The semaphore's permit count (with --mode permit, and required by it).
    #[arg(long, value_name = "N", required_if_eq("mode", "permit"))]
    pub permits: Option<u32>,
}

impl ModeArgs {
    /// The mode of each of `resources` resources.
    pub fn modes(&self, resources: usize) -> Result<Vec<Mode>, String> {
        let names = match self.mode.as_slice() {
            [] => vec![ModeName::Plain; resources],
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
                ModeName::Plain => Mode::Plain,
                ModeName::Read => Mode::Read,
                ModeName::Write => Mode::Write,
                ModeName::Permit => Mode::Permit { permits: self.permits.unwrap_or(0) },
            })
            .collect())
    }
}

/// What `acquire` and `exec` take, and how.
#[derive(Args, Clone, Debug)]
pub struct TakeArgs {
    /// The lock's name; several: taken all or nothing, as one set.
    #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
    pub resources: Vec<String>,
    /// Time to live, in ms (at most the nodes' lock.max-ttl-ms); exec
    /// renews it every ttl/3 while the command runs.
    #[arg(long, value_name = "MS", default_value_t = 10_000, verbatim_doc_comment)]
    pub ttl: u64,
    /// Keep retrying (random delays of 50-200 ms) for up to this long, in
    /// ms (0: one try).
    #[arg(long, value_name = "MS", default_value_t = 0, verbatim_doc_comment)]
    pub wait: u64,
    #[command(flatten)]
    pub mode: ModeArgs,
    #[command(flatten)]
    pub fence: FenceArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command while holding the lock; stop it if the lock is lost
    ///
    /// Takes the lock (several resources: all or nothing, as one set),
    /// runs the command in its own process group, renews the lock every
    /// ttl/3, stops the command if the lock is lost (exit 75), and releases
    /// the lock when the command exits. The command gets REDLOCK_RESOURCE
    /// (the first resource), REDLOCK_RESOURCES (all of them, one per line),
    /// REDLOCK_TOKEN and REDLOCK_FENCING_TOKEN (unless --no-fence) in its
    /// environment; SIGINT, SIGTERM and SIGHUP sent to redlock are passed
    /// on to it.
    #[command(verbatim_doc_comment, after_long_help = EXEC_HELP)]
    Exec {
        #[command(flatten)]
        take: TakeArgs,
        /// After the lock is lost: time between SIGTERM and SIGKILL, in ms.
        #[arg(long, value_name = "MS", default_value_t = 5_000)]
        grace: u64,
        /// Stop renewing after this long, in ms (the command is then
        /// stopped when the lock runs out, exit 75).
        #[arg(long, value_name = "MS", default_value_t = 86_400_000, verbatim_doc_comment)]
        max_hold: u64,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Take the lock and print its tokens as shell assignments
    ///
    /// Several resources are taken all or nothing, with one token and one
    /// fencing token for the set. The lock stays held after this exits,
    /// until its TTL runs out or `release`.
    #[command(verbatim_doc_comment, after_long_help = ACQUIRE_HELP)]
    Acquire {
        #[command(flatten)]
        take: TakeArgs,
    },
    /// Release the lock held with a token, on every node
    ///
    /// Several resources: the set acquired together (LOCK.MRELEASE); a
    /// node counts only if it released all of them.
    #[command(verbatim_doc_comment, after_long_help = RELEASE_HELP)]
    Release {
        /// The lock's name; several: the set taken together.
        #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
        resources: Vec<String>,
        /// The token the lock is held with (REDLOCK_TOKEN from acquire).
        #[arg(long, env = "REDLOCK_TOKEN")]
        token: String,
        #[command(flatten)]
        mode: ModeArgs,
    },
    /// Extend the lock held with a token to TTL from now
    ///
    /// Several resources: the set acquired together (LOCK.RENEW); a node
    /// counts only if it extended all of them. Prints REDLOCK_VALIDITY_MS.
    #[command(verbatim_doc_comment, after_long_help = EXTEND_HELP)]
    Extend {
        /// The lock's name; several: the set taken together.
        #[arg(value_name = "RESOURCE", required = true, num_args = 1..)]
        resources: Vec<String>,
        /// The token the lock is held with (REDLOCK_TOKEN from acquire).
        #[arg(long, env = "REDLOCK_TOKEN")]
        token: String,
        /// The new time to live, from now, in ms.
        #[arg(long, value_name = "MS")]
        ttl: u64,
        #[command(flatten)]
        mode: ModeArgs,
    },
    /// Is this fencing token the live grant on a majority? (for resource servers)
    ///
    /// Asks LOCK.CHECK RESOURCE FENCING_TOKEN of every node. Exits 0 when a
    /// majority answers that the token is the lock's current, live grant;
    /// 3 when enough nodes say it is not (released, expired, or a later
    /// holder) that no majority can; 68 or 69 when too many nodes cannot
    /// answer. A resource server handed a fencing token asks the quorum,
    /// not one node, which may be late. Prints nothing on success.
    #[command(verbatim_doc_comment, after_long_help = CHECK_HELP)]
    Check {
        /// The lock's name.
        resource: String,
        /// The fencing token a client presents (its REDLOCK_FENCING_TOKEN).
        #[arg(value_name = "FENCING_TOKEN")]
        fencing_token: u64,
    },
    /// Can a majority grant now? Each node's health (INFO lock), for on-call
    ///
    /// Asks INFO lock of every node (waiting for each answer or its
    /// timeout) and shows, node by node, what stands between the quorum and
    /// a grant. Takes no resource.
    #[command(verbatim_doc_comment, after_long_help = STATUS_HELP)]
    Status,
    /// Show the lock on every node (LOCK.INFO), one row per node or holder
    #[command(verbatim_doc_comment, after_long_help = INFO_HELP)]
    Info {
        /// The lock's name.
        resource: String,
    },
}

impl Command {
    /// The resources named, each with its mode (`--mode` once for all, or
    /// once per resource); none for `info`, `check` and `status`.
    pub fn resources(&self) -> Result<Vec<(String, Mode)>, String> {
        let (resources, mode) = match self {
            Command::Acquire { take } | Command::Exec { take, .. } => (&take.resources, &take.mode),
            Command::Release { resources, mode, .. } | Command::Extend { resources, mode, .. } => {
                (resources, mode)
            }
            Command::Info { .. } | Command::Check { .. } | Command::Status => return Ok(Vec::new()),
        };
        let modes = mode.modes(resources.len())?;
        Ok(resources.iter().cloned().zip(modes).collect())
    }
}

/// The exit-code table of the long help, for the test that keeps it in
/// step with the codes and the README.
#[cfg(test)]
pub const EXIT_CODES: &str = exit_codes!();

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn modes_from_flags() {
        use ModeName::*;
        let one = |mode, permits| ModeArgs { mode: vec![mode], permits }.modes(1);
        assert_eq!(ModeArgs { mode: vec![], permits: None }.modes(1), Ok(vec![Mode::Plain]));
        assert_eq!(one(Plain, None), Ok(vec![Mode::Plain]));
        assert_eq!(one(Read, None), Ok(vec![Mode::Read]));
        assert_eq!(one(Write, None), Ok(vec![Mode::Write]));
        assert_eq!(one(Permit, Some(2)), Ok(vec![Mode::Permit { permits: 2 }]));
        assert!(one(Permit, None).is_err());
        assert!(one(Read, Some(2)).is_err());
        // Several resources: none or one --mode for all, or one each.
        let many = |mode: Vec<ModeName>, n| ModeArgs { mode, permits: None }.modes(n);
        assert_eq!(many(vec![], 3), Ok(vec![Mode::Plain; 3]));
        assert_eq!(many(vec![Read], 2), Ok(vec![Mode::Read; 2]));
        assert_eq!(many(vec![Read, Write, Plain], 3), Ok(vec![Mode::Read, Mode::Write, Mode::Plain]));
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
            "plain",
            "--ttl",
            "900",
            "--",
            "sh",
            "-c",
            "x",
        ])
        .unwrap();
        let resources = cli.command.resources().unwrap();
        let expected = [("a", Mode::Read), ("b", Mode::Write), ("c", Mode::Plain)];
        assert_eq!(resources, expected.map(|(r, m)| (r.to_string(), m)));
        let Command::Exec { command, take, .. } = cli.command else { panic!("exec") };
        assert_eq!((command.len(), take.ttl), (3, 900));
        // One resource, as before.
        let cli =
            Cli::try_parse_from(["redlock", "--nodes", "n", "release", "deploy", "--token", "t"]).unwrap();
        assert_eq!(cli.command.resources().unwrap(), [("deploy".to_string(), Mode::Plain)]);
        assert!(Cli::try_parse_from(["redlock", "--nodes", "n", "acquire", "--ttl", "5"]).is_err(), "none");
    }

    #[test]
    fn the_mode_exclusive_is_refused_as_ambiguous() {
        for value in ["exclusive", "EXCLUSIVE", "read,exclusive"] {
            let words = ["redlock", "--nodes", "n", "acquire", "a", "b", "--mode", value];
            let error = Cli::try_parse_from(words).unwrap_err();
            assert_eq!(error.kind(), clap::error::ErrorKind::InvalidValue, "{value}");
            assert!(error.to_string().contains(Mode::EXCLUSIVE_IS_AMBIGUOUS), "{value}: {error}");
        }
        // The other names still parse, and the help still lists them.
        let cli =
            Cli::try_parse_from(["redlock", "--nodes", "n", "acquire", "a", "--mode", "plain"]).unwrap();
        assert_eq!(cli.command.resources().unwrap(), [("a".to_string(), Mode::Plain)]);
        let mut command = Cli::command();
        let help = command.find_subcommand_mut("acquire").unwrap().render_long_help().to_string();
        assert!(help.contains("Possible values:") && help.contains("- plain:"), "{help}");
    }

    #[test]
    fn acquire_has_a_default_ttl_like_exec() {
        let ttl_of = |words: &[&str]| match Cli::try_parse_from(words).map(|cli| cli.command) {
            Ok(Command::Acquire { take }) | Ok(Command::Exec { take, .. }) => take.ttl,
            other => panic!("{other:?}"),
        };
        assert_eq!(ttl_of(&["redlock", "--nodes", "n", "acquire", "deploy"]), 10_000);
        assert_eq!(ttl_of(&["redlock", "--nodes", "n", "exec", "deploy", "--", "true"]), 10_000);
    }

    #[test]
    fn check_takes_a_resource_and_a_fencing_token() {
        let cli = Cli::try_parse_from(["redlock", "--nodes", "n", "check", "deploy", "42"]).unwrap();
        assert!(
            matches!(cli.command, Command::Check { ref resource, fencing_token: 42 } if resource == "deploy")
        );
        assert!(Cli::try_parse_from(["redlock", "--nodes", "n", "check", "deploy", "-1"]).is_err());
        assert!(Cli::try_parse_from(["redlock", "--nodes", "n", "check", "deploy"]).is_err());
    }

    #[test]
    fn the_cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
