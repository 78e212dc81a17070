//! Slot imports: the waits that keep a key's tokens rising when its slot
//! moves to another master of a cluster.
//!
//! A lock that moves with its slot carries its tokens, and the importing
//! node raises its counter to them when it arrives. A lock released before
//! its slot moved leaves nothing to carry: its last token came from the
//! exporting node's counter, up to a second ahead of that node's clock
//! (`fencing::KEEP_AHEAD_MS`) plus what the two clocks disagree by, while
//! the importer's counter has only its own clock. So from the start of an
//! import until its quarantine (`lock.quarantine-ms`, which covers the
//! clocks' disagreement and that second: docs/safety.md, assumption 2) has
//! run since its end, the importer refuses a new grant in the slot, except
//! on keys whose lock arrived with it. This file is that rule, with no
//! Redis in it; the adapter learns of imports from `CLUSTER SETSLOT`,
//! `CLUSTER ADDSLOTS` and Valkey's atomic slot migration events.

use std::collections::{BTreeMap, HashSet};

use lock_protocol::slot::SLOTS;

/// The end of a wait whose import has not ended yet.
pub const OPEN: i64 = i64::MAX;

/// Keys whose lock arrived, kept apart from their slot's wait, across all
/// waits: past it an arrival is not kept apart (its key waits with the
/// slot: a refusal nobody needed, never a grant too early).
pub const ARRIVED_MAX: usize = 10_000;

#[derive(Clone, Debug, Default)]
struct Wait {
    /// An import runs: the wait lasts until it ends, then `until_ms`.
    open: bool,
    /// When the wait ends (module clock) once no import runs.
    until_ms: i64,
    /// The keys (their `forgetting::key_hash`) whose lock arrived by the
    /// import: the counter was raised to their tokens, so they may be
    /// granted again at once.
    arrived: HashSet<u64>,
}

/// The slots this node waits on after importing them.
#[derive(Clone, Debug, Default)]
pub struct SlotWaits {
    waits: BTreeMap<u16, Wait>,
    arrived: usize,
}

/// A wait that refuses a grant: its slot and its end ([`OPEN`] while the
/// import runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub slot: u16,
    pub until_ms: i64,
}

impl Wait {
    /// When it ends: [`OPEN`] while its import runs.
    fn end(&self) -> i64 {
        if self.open {
            OPEN
        } else {
            self.until_ms
        }
    }
}

impl SlotWaits {
    pub const fn new() -> SlotWaits {
        SlotWaits { waits: BTreeMap::new(), arrived: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }

    /// An import of `slot` started (`CLUSTER SETSLOT <slot> IMPORTING`, an
    /// atomic import's start): the slot waits until the import ends.
    pub fn import_started(&mut self, slot: u16) {
        if slot < SLOTS {
            self.waits.entry(slot).or_default().open = true;
        }
    }

    /// An import of `slot` ended at `now_ms`, or the node took the slot
    /// without one (`CLUSTER SETSLOT <slot> NODE <self>`, `ADDSLOTS`): the
    /// slot waits `length_ms` more. Returns the wait's end.
    pub fn import_ended(&mut self, slot: u16, now_ms: i64, length_ms: i64) -> Option<i64> {
        if slot >= SLOTS || length_ms <= 0 {
            return None;
        }
        let wait = self.waits.entry(slot).or_default();
        wait.open = false;
        wait.until_ms = wait.until_ms.max(now_ms.saturating_add(length_ms));
        Some(wait.until_ms)
    }

    /// A wait as a record set it: `OPEN` (an import runs), 0 (none), or
    /// its end; the keys kept apart stay. Returns whether one is in force.
    pub fn set(&mut self, slot: u16, end_ms: i64, now_ms: i64) -> bool {
        if slot >= SLOTS {
            return false;
        }
        if end_ms == OPEN {
            self.waits.entry(slot).or_default().open = true;
            return true;
        }
        if end_ms <= now_ms {
            if let Some(wait) = self.waits.remove(&slot) {
                self.arrived = self.arrived.saturating_sub(wait.arrived.len());
            }
            return false;
        }
        let wait = self.waits.entry(slot).or_default();
        wait.open = false;
        wait.until_ms = end_ms;
        true
    }

    /// The wait's end once no import runs (0 for none): what a record of a
    /// refused import writes back.
    pub fn closed_end(&self, slot: u16) -> i64 {
        self.waits.get(&slot).map_or(0, |w| w.until_ms)
    }

    /// Whether `slot` waits for an import that has not ended.
    pub fn is_open(&self, slot: u16) -> bool {
        self.waits.get(&slot).is_some_and(|w| w.open)
    }

    /// The import of `slot` did not start after all (the command that
    /// would have started it was refused): the wait is what it was before.
    /// Returns whether an open one changed.
    pub fn cancel_open(&mut self, slot: u16) -> bool {
        match self.waits.get_mut(&slot) {
            Some(wait) if wait.open => {
                wait.open = false;
                true
            }
            _ => false,
        }
    }

    /// A lock arrived at the key (its `key_hash`) of `slot`: while the slot
    /// waits, the key is not refused for it.
    pub fn arrived(&mut self, slot: u16, hash: u64) {
        if self.arrived >= ARRIVED_MAX {
            return;
        }
        if let Some(wait) = self.waits.get_mut(&slot) {
            if wait.arrived.insert(hash) {
                self.arrived += 1;
            }
        }
    }

    /// The wait that refuses a new grant of the key (its slot and
    /// `key_hash`) at `now_ms`, if any. A wait that ended is dropped here.
    pub fn refusal(&mut self, slot: u16, hash: u64, now_ms: i64) -> Option<Waiting> {
        let wait = self.waits.get(&slot)?;
        if wait.end() <= now_ms {
            let ended = wait.arrived.len();
            self.waits.remove(&slot);
            self.arrived = self.arrived.saturating_sub(ended);
            return None;
        }
        (!wait.arrived.contains(&hash)).then_some(Waiting { slot, until_ms: wait.end() })
    }

    /// The waits in force at `now_ms`: (slot, end), for the ledger and
    /// `INFO lock`.
    pub fn in_force(&self, now_ms: i64) -> Vec<(u16, i64)> {
        self.waits.iter().filter(|(_, w)| w.end() > now_ms).map(|(&slot, w)| (slot, w.end())).collect()
    }

    /// Every wait ends (`lock.quarantine-ms 0`, a promotion's own
    /// quarantine covering the node).
    pub fn clear(&mut self) {
        self.waits.clear();
        self.arrived = 0;
    }
}

/// What a `CLUSTER` command about to run says of this node's slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotChange {
    /// `SETSLOT <slot> IMPORTING <node>`: an import starts.
    ImportStarted(Vec<u16>),
    /// `SETSLOT <slot> NODE <this node>`, `ADDSLOTS`, `ADDSLOTSRANGE`: the
    /// node owns these slots from now.
    Owned(Vec<u16>),
    /// `SETSLOT <slot> STABLE`: an import, if one ran, was given up.
    Stable(Vec<u16>),
}

/// Reads a command's arguments (`argv[0]` its name) as a change of this
/// node's slots (`my_id`: its cluster node id); `None` for any other
/// command. Only the form is read: the server still refuses a bad one,
/// after which the change is undone or only costs a wait.
pub fn slot_change(argv: &[&[u8]], my_id: &[u8]) -> Option<SlotChange> {
    let [name, sub, rest @ ..] = argv else { return None };
    if !name.eq_ignore_ascii_case(b"cluster") {
        return None;
    }
    let slot = |arg: &[u8]| std::str::from_utf8(arg).ok()?.parse::<u16>().ok().filter(|s| *s < SLOTS);
    if sub.eq_ignore_ascii_case(b"setslot") {
        let [at, what, more @ ..] = rest else { return None };
        let slots = vec![slot(at)?];
        if what.eq_ignore_ascii_case(b"importing") {
            Some(SlotChange::ImportStarted(slots))
        } else if what.eq_ignore_ascii_case(b"node") {
            more.first().filter(|id| id.eq_ignore_ascii_case(my_id)).map(|_| SlotChange::Owned(slots))
        } else if what.eq_ignore_ascii_case(b"stable") {
            Some(SlotChange::Stable(slots))
        } else {
            None
        }
    } else if sub.eq_ignore_ascii_case(b"addslots") {
        let slots: Vec<u16> = rest.iter().filter_map(|arg| slot(arg)).collect();
        (!slots.is_empty()).then_some(SlotChange::Owned(slots))
    } else if sub.eq_ignore_ascii_case(b"addslotsrange") {
        let mut slots = Vec::new();
        for pair in rest.chunks(2) {
            if let [from, to] = pair {
                if let (Some(from), Some(to)) = (slot(from), slot(to)) {
                    slots.extend(from..=to);
                }
            }
        }
        slots.sort_unstable();
        slots.dedup();
        (!slots.is_empty()).then_some(SlotChange::Owned(slots))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn a_slot_waits_from_its_import_until_the_length_after_its_end() {
        let mut w = SlotWaits::default();
        assert_eq!(w.refusal(7, 1, NOW), None, "no import, no wait");
        w.import_started(7);
        assert_eq!(w.refusal(7, 1, NOW + 3_600_000), Some(Waiting { slot: 7, until_ms: OPEN }));
        assert_eq!(w.refusal(8, 1, NOW), None, "another slot is not touched");
        assert_eq!(w.import_ended(7, NOW, 31_000), Some(NOW + 31_000));
        assert_eq!(w.refusal(7, 1, NOW + 30_999), Some(Waiting { slot: 7, until_ms: NOW + 31_000 }));
        assert_eq!(w.refusal(7, 1, NOW + 31_000), None);
        assert!(w.is_empty(), "an ended wait is dropped");
    }

    #[test]
    fn a_slot_taken_without_an_import_waits_too_and_a_later_end_keeps_the_later() {
        let mut w = SlotWaits::default();
        assert_eq!(w.import_ended(9, NOW, 5_000), Some(NOW + 5_000));
        assert_eq!(w.import_ended(9, NOW - 1_000, 5_000), Some(NOW + 5_000), "never shortened");
        assert_eq!(w.import_ended(9, NOW, 0), None, "no quarantine length, no wait");
        assert_eq!(w.import_ended(SLOTS, NOW, 5_000), None, "no such slot");
        assert_eq!(w.in_force(NOW), vec![(9, NOW + 5_000)]);
    }

    #[test]
    fn a_key_whose_lock_arrived_is_not_refused_but_its_neighbours_are() {
        let mut w = SlotWaits::default();
        w.arrived(3, 42);
        w.import_started(3);
        assert!(w.refusal(3, 42, NOW).is_some(), "an arrival before the wait is not kept");
        w.arrived(3, 42);
        assert_eq!(w.refusal(3, 42, NOW), None);
        assert!(w.refusal(3, 43, NOW).is_some());
    }

    #[test]
    fn arrivals_are_bounded_and_their_count_follows_the_waits() {
        let mut w = SlotWaits::default();
        w.import_started(1);
        for hash in 0..(ARRIVED_MAX as u64 + 5) {
            w.arrived(1, hash);
        }
        assert_eq!(w.arrived, ARRIVED_MAX);
        assert!(w.refusal(1, ARRIVED_MAX as u64 + 1, NOW).is_some(), "past the bound a key waits");
        w.import_ended(1, NOW, 10);
        assert_eq!(w.refusal(1, 0, NOW + 10), None);
        assert_eq!(w.arrived, 0, "the ended wait's arrivals are forgotten");
    }

    #[test]
    fn cluster_commands_that_move_slots_are_read_and_others_are_not() {
        let me = b"0123456789abcdef0123456789abcdef01234567";
        let change = |args: &[&str]| {
            let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            slot_change(&argv, me)
        };
        assert_eq!(
            change(&["CLUSTER", "SETSLOT", "12", "IMPORTING", "x"]),
            Some(SlotChange::ImportStarted(vec![12]))
        );
        assert_eq!(
            change(&["cluster", "setslot", "12", "node", "0123456789ABCDEF0123456789abcdef01234567"]),
            Some(SlotChange::Owned(vec![12]))
        );
        assert_eq!(change(&["cluster", "setslot", "12", "node", "another"]), None, "given to another node");
        assert_eq!(change(&["cluster", "setslot", "12", "stable"]), Some(SlotChange::Stable(vec![12])));
        assert_eq!(change(&["cluster", "setslot", "12", "migrating", "x"]), None, "the exporter's side");
        assert_eq!(change(&["cluster", "setslot", "16384", "importing", "x"]), None, "no such slot");
        assert_eq!(change(&["cluster", "addslots", "3", "1", "x"]), Some(SlotChange::Owned(vec![3, 1])));
        assert_eq!(
            change(&["cluster", "addslotsrange", "5", "7", "6", "8", "9"]),
            Some(SlotChange::Owned(vec![5, 6, 7, 8]))
        );
        assert_eq!(change(&["cluster", "nodes"]), None);
        assert_eq!(change(&["get", "setslot", "1", "importing"]), None);
        assert_eq!(change(&["cluster"]), None);
    }

    #[test]
    fn recorded_waits_are_set_as_written_and_ended_ones_are_dropped() {
        let mut w = SlotWaits::default();
        assert!(!w.set(5, NOW, NOW), "over already");
        assert!(w.set(5, NOW + 100, NOW));
        assert_eq!(w.in_force(NOW), vec![(5, NOW + 100)]);
        assert!(w.set(6, OPEN, NOW), "an import still running at the save");
        assert_eq!(w.in_force(NOW), vec![(5, NOW + 100), (6, OPEN)]);
        assert!(w.is_open(6) && !w.is_open(5) && !w.is_open(4));
        assert!(!w.cancel_open(5), "an ended import's wait stays");
        assert!(w.cancel_open(6));
        assert_eq!(w.in_force(NOW), vec![(5, NOW + 100)]);
        w.import_started(5);
        assert!(w.cancel_open(5));
        assert_eq!(w.in_force(NOW), vec![(5, NOW + 100)], "a refused import leaves the wait it found");
        assert_eq!((w.closed_end(5), w.closed_end(4)), (NOW + 100, 0));
        assert!(w.set(5, OPEN, NOW) && w.is_open(5));
        assert!(w.set(5, NOW + 10, NOW) && !w.is_open(5), "a record sets the end, later or not");
        assert_eq!(w.in_force(NOW), vec![(5, NOW + 10)]);
        assert!(!w.set(5, 0, NOW));
        assert!(w.in_force(NOW).is_empty(), "0: the wait ended");
        w.clear();
        assert!(w.is_empty());
    }
}
