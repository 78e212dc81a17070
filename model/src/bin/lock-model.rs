//! Runs the model check's scenarios and prints, for each, the states
//! explored, the depth, the time and what was found (with the path of a
//! counterexample).
//!
//!   lock-model [--attempts A,B] [--horizon TICKS] [--delays N] [--faults LIST]
//!              [--restarts N] [--states-max N] [--no-symmetry] [NAME...]
//!
//! LIST: restart-lost,restart-kept,clock-step,loss,pause
//! (comma-separated).
//!
//! All scenarios when none is named; the options change every scenario's
//! setting (a larger check than the tests').
//!
//! Exit status 1 when a scenario's outcome is not the expected one.

use lock_model::protocol::{narrate, LockModel};
use lock_model::scenarios;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut names = Vec::new();
    let mut attempts = None;
    let mut horizon = None;
    let mut delays = None;
    let mut faults: Option<String> = None;
    let mut restarts = None;
    let mut symmetry = true;
    let mut states_max = scenarios::STATES_MAX;
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--attempts" => {
                let (a, b) = value.split_once(',').unwrap_or((&value, &value));
                attempts = Some([a.parse().unwrap_or(1), b.parse().unwrap_or(1)]);
                i += 1;
            }
            "--delays" => {
                delays = value.parse().ok();
                i += 1;
            }
            "--horizon" => {
                horizon = value.parse().ok();
                i += 1;
            }
            "--no-symmetry" => symmetry = false,
            "--restarts" => {
                restarts = value.parse().ok();
                i += 1;
            }
            "--faults" => {
                faults = Some(value.clone());
                i += 1;
            }
            "--states-max" => {
                states_max = value.parse().unwrap_or(states_max);
                i += 1;
            }
            name => names.push(name.to_string()),
        }
        i += 1;
    }
    let mut failed = false;
    println!("{:<32} {:>12} {:>6} {:>9}  found", "scenario", "states", "depth", "time");
    for mut scenario in scenarios::all() {
        if let Some(attempts) = attempts {
            scenario.config.attempts = attempts;
        }
        if let Some(list) = &faults {
            let has = |name: &str| list.split(',').any(|f| f == name);
            scenario.config.faults = lock_model::protocol::Faults {
                restart_lost: has("restart-lost"),
                restart_kept: has("restart-kept"),
                restarts: scenario.config.faults.restarts,
                same_node_twice: scenario.config.faults.same_node_twice,
                clock_step: has("clock-step"),
                message_loss: has("loss"),
                pause: has("pause"),
            };
        }
        if let Some(restarts) = restarts {
            scenario.config.faults.restarts = restarts;
        }
        if let Some(delays) = delays {
            scenario.config.delays = delays;
        }
        if let Some(horizon) = horizon {
            scenario.config.horizon = horizon;
        }
        if !names.is_empty() && !names.iter().any(|n| n == scenario.name) {
            continue;
        }
        let model = if symmetry {
            LockModel::new(scenario.config)
        } else {
            LockModel::without_symmetry(scenario.config)
        };
        let outcome = lock_model::check::check(&model, states_max);
        let found = outcome.counterexample.as_ref().map(|c| c.property);
        let verdict = match (found, outcome.incomplete) {
            (_, true) => "INCOMPLETE (state bound reached)".to_string(),
            (None, false) => "no violation".to_string(),
            (Some(p), false) => p.to_string(),
        };
        println!(
            "{:<32} {:>12} {:>6} {:>8.1}s  {verdict}",
            scenario.name,
            outcome.states,
            outcome.depth,
            outcome.elapsed.as_secs_f64()
        );
        if let Some(c) = &outcome.counterexample {
            print!("{}", narrate(&LockModel::new(scenario.config), &c.steps));
        }
        if outcome.incomplete || found != scenario.expect {
            failed = true;
            println!("  UNEXPECTED: expected {:?}", scenario.expect);
        }
    }
    if failed {
        std::process::exit(1);
    }
}
