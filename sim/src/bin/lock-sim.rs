//! Runs simulated histories over a range of seeds, split over threads;
//! prints a summary, and for the first failing seed its shortest history.
//!
//!   lock-sim [--seeds FIRST..END] [--threads N] [--rules module|classic]
//!            [--scenario all|gc-pause|clock-jump|restart|upgrade]
//!            [--print SEED]
//!            [--until-failure]
//!
//! `--until-failure` stops at the first failing seed (the smallest: each
//! thread stops once its seeds pass it) and prints how many histories it
//! took: what scripts/sim-mutants reports per mutant.
//!
//! Exit status 1 when a history failed (the summary names the seeds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use lock_sim::node::Rules;
use lock_sim::run::{self, Setup};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seeds = 0u64..1000;
    let mut threads = 2usize;
    let mut rules = Rules::Module;
    let mut scenario = "all".to_string();
    let mut print = None;
    let mut until_failure = false;
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--seeds" => {
                let (a, b) = value.split_once("..").unwrap_or(("0", &value));
                seeds = a.parse().unwrap_or(0)..b.parse().unwrap_or(1000);
                i += 1;
            }
            "--threads" => {
                threads = value.parse().unwrap_or(2).max(1);
                i += 1;
            }
            "--print" => {
                print = value.parse().ok();
                i += 1;
            }
            "--rules" => {
                rules = if value == "classic" { Rules::Classic } else { Rules::Module };
                i += 1;
            }
            "--until-failure" => until_failure = true,
            "--scenario" => {
                scenario = value;
                i += 1;
            }
            other => {
                eprintln!("lock-sim: unknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 1;
    }
    let setup = match scenario.as_str() {
        "all" => Setup { rules, ..Setup::module() },
        "gc-pause" => Setup::gc_pause(rules),
        "clock-jump" => Setup::clock_jump(rules),
        "restart" => Setup::restart(rules),
        // `upgrade-unsafe`: its name when the CI run kept its rewrites and
        // key losses out (docs/evidence.md cites it).
        "upgrade" | "upgrade-unsafe" => Setup { rules, ..Setup::upgrade() },
        other => {
            eprintln!("lock-sim: unknown scenario {other}");
            std::process::exit(2);
        }
    };
    if let Some(seed) = print {
        let outcome = run::run(seed, &setup, &run::schedule(seed, &setup));
        print!("{}", outcome.history);
        std::process::exit(i32::from(!outcome.violations.is_empty()));
    }
    let started = Instant::now();
    let (first, end) = (seeds.start, seeds.end);
    // The smallest failing seed found so far (with --until-failure).
    let smallest = AtomicU64::new(u64::MAX);
    let failing: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads as u64)
            .map(|t| {
                let smallest = &smallest;
                scope.spawn(move || {
                    let mut failing = Vec::new();
                    let mut seed = first + t;
                    while seed < end && !(until_failure && seed > smallest.load(Ordering::Relaxed)) {
                        if run::fails(seed, &setup) {
                            failing.push(seed);
                            smallest.fetch_min(seed, Ordering::Relaxed);
                        }
                        seed += threads as u64;
                    }
                    failing
                })
            })
            .collect();
        let mut all: Vec<u64> = workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect();
        all.sort_unstable();
        all
    });
    if until_failure {
        match failing.first() {
            Some(seed) => println!(
                "lock-sim: first failing seed {seed}, after {} histories, in {:.2} s",
                seed - first + 1,
                started.elapsed().as_secs_f64()
            ),
            None => println!(
                "lock-sim: no failure in {} histories, {:.2} s",
                end.saturating_sub(first),
                started.elapsed().as_secs_f64()
            ),
        }
        std::process::exit(i32::from(!failing.is_empty()));
    }
    let n = end.saturating_sub(first);
    println!(
        "lock-sim: {n} histories ({:?} rules, scenario {scenario}) in {:.1} s on {threads} threads: {} failed",
        setup.rules,
        started.elapsed().as_secs_f64(),
        failing.len()
    );
    if let Some(&seed) = failing.first() {
        println!("failing seeds: {:?}", &failing[..failing.len().min(20)]);
        if let Some((shrunk, faults, outcome)) = run::shrink(seed, &setup) {
            println!(
                "seed {seed}, shrunk to {} cycles per client, faults {faults:?}, message faults {}, pauses {}:",
                shrunk.cycles,
                if shrunk.messages.delay_per_mille > 0 { "on" } else { "off" },
                if shrunk.pause_per_mille > 0 { "on" } else { "off" },
            );
            print!("{}", outcome.history);
        }
        std::process::exit(1);
    }
}
