//! The checker: a breadth-first search of every state reachable from the
//! initial one. Each state is visited once, known by a 64-bit fingerprint
//! of its contents (as TLC does: two distinct states with the same
//! fingerprint would hide the second one; with n states the chance is
//! about n^2 / 2^65, under 10^-5 for the model's few million); with a
//! model's symmetries, once per class of states alike up to a relabelling
//! (`Model::canonical`). Every state
//! is checked against the model's properties as it is found; the first
//! violation ends the search, and the actions that lead to it are the
//! counterexample, a shortest one because the search goes level by level.
//!
//! The search keeps the fingerprints, one parent link per state (to
//! rebuild a path) and the states of the level being expanded; the full
//! states of earlier levels are dropped.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::{Duration, Instant};

/// What a model gives the checker.
pub trait Model {
    type State: Clone + Hash;
    type Action: Copy;
    /// Where every path starts.
    fn init(&self) -> Self::State;
    /// The actions enabled in `state`, pushed onto `out`.
    fn actions(&self, state: &Self::State, out: &mut Vec<Self::Action>);
    /// The state after `action`.
    fn next(&self, state: &Self::State, action: Self::Action) -> Self::State;
    /// The property `state` breaks, if any.
    fn violation(&self, state: &Self::State) -> Option<&'static str>;
    /// Symmetry reduction: the one labelling of `state`'s class under the
    /// model's symmetries (say, its interchangeable nodes renumbered) that
    /// the checker knows the class by, when it is not `state` itself; so
    /// the checker visits one state of each class. Sound when every
    /// labelling of a state has the same successors, relabelled alike, and
    /// breaks the same properties. None by default: no symmetry.
    fn canonical(&self, _state: &Self::State) -> Option<Self::State> {
        None
    }
}

/// What a search found.
pub struct Outcome<M: Model> {
    /// Distinct states reached (checked).
    pub states: usize,
    /// The deepest level reached: the longest of the shortest paths.
    pub depth: usize,
    pub elapsed: Duration,
    /// The search stopped at `states_max` before it had seen everything.
    pub incomplete: bool,
    pub counterexample: Option<Counterexample<M>>,
}

/// A path from the initial state to one that breaks `property`.
pub struct Counterexample<M: Model> {
    pub property: &'static str,
    /// Each action, with the state it led to.
    pub steps: Vec<(M::Action, M::State)>,
}

/// Fingerprints are already uniform: the table uses them as they are.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn fingerprint<S: Hash>(state: &S) -> u64 {
    let mut h = Fingerprint { a: 0x243F_6A88_85A3_08D3, b: 0x1319_8A2E_0370_7344 };
    state.hash(&mut h);
    h.finish()
}

/// The fingerprint of `state`'s class: its canonical labelling's.
/// Whichever labelling a path reaches first is the one expanded, and a
/// counterexample's path replays the actions that reached it, so it is a
/// real path of the model as labelled.
fn class_fingerprint<M: Model>(model: &M, state: &M::State) -> u64 {
    match model.canonical(state) {
        Some(canonical) => fingerprint(&canonical),
        None => fingerprint(state),
    }
}

/// Two multiply-rotate lanes over every field the state's `Hash` writes,
/// each finished by MurmurHash3's avalanche step: fast (a state is a few
/// hundred bytes, hashed for every successor) and spread over all 64 bits.
struct Fingerprint {
    a: u64,
    b: u64,
}

impl Fingerprint {
    fn mix(&mut self, x: u64) {
        self.a = (self.a ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
        self.b = (self.b.rotate_left(17) ^ x).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    }
}

fn avalanche(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^ (x >> 33)
}

impl Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        avalanche(self.a) ^ avalanche(self.b).rotate_left(32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word) ^ ((chunk.len() as u64) << 60));
        }
    }
    fn write_u8(&mut self, x: u8) {
        self.mix(u64::from(x));
    }
    fn write_u16(&mut self, x: u16) {
        self.mix(u64::from(x));
    }
    fn write_u32(&mut self, x: u32) {
        self.mix(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.mix(x as u64);
    }
}

/// No parent: the initial state's link.
const ROOT: u32 = u32::MAX;

/// Explores every state reachable in `model`, at most `states_max` of them.
pub fn check<M: Model>(model: &M, states_max: usize) -> Outcome<M> {
    let started = Instant::now();
    let mut seen: HashMap<u64, u32, BuildHasherDefault<Identity>> = HashMap::default();
    // links[i]: the parent of state i and the action that reached it.
    let mut links: Vec<(u32, Option<M::Action>)> = Vec::new();
    let init = model.init();
    seen.insert(class_fingerprint(model, &init), 0);
    links.push((ROOT, None));
    let mut outcome =
        Outcome { states: 1, depth: 0, elapsed: Duration::ZERO, incomplete: false, counterexample: None };
    if let Some(property) = model.violation(&init) {
        outcome.counterexample = Some(Counterexample { property, steps: Vec::new() });
        return outcome;
    }
    let mut level: Vec<(M::State, u32)> = vec![(init, 0)];
    let mut actions = Vec::new();
    'search: while !level.is_empty() {
        let mut below = Vec::new();
        for (state, id) in &level {
            actions.clear();
            model.actions(state, &mut actions);
            for &action in &actions {
                let next = model.next(state, action);
                let fp = class_fingerprint(model, &next);
                if seen.contains_key(&fp) {
                    continue;
                }
                if links.len() >= states_max {
                    outcome.incomplete = true;
                    break 'search;
                }
                let next_id = links.len() as u32;
                seen.insert(fp, next_id);
                links.push((*id, Some(action)));
                if let Some(property) = model.violation(&next) {
                    let steps = path(model, &links, next_id);
                    outcome.depth = steps.len();
                    outcome.counterexample = Some(Counterexample { property, steps });
                    break 'search;
                }
                below.push((next, next_id));
            }
        }
        if !below.is_empty() {
            outcome.depth += 1;
        }
        level = below;
    }
    outcome.states = links.len();
    outcome.elapsed = started.elapsed();
    outcome
}

/// The actions from the initial state to state `id`, replayed to give the
/// states along the way.
fn path<M: Model>(model: &M, links: &[(u32, Option<M::Action>)], mut id: u32) -> Vec<(M::Action, M::State)> {
    let mut actions = Vec::new();
    while let Some(&(parent, Some(action))) = links.get(id as usize) {
        actions.push(action);
        id = parent;
    }
    actions.reverse();
    let mut state = model.init();
    let mut steps = Vec::with_capacity(actions.len());
    for action in actions {
        state = model.next(&state, action);
        steps.push((action, state.clone()));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two counters up to 5, each step raises one; `bad` is the state
    /// that breaks the property.
    struct Counters {
        bad: Option<(u8, u8)>,
    }

    impl Model for Counters {
        type State = (u8, u8);
        type Action = bool;
        fn init(&self) -> (u8, u8) {
            (0, 0)
        }
        fn actions(&self, s: &(u8, u8), out: &mut Vec<bool>) {
            if s.0 < 5 {
                out.push(false);
            }
            if s.1 < 5 {
                out.push(true);
            }
        }
        fn next(&self, s: &(u8, u8), second: bool) -> (u8, u8) {
            if second {
                (s.0, s.1 + 1)
            } else {
                (s.0 + 1, s.1)
            }
        }
        fn violation(&self, s: &(u8, u8)) -> Option<&'static str> {
            (Some(*s) == self.bad).then_some("the bad state")
        }
    }

    #[test]
    fn finds_a_shortest_path_to_the_bad_state() {
        let outcome = check(&Counters { bad: Some((3, 3)) }, 1000);
        let found = outcome.counterexample.expect("(3, 3) is reachable");
        assert_eq!(found.property, "the bad state");
        assert_eq!(found.steps.len(), 6, "the shortest path has 6 steps");
        assert_eq!(outcome.depth, 6);
        assert_eq!(found.steps.last().map(|s| s.1), Some((3, 3)));
    }

    #[test]
    fn counts_every_state_once_and_stops_at_the_bound() {
        let outcome = check(&Counters { bad: None }, 1000);
        assert!(outcome.counterexample.is_none());
        assert!(!outcome.incomplete);
        assert_eq!(outcome.states, 36, "6 x 6 states");
        assert_eq!(outcome.depth, 10);
        let bounded = check(&Counters { bad: None }, 20);
        assert!(bounded.incomplete);
        assert_eq!(bounded.states, 20);
    }
}
