//! A cluster's slot map (which master serves each of the 16384 slots) and
//! how it is read from `CLUSTER SHARDS` (Redis 7.0+, Valkey) or, where a
//! server lacks it, `CLUSTER SLOTS`. Pure: the replies come in as values.

use redis::Value;

use super::redirect::Addr;
use lock_protocol::slot::SLOTS;

/// The most masters one cluster member keeps addresses (and connections)
/// for. A reply naming more is refused.
pub(crate) const MASTERS_MAX: usize = 1_000;

/// No master serves the slot (as far as the map knows).
const UNSERVED: u16 = u16::MAX;

const _: () = assert!(MASTERS_MAX < UNSERVED as usize);

/// Which master serves each slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// An index into `masters`, or [`UNSERVED`], per slot.
    owners: Vec<u16>,
    masters: Vec<Addr>,
}

impl Default for SlotMap {
    fn default() -> SlotMap {
        SlotMap { owners: vec![UNSERVED; usize::from(SLOTS)], masters: Vec::new() }
    }
}

impl SlotMap {
    /// The master that serves `slot`, if any.
    pub fn owner(&self, slot: u16) -> Option<&Addr> {
        let index = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(index))
    }

    /// How many slots have a master.
    pub fn served(&self) -> usize {
        self.owners.iter().filter(|&&owner| owner != UNSERVED).count()
    }

    /// Every master that serves a slot, in the order first seen.
    pub fn masters(&self) -> Vec<&Addr> {
        self.masters
            .iter()
            .enumerate()
            .filter(|(i, _)| self.owners.iter().any(|&owner| usize::from(owner) == *i))
            .map(|(_, addr)| addr)
            .collect()
    }

    /// `slot` is served by `master` from now on (a `MOVED`).
    pub fn set(&mut self, slot: u16, master: &Addr) -> Result<(), String> {
        self.set_range(slot, slot, master)
    }

    /// Slots `first..=last` are served by `master` from now on.
    fn set_range(&mut self, first: u16, last: u16, master: &Addr) -> Result<(), String> {
        if first > last || last >= SLOTS {
            return Err(format!("a slot range {first}-{last} out of bounds"));
        }
        let index = self.index_of(master)?;
        for owner in self.owners.get_mut(usize::from(first)..=usize::from(last)).unwrap_or_default() {
            *owner = index;
        }
        Ok(())
    }

    /// `master`'s index in `masters`, added if new.
    fn index_of(&mut self, master: &Addr) -> Result<u16, String> {
        if let Some(index) = self.masters.iter().position(|known| known == master) {
            return Ok(u16::try_from(index).unwrap_or(UNSERVED));
        }
        if self.masters.len() >= MASTERS_MAX {
            self.forget_unused();
        }
        if self.masters.len() >= MASTERS_MAX {
            return Err(format!("the cluster names more than {MASTERS_MAX} masters"));
        }
        self.masters.push(master.clone());
        Ok(u16::try_from(self.masters.len() - 1).unwrap_or(UNSERVED))
    }

    /// Drops the masters that serve no slot any more (renumbering the rest).
    fn forget_unused(&mut self) {
        let mut renumbered = vec![UNSERVED; self.masters.len()];
        let mut kept = Vec::new();
        for (old, addr) in self.masters.drain(..).enumerate() {
            if self.owners.iter().any(|&owner| usize::from(owner) == old) {
                if let Some(new) = renumbered.get_mut(old) {
                    *new = u16::try_from(kept.len()).unwrap_or(UNSERVED);
                }
                kept.push(addr);
            }
        }
        for owner in &mut self.owners {
            *owner = renumbered.get(usize::from(*owner)).copied().unwrap_or(UNSERVED);
        }
        self.masters = kept;
    }

    /// The map a list of `(first, last, master)` ranges describes; `Err`
    /// for a range out of bounds or slots claimed twice.
    fn of_ranges(ranges: Vec<(u16, u16, Addr)>) -> Result<SlotMap, String> {
        let mut map = SlotMap::default();
        for (first, last, master) in ranges {
            if first > last || last >= SLOTS {
                return Err(format!("a slot range {first}-{last} out of bounds"));
            }
            if let Some(slot) = (first..=last).find(|&slot| map.owner(slot).is_some()) {
                return Err(format!("slot {slot} is claimed twice"));
            }
            map.set_range(first, last, &master)?;
        }
        Ok(map)
    }
}

/// The slot map of a `CLUSTER SHARDS` reply from the node at `host`: per
/// shard, its slot ranges and its nodes; a shard's slots go to its node
/// with `role master` and `health online` (none: the slots are not served
/// now, e.g. while a replica is being promoted), at its `tls-port` when
/// the member speaks TLS (`tls`), else its `port`.
pub(crate) fn from_shards(reply: &Value, host: &str, tls: bool) -> Result<SlotMap, String> {
    let mut ranges = Vec::new();
    for shard in array(reply, "CLUSTER SHARDS reply")? {
        let fields = pairs(shard, "shard")?;
        let slots = array(field(&fields, "slots")?, "slots")?;
        let nodes = array(field(&fields, "nodes")?, "nodes")?;
        let mut master = None;
        for node in nodes {
            let node = pairs(node, "node")?;
            let role = text(field(&node, "role")?)?;
            let health = text(field(&node, "health")?)?;
            if role == "master" && health == "online" {
                master = node_addr(&node, host, tls)?;
            }
        }
        let Some(master) = master else { continue };
        for range in slots.chunks(2) {
            let [first, last] = range else { return Err("an odd number of slot bounds".into()) };
            ranges.push((number(first)?, number(last)?, master.clone()));
        }
    }
    SlotMap::of_ranges(ranges)
}

/// The slot map of a `CLUSTER SLOTS` reply from the node at `host`: per
/// range `[first, last, master, replica...]`, each node `[ip, port, ...]`.
pub(crate) fn from_slots(reply: &Value, host: &str) -> Result<SlotMap, String> {
    let mut ranges = Vec::new();
    for range in array(reply, "CLUSTER SLOTS reply")? {
        let range = array(range, "slot range")?;
        let (Some(first), Some(last), Some(master)) = (range.first(), range.get(1), range.get(2)) else {
            return Err("a slot range without its master".into());
        };
        let master = array(master, "master")?;
        let (Some(ip), Some(port)) = (master.first(), master.get(1)) else {
            return Err("a master without its address".into());
        };
        let port = number(port)?;
        let Some(addr) = Addr::parse(&format!("{}:{port}", text(ip)?), host) else { continue };
        ranges.push((number(first)?, number(last)?, addr));
    }
    SlotMap::of_ranges(ranges)
}

/// A node's address in a `CLUSTER SHARDS` entry: its `endpoint` (the one
/// the cluster tells clients to use), else its `ip`, with its `tls-port`
/// or its `port`; `None` when the cluster does not know it (`?`).
fn node_addr(node: &[(String, &Value)], host: &str, tls: bool) -> Result<Option<Addr>, String> {
    let port = match (tls, field(node, "tls-port")) {
        (true, Ok(port)) => number(port)?,
        (true, Err(_)) => {
            return Err("a master without a tls-port (does the cluster run with tls-port set and \
                        tls-cluster yes? else write the member as redis+cluster://)"
                .into())
        }
        (false, _) => number(field(node, "port")?)?,
    };
    let endpoint = match field(node, "endpoint") {
        Ok(endpoint) => text(endpoint)?,
        Err(_) => text(field(node, "ip")?)?,
    };
    Ok(Addr::parse(&format!("{endpoint}:{port}"), host))
}

fn array<'a>(value: &'a Value, what: &str) -> Result<&'a [Value], String> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(format!("{what} is not an array: {other:?}")),
    }
}

/// A flat `name, value, name, value...` array as pairs.
fn pairs<'a>(value: &'a Value, what: &str) -> Result<Vec<(String, &'a Value)>, String> {
    array(value, what)?
        .chunks(2)
        .map(|pair| match pair {
            [name, value] => Ok((text(name)?, value)),
            _ => Err(format!("{what} has an odd number of fields")),
        })
        .collect()
}

fn field<'a>(fields: &[(String, &'a Value)], name: &str) -> Result<&'a Value, String> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| *v).ok_or_else(|| format!("no {name} field"))
}

fn text(value: &Value) -> Result<String, String> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Ok(text.clone()),
        Value::Int(n) => Ok(n.to_string()),
        other => Err(format!("not a string: {other:?}")),
    }
}

fn number(value: &Value) -> Result<u16, String> {
    let n = match value {
        Value::Int(n) => *n,
        other => text(other)?.parse().map_err(|_| format!("not a number: {other:?}"))?,
    };
    u16::try_from(n).map_err(|_| format!("{n} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn addr(host: &str, port: u16) -> Addr {
        Addr { host: host.into(), port }
    }

    /// A `CLUSTER SHARDS` node entry as Redis 7.0 sends it.
    fn node(ip: &str, endpoint: &str, port: i64, role: &str, health: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            bulk("0dcedcb08735caaed7f287b2079dc6a34c0be25d"),
            bulk("port"),
            Value::Int(port),
            bulk("ip"),
            bulk(ip),
            bulk("endpoint"),
            bulk(endpoint),
            bulk("role"),
            bulk(role),
            bulk("replication-offset"),
            Value::Int(0),
            bulk("health"),
            bulk(health),
        ])
    }

    /// A node entry of a cluster with TLS ports (`tls-port`; `port` only
    /// when a plain port is open too).
    fn tls_node(ip: &str, port: Option<i64>, tls_port: i64) -> Value {
        let mut fields = vec![bulk("id"), bulk("0dcedcb08735caaed7f287b2079dc6a34c0be25d")];
        if let Some(port) = port {
            fields.extend([bulk("port"), Value::Int(port)]);
        }
        fields.extend([bulk("tls-port"), Value::Int(tls_port), bulk("ip"), bulk(ip)]);
        fields.extend([bulk("endpoint"), bulk(ip), bulk("role"), bulk("master")]);
        fields.extend([bulk("replication-offset"), Value::Int(0), bulk("health"), bulk("online")]);
        Value::Array(fields)
    }

    /// A TLS member goes to each master's `tls-port`, a plain one to its
    /// `port`; a TLS member of a cluster that announces no TLS port is
    /// told what to check.
    #[test]
    fn tls_members_use_the_tls_ports() {
        let reply = Value::Array(vec![
            shard(&[0, 8000], vec![tls_node("10.0.0.1", Some(7000), 8000)]),
            shard(&[8001, 16383], vec![tls_node("10.0.0.2", None, 8001)]),
        ]);
        let map = from_shards(&reply, "h", true).unwrap();
        assert_eq!(map.masters(), [&addr("10.0.0.1", 8000), &addr("10.0.0.2", 8001)]);
        assert_eq!(from_shards(&reply, "h", false).unwrap_err(), "no port field");
        let plain = Value::Array(vec![shard(
            &[0, 16383],
            vec![node("10.0.0.1", "10.0.0.1", 7000, "master", "online")],
        )]);
        let why = from_shards(&plain, "h", true).unwrap_err();
        assert!(why.starts_with("a master without a tls-port (does the cluster run"), "{why}");
    }

    fn shard(slots: &[i64], nodes: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk("slots"),
            Value::Array(slots.iter().map(|&s| Value::Int(s)).collect()),
            bulk("nodes"),
            Value::Array(nodes),
        ])
    }

    #[test]
    fn shards_give_each_slot_its_online_master() {
        let reply = Value::Array(vec![
            shard(&[0, 5460], vec![node("10.0.0.1", "10.0.0.1", 7000, "master", "online")]),
            // The replica is skipped; the master is found after it.
            shard(
                &[5461, 10000, 10002, 10922],
                vec![
                    node("10.0.0.5", "10.0.0.5", 7005, "replica", "online"),
                    node("10.0.0.2", "db2.example", 7001, "master", "online"),
                ],
            ),
            // A failed master: its slots are not served now.
            shard(&[10923, 16383], vec![node("10.0.0.3", "10.0.0.3", 7002, "master", "fail")]),
            // No slots (a new, empty shard).
            shard(&[], vec![node("10.0.0.4", "10.0.0.4", 7003, "master", "online")]),
        ]);
        let map = from_shards(&reply, "10.0.0.1", false).unwrap();
        assert_eq!(map.owner(0), Some(&addr("10.0.0.1", 7000)));
        assert_eq!(map.owner(5460), Some(&addr("10.0.0.1", 7000)));
        assert_eq!(map.owner(5461), Some(&addr("db2.example", 7001)), "the endpoint, not the ip");
        assert_eq!(map.owner(10001), None, "a hole between two ranges");
        assert_eq!(map.owner(10922), Some(&addr("db2.example", 7001)));
        assert_eq!(map.owner(16383), None);
        assert_eq!(map.served(), 10922);
        assert_eq!(map.masters(), [&addr("10.0.0.1", 7000), &addr("db2.example", 7001)]);
        // An endpoint the cluster does not know: the shard is skipped.
        let unknown = Value::Array(vec![shard(&[0, 1], vec![node("", "?", 7000, "master", "online")])]);
        assert_eq!(from_shards(&unknown, "h", false).unwrap().served(), 0);
        // An empty ip means the node that answered.
        let empty = Value::Array(vec![shard(&[0, 1], vec![node("", "", 7000, "master", "online")])]);
        assert_eq!(from_shards(&empty, "h", false).unwrap().owner(1), Some(&addr("h", 7000)));
    }

    #[test]
    fn slots_give_each_range_its_first_node() {
        let entry = |first: i64, last: i64, ip: &str, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![bulk(ip), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("10.0.0.9"), Value::Int(7009), bulk("replica-id")]),
            ])
        };
        let reply = Value::Array(vec![entry(0, 8191, "10.0.0.1", 7000), entry(8192, 16383, "", 7001)]);
        let map = from_slots(&reply, "10.0.0.1").unwrap();
        assert_eq!(map.owner(8191), Some(&addr("10.0.0.1", 7000)));
        assert_eq!(map.owner(8192), Some(&addr("10.0.0.1", 7001)), "empty ip: the node asked");
        assert_eq!(map.served(), 16384);
    }

    #[test]
    fn malformed_and_contradictory_replies_are_refused() {
        let master = || vec![node("h", "h", 1, "master", "online")];
        for reply in [
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![shard(&[0], master())]),
            Value::Array(vec![shard(&[5, 4], master())]),
            Value::Array(vec![shard(&[0, 16384], master())]),
            Value::Array(vec![shard(&[0, 10], master()), shard(&[10, 20], master())]),
            Value::Array(vec![Value::Array(vec![bulk("slots"), Value::Array(vec![])])]),
        ] {
            assert!(from_shards(&reply, "h", false).is_err(), "{reply:?}");
        }
        assert!(from_slots(&Value::Array(vec![Value::Array(vec![Value::Int(0)])]), "h").is_err());
    }

    #[test]
    fn a_moved_slot_changes_that_slot_only_and_masters_stay_bounded() {
        let mut map = SlotMap::default();
        map.set(7, &addr("a", 1)).unwrap();
        map.set(8, &addr("a", 1)).unwrap();
        map.set(8, &addr("b", 2)).unwrap();
        assert_eq!(
            (map.owner(7), map.owner(8), map.owner(9)),
            (Some(&addr("a", 1)), Some(&addr("b", 2)), None)
        );
        assert!(map.set(SLOTS, &addr("a", 1)).is_err());
        // Masters that serve nothing any more make room for new ones.
        for i in 0..(MASTERS_MAX as u16 + 10) {
            map.set(100, &addr("m", 1000 + i)).unwrap();
        }
        assert!(map.masters.len() <= MASTERS_MAX);
        assert_eq!(map.owner(7), Some(&addr("a", 1)));
        assert_eq!(map.owner(100), Some(&addr("m", 1000 + MASTERS_MAX as u16 + 9)));
        assert_eq!(map.served(), 3);
    }
}
