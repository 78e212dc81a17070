//! One run of `redlock`: connect to the nodes, run the command asked for,
//! and say how it ended (a message on stderr, an exit code per cause).

use std::time::Duration;

use redlock_client::{Config, Error, Mode, Redlock};

use super::args::{Cli, Command};
use super::exec;
use super::exit;
use super::output::{info_table, shell_quote, status_report};
use super::take::{label, names, retry_policy, take};

pub async fn run(cli: Cli) -> u8 {
    let config = Config {
        connect_timeout: Duration::from_millis(cli.connect_timeout),
        command_timeout: Duration::from_millis(cli.timeout),
        tls: cli.tls.settings(),
        ..Config::default()
    };
    let nodes: Vec<&str> = cli.nodes.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
    let redlock = match Redlock::connect(&nodes, config).await {
        Ok(redlock) => redlock,
        Err(e) => return failed(&e),
    };
    let resources = match cli.command.resources() {
        Ok(resources) => resources,
        Err(why) => {
            eprintln!("redlock: {why}");
            return exit::USAGE;
        }
    };
    let code = match cli.command {
        Command::Acquire { take } => {
            acquire(&redlock, &resources, take.ttl, take.wait, !take.fence.no_fence).await
        }
        Command::Release { token, .. } => release(&redlock, &resources, &token).await,
        Command::Extend { token, ttl, .. } => extend(&redlock, &resources, &token, ttl).await,
        Command::Check { resource, fencing_token } => check(&redlock, &resource, fencing_token).await,
        Command::Info { resource } => {
            print!("{}", info_table(&redlock.info(&resource).await));
            exit::OK
        }
        Command::Status => {
            let status = redlock.status().await;
            print!("{}", status_report(&status));
            exit::status_code(&status)
        }
        Command::Exec { take, grace, max_hold, command } => {
            let options = exec::Options {
                fenced: !take.fence.no_fence,
                ttl: Duration::from_millis(take.ttl),
                wait: Duration::from_millis(take.wait),
                grace: Duration::from_millis(grace),
                max_hold: Duration::from_millis(max_hold),
            };
            exec::run(&redlock, &resources, &command, options).await
        }
    };
    // Rounds return at their majority and leave the slower nodes' calls
    // running in the background (for `exec`: the release). Let them end
    // before the runtime shuts down, so that every node gets its command;
    // bounded by the timeouts.
    redlock.settle().await;
    code
}

/// Says why on stderr; the code of its cause.
fn failed(error: &Error) -> u8 {
    eprintln!("redlock: {}", exit::message(error));
    exit::code(error)
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
                if *mode != Mode::Plain {
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

async fn release(redlock: &Redlock, resources: &[(String, Mode)], token: &str) -> u8 {
    let released = match resources {
        [(resource, mode)] => redlock.release(resource, token, *mode).await,
        set => redlock.release_many(&names(set), token).await,
    };
    match released {
        Ok(tally) => {
            eprintln!("redlock: released '{}' on {} of {} nodes", label(resources), tally.yes, tally.nodes);
            exit::OK
        }
        Err(e) => failed(&e),
    }
}

async fn extend(redlock: &Redlock, resources: &[(String, Mode)], token: &str, ttl: u64) -> u8 {
    let ttl = Duration::from_millis(ttl);
    let extended = match resources {
        [(resource, mode)] => redlock.extend(resource, token, *mode, ttl).await,
        set => redlock.extend_many(&names(set), token, ttl).await,
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

/// Quiet when the token is confirmed: a resource server's script asks
/// `if redlock check ...`.
async fn check(redlock: &Redlock, resource: &str, fencing_token: u64) -> u8 {
    match redlock.check(resource, fencing_token).await {
        Ok(tally) => {
            let code = exit::check_code(&tally);
            if code != exit::OK {
                eprintln!("redlock: {}", exit::check_message(resource, fencing_token, &tally));
            }
            code
        }
        Err(e) => failed(&e),
    }
}
