//! `redlock exec`: run a command while holding the lock, as `etcdctl lock`
//! and `consul lock` do.
//!
//! The command runs in its own process group, so that stopping it also stops
//! what it started (a shell's children). Signals sent to `redlock` itself
//! (SIGINT, SIGTERM, SIGHUP) are passed on to that group; the lock is
//! released once the command has exited.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use redlock_client::{Guard, Lost, Mode, Redlock, Watchdog};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use super::exit;
use super::take::{label, retry_policy, take};

#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Run the fencing round and pass REDLOCK_FENCING_TOKEN (the default;
    /// `--no-fence` turns it off).
    pub fenced: bool,
    pub ttl: Duration,
    pub wait: Duration,
    pub grace: Duration,
    pub max_hold: Duration,
}

enum Outcome {
    Exited(std::io::Result<ExitStatus>),
    Lost(Lost),
}

/// Runs `command` while holding `resources` (one, or a set taken all or
/// nothing), each in its mode.
pub async fn run(
    redlock: &Redlock,
    resources: &[(String, Mode)],
    command: &[OsString],
    options: Options,
) -> u8 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("redlock: exec needs a command after --");
        return exit::USAGE;
    };
    let policy = retry_policy(options.wait);
    let taken = take(redlock, resources, options.ttl, &policy, options.fenced).await;
    let (mut guard, fence) = match taken {
        Ok(taken) => taken,
        Err(e) => {
            eprintln!("redlock: not running {}: {}", program.to_string_lossy(), exit::message(&e));
            return exit::code(&e);
        }
    };
    guard.start_watchdog(Watchdog { renewals_max: u32::MAX, duration_max: options.max_hold });

    let mut child = match spawn(program, args, &guard, fence) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("redlock: cannot run {}: {e}", program.to_string_lossy());
            release(guard).await;
            return match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_RUN,
            };
        }
    };
    // The child's pid is also its process group id (process_group(0)).
    let group = child.id().and_then(|pid| i32::try_from(pid).ok());

    let outcome = supervise(&mut child, group, &guard).await;
    match outcome {
        Outcome::Exited(status) => {
            release(guard).await;
            match status {
                Ok(status) => status_code(status),
                Err(e) => {
                    eprintln!("redlock: waiting for the command failed: {e}");
                    exit::CANNOT_RUN
                }
            }
        }
        Outcome::Lost(reason) => {
            eprintln!(
                "redlock: the lock on '{}' is lost ({reason}); stopping the command \
                 (SIGTERM, SIGKILL after {} ms)",
                label(resources),
                options.grace.as_millis()
            );
            stop(&mut child, group, options.grace).await;
            release(guard).await;
            exit::LOST
        }
    }
}

fn spawn(program: &OsString, args: &[OsString], guard: &Guard, fence: Option<u64>) -> std::io::Result<Child> {
    let mut command = Command::new(program);
    let resources: Vec<&str> = guard.resources().iter().map(|(resource, _)| resource.as_str()).collect();
    command
        .args(args)
        .env("REDLOCK_RESOURCE", guard.resource())
        .env("REDLOCK_RESOURCES", resources.join("\n"))
        .env("REDLOCK_TOKEN", guard.token());
    // Without fencing, no token at all: not one inherited from our own
    // environment (an outer `redlock exec`), which would look valid.
    match fence {
        Some(fence) => command.env("REDLOCK_FENCING_TOKEN", fence.to_string()),
        None => command.env_remove("REDLOCK_FENCING_TOKEN"),
    };
    command.process_group(0).kill_on_drop(false).spawn()
}

/// Waits for the command to exit or the lock to be lost, passing on the
/// signals `redlock` receives.
async fn supervise(child: &mut Child, group: Option<i32>, guard: &Guard) -> Outcome {
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut hangup = signal(SignalKind::hangup()).ok();
    loop {
        tokio::select! {
            status = child.wait() => return Outcome::Exited(status),
            reason = &mut lost => return Outcome::Lost(reason),
            Some(()) = recv(&mut interrupt) => send(group, libc::SIGINT),
            Some(()) = recv(&mut terminate) => send(group, libc::SIGTERM),
            Some(()) = recv(&mut hangup) => send(group, libc::SIGHUP),
        }
    }
}

async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

/// SIGTERM to the command's group, SIGKILL after `grace`, then reap it.
async fn stop(child: &mut Child, group: Option<i32>, grace: Duration) {
    send(group, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_ok() {
        return;
    }
    eprintln!("redlock: the command did not stop within {} ms; sending SIGKILL", grace.as_millis());
    send(group, libc::SIGKILL);
    let _ = child.wait().await;
}

fn send(group: Option<i32>, signal: libc::c_int) {
    if let Some(group) = group.filter(|g| *g > 1) {
        // SAFETY: kill(2) has no memory-safety preconditions; a negative pid
        // addresses the process group the command leads.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

async fn release(guard: Guard) {
    if let Err(e) = guard.release().await {
        eprintln!("redlock: releasing: {e}");
    }
}

/// The command's exit code, or 128 + the signal that killed it.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::CANNOT_RUN),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => exit::CANNOT_RUN,
    }
}
