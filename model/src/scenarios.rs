//! The runs: the module's protocol under every fault (no violation), the
//! plain recipe under each of its classic faults, and the module's protocol
//! with each planted bug (each must be found).

use crate::check::{self, Outcome};
use crate::protocol::{
    Bug, Config, Faults, LockModel, Protocol, LEFT_BEHIND, MUTUAL_EXCLUSION, TOKEN_ORDER, WRITE_ORDER,
};

/// A search stops here, found or not: far above the full check's states.
pub const STATES_MAX: usize = 20_000_000;

pub struct Scenario {
    pub name: &'static str,
    pub config: Config,
    /// The property the checker must find broken; `None`: none may be.
    pub expect: Option<&'static str>,
}

fn with(protocol: Protocol, faults: Faults, bug: Option<Bug>) -> Config {
    Config { faults, bug, ..Config::new(protocol) }
}

/// Every run: the module's protocol under each fault, the plain recipe's
/// classic failures, the planted bugs.
pub fn all() -> Vec<Scenario> {
    let module = Protocol::Module;
    let plain = Protocol::Plain;
    let only = |set: fn(&mut Faults)| {
        let mut faults = Faults::NONE;
        set(&mut faults);
        faults
    };
    let restart_lost = only(|f| f.restart_lost = true);
    let restart_kept = only(|f| f.restart_kept = true);
    let clock_step = only(|f| f.clock_step = true);
    let loss = only(|f| f.message_loss = true);
    let step_restart = Faults { clock_step: true, ..restart_kept };
    let pause = only(|f| f.pause = true);
    let scenario =
        |name, protocol, faults, bug, expect| Scenario { name, config: with(protocol, faults, bug), expect };
    vec![
        scenario("module-restart-lost", module, restart_lost, None, None),
        // A step moves no lease of a running node (the module clock): it
        // counts when a restart re-anchors that clock, with the restart
        // grace and the start floor.
        Scenario {
            name: "module-clock-step-restart",
            config: Config { horizon: 2, ..with(module, step_restart, None) },
            expect: None,
        },
        scenario("module-loss", module, loss, None, None),
        scenario("module-pause", module, pause, None, None),
        scenario("plain-restart", plain, restart_lost, None, Some(MUTUAL_EXCLUSION)),
        scenario("plain-pause", plain, pause, None, Some(WRITE_ORDER)),
        scenario("plain-clock-step", plain, clock_step, None, Some(MUTUAL_EXCLUSION)),
        scenario("bug-quarantine-short", module, restart_lost, Some(Bug::QuarantineShort), Some(TOKEN_ORDER)),
        scenario(
            "bug-fence-round-skipped",
            module,
            Faults::NONE,
            Some(Bug::FenceRoundSkipped),
            Some(TOKEN_ORDER),
        ),
        scenario("bug-no-start-floor", module, restart_kept, Some(Bug::NoStartFloor), Some(TOKEN_ORDER)),
        Scenario {
            name: "bug-no-restart-grace",
            config: Config { horizon: 2, ..with(module, step_restart, Some(Bug::NoRestartGrace)) },
            expect: Some(MUTUAL_EXCLUSION),
        },
        scenario("bug-no-drift", module, Faults::NONE, Some(Bug::NoDrift), Some(MUTUAL_EXCLUSION)),
        scenario(
            "bug-unordered-connection",
            module,
            Faults::NONE,
            Some(Bug::UnorderedConnection),
            Some(LEFT_BEHIND),
        ),
    ]
}

pub fn run(scenario: &Scenario, states_max: usize) -> Outcome<LockModel> {
    check::check(&LockModel::new(scenario.config), states_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Model;
    use crate::protocol::{narrate, Action, Phase, State};

    /// Runs the scenario named `name` and checks its outcome: complete,
    /// and the expected property broken (with its path printed) or none.
    fn check(name: &str) -> Vec<Action> {
        let scenario = all().into_iter().find(|s| s.name == name).expect("a scenario of that name");
        let outcome = run(&scenario, STATES_MAX);
        println!(
            "{name}: {} states, depth {}, {:.1} s",
            outcome.states,
            outcome.depth,
            outcome.elapsed.as_secs_f64()
        );
        assert!(!outcome.incomplete, "{name}: the search reached its bound of {STATES_MAX} states");
        let found = outcome.counterexample.as_ref().map(|c| c.property);
        if let Some(c) = &outcome.counterexample {
            println!("{}", narrate(&LockModel::new(scenario.config), &c.steps));
        }
        assert_eq!(found, scenario.expect, "{name}");
        outcome.counterexample.map(|c| c.steps.into_iter().map(|(a, _)| a).collect()).unwrap_or_default()
    }

    // The module's protocol: every state of each run, no violation.

    #[test]
    fn module_survives_a_restart_that_lost_its_locks() {
        check("module-restart-lost");
    }

    #[test]
    fn module_survives_a_clock_step_and_an_always_restart() {
        check("module-clock-step-restart");
    }

    #[test]
    fn module_survives_a_lost_request() {
        check("module-loss");
    }

    #[test]
    fn module_survives_a_pause_past_the_validity() {
        check("module-pause");
    }

    // The plain recipe: Kleppmann's counterexamples.

    #[test]
    fn plain_redlock_loses_mutual_exclusion_to_a_restart_without_fsync() {
        let path = check("plain-restart");
        assert!(path.iter().any(|a| matches!(a, Action::Restart { kept: false, .. })), "{path:?}");
    }

    #[test]
    fn plain_redlock_lets_a_paused_holder_write_after_its_successor() {
        let path = check("plain-pause");
        assert!(path.iter().any(|a| matches!(a, Action::Check { pause: true, .. })), "{path:?}");
        assert!(
            matches!(path.last(), Some(Action::Write { .. })),
            "the paused write is the last step: {path:?}"
        );
    }

    #[test]
    fn plain_redlock_loses_mutual_exclusion_to_a_clock_step() {
        let path = check("plain-clock-step");
        assert!(path.iter().any(|a| matches!(a, Action::Step { forward: true, .. })), "{path:?}");
    }

    // Bugs planted in the module's protocol: each is found.

    #[test]
    fn a_quarantine_shorter_than_the_ttl_is_found() {
        let path = check("bug-quarantine-short");
        assert!(path.iter().any(|a| matches!(a, Action::Restart { kept: false, .. })), "{path:?}");
    }

    #[test]
    fn a_skipped_fence_round_is_found() {
        let path = check("bug-fence-round-skipped");
        assert!(!path.iter().any(|a| matches!(a, Action::Fence { .. })), "{path:?}");
    }

    #[test]
    fn an_always_restart_without_the_start_floor_is_found() {
        let path = check("bug-no-start-floor");
        assert!(path.iter().any(|a| matches!(a, Action::Restart { kept: true, .. })), "{path:?}");
    }

    #[test]
    fn a_restart_without_the_grace_is_found() {
        let path = check("bug-no-restart-grace");
        assert!(path.iter().any(|a| matches!(a, Action::Restart { kept: true, step: 1.., .. })), "{path:?}");
    }

    #[test]
    fn a_validity_without_drift_is_found() {
        check("bug-no-drift");
    }

    #[test]
    fn a_release_overtaking_its_grant_is_found() {
        check("bug-unordered-connection");
    }

    /// The module's model with a goal in place of its properties: the
    /// checker finds a path to the goal if the model can reach it.
    struct Reach {
        model: LockModel,
        goal: fn(&State) -> bool,
    }

    impl Model for Reach {
        type State = State;
        type Action = Action;
        fn init(&self) -> State {
            self.model.init()
        }
        fn actions(&self, s: &State, out: &mut Vec<Action>) {
            self.model.actions(s, out)
        }
        fn next(&self, s: &State, a: Action) -> State {
            self.model.next(s, a)
        }
        fn violation(&self, s: &State) -> Option<&'static str> {
            (self.goal)(s).then_some("goal")
        }
    }

    /// A model in which nothing happens breaks nothing: the module's runs
    /// do reach what their faults are there to threaten.
    #[test]
    fn the_module_runs_reach_both_holds_after_each_fault() {
        for scenario in all().into_iter().filter(|s| s.expect.is_none()) {
            let faults = scenario.config.faults;
            let goal: fn(&State) -> bool = if faults.pause {
                // A holder paused past its validity while the next one
                // wrote: its write is yet to come.
                |s| {
                    s.resource.last_rank == 2
                        && s.clients.iter().any(|c| matches!(c.phase, Phase::Paused { .. }))
                }
            } else if faults.message_loss {
                |s| s.lost && s.holds == 2
            } else {
                // Both clients held and wrote, a node restarted.
                |s| s.restarted && s.holds == 2 && s.resource.last_rank == 2
            };
            let reach = Reach { model: LockModel::new(scenario.config), goal };
            let outcome = check::check(&reach, STATES_MAX);
            assert!(outcome.counterexample.is_some(), "{}: the goal is never reached", scenario.name);
        }
    }

    #[test]
    fn every_scenario_has_a_test() {
        let source = include_str!("scenarios.rs");
        for scenario in all() {
            let quoted = format!("check(\"{}\")", scenario.name);
            assert!(source.contains(&quoted), "no test runs {}", scenario.name);
        }
    }
}
