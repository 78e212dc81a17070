//! What a cluster node's error reply asks of the client: follow the slot
//! elsewhere (`MOVED`), ask another node once (`ASK`), send it again a
//! little later (`TRYAGAIN`), or give up on this member for now
//! (`CLUSTERDOWN`). Pure: the replies are read here, acted on in
//! `cluster.rs`.

/// A node's address, `host:port` as the cluster names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Addr {
    pub host: String,
    pub port: u16,
}

impl Addr {
    /// `host:port`, `[v6]:port`, or `:port` (then the host is `default_host`,
    /// the node that answered: Redis names itself so when it does not know
    /// its own address).
    pub fn parse(text: &str, default_host: &str) -> Option<Addr> {
        let (host, port) = text.rsplit_once(':')?;
        let port = port.parse().ok().filter(|&port| port > 0)?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let host = if host.is_empty() { default_host } else { host };
        if host.is_empty() || host == "?" {
            return None;
        }
        Some(Addr { host: host.to_string(), port })
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A cluster's answer that is not the command's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED slot host:port`: the slot is served there now; the map is
    /// stale.
    Moved { slot: u16, to: Addr },
    /// `ASK slot host:port`: the slot is migrating and the key is not
    /// here (any more): ask that node, this once, with `ASKING`.
    Ask { slot: u16, to: Addr },
    /// `TRYAGAIN`: a multi-key command during a migration, or a waiter
    /// told that its key moved; the same command a little later.
    TryAgain,
    /// `CLUSTERDOWN ...`: the cluster (or this slot) is not served now.
    Down(String),
    /// Not a reply: the master could not be reached (the command was not
    /// sent), and a fresh topology names another one.
    Refetched,
}

impl Redirect {
    /// The redirect an error reply (`code`, `detail`) from the node at
    /// `host` stands for, if it is one. A `MOVED` or `ASK` that cannot be
    /// read is no redirect: the caller sees the error as it is.
    pub fn of(code: &str, detail: &str, host: &str) -> Option<Redirect> {
        let slot_and_addr = || {
            let (slot, addr) = detail.trim().split_once(' ')?;
            let slot: u16 = slot.parse().ok().filter(|&slot| slot < lock_protocol::slot::SLOTS)?;
            Some((slot, Addr::parse(addr.trim(), host)?))
        };
        match code {
            "MOVED" => slot_and_addr().map(|(slot, to)| Redirect::Moved { slot, to }),
            "ASK" => slot_and_addr().map(|(slot, to)| Redirect::Ask { slot, to }),
            "TRYAGAIN" => Some(Redirect::TryAgain),
            "CLUSTERDOWN" => Some(Redirect::Down(format!("CLUSTERDOWN {detail}").trim_end().to_string())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: &str, port: u16) -> Addr {
        Addr { host: host.into(), port }
    }

    #[test]
    fn redirects_are_read_from_error_replies() {
        let of = |code: &str, detail: &str| Redirect::of(code, detail, "10.0.0.9");
        assert_eq!(
            of("MOVED", "3999 127.0.0.1:6381"),
            Some(Redirect::Moved { slot: 3999, to: addr("127.0.0.1", 6381) })
        );
        assert_eq!(
            of("ASK", "16383 h.example:7000"),
            Some(Redirect::Ask { slot: 16383, to: addr("h.example", 7000) })
        );
        // No host: the node that answered.
        assert_eq!(of("MOVED", "1 :7001"), Some(Redirect::Moved { slot: 1, to: addr("10.0.0.9", 7001) }));
        assert_eq!(of("MOVED", "2 [::1]:7002"), Some(Redirect::Moved { slot: 2, to: addr("::1", 7002) }));
        assert_eq!(
            of("TRYAGAIN", "Multiple keys request during rehashing of slot"),
            Some(Redirect::TryAgain)
        );
        assert_eq!(
            of("CLUSTERDOWN", "The cluster is down"),
            Some(Redirect::Down("CLUSTERDOWN The cluster is down".into()))
        );
        assert_eq!(of("CLUSTERDOWN", ""), Some(Redirect::Down("CLUSTERDOWN".into())));
        // Not redirects, or unreadable ones: the error stays an error.
        for (code, detail) in [
            ("ERR", "MOVED 1 h:1"),
            ("MOVED", "16384 h:1"),
            ("MOVED", "x h:1"),
            ("MOVED", "12"),
            ("ASK", "12 h"),
            ("ASK", "12 h:0"),
            ("ASK", "12 ?:7000"),
            ("QUARANTINE", "for 5 ms"),
        ] {
            assert_eq!(of(code, detail), None, "{code} {detail}");
        }
        assert_eq!(addr("::1", 7).to_string(), "[::1]:7");
        assert_eq!(addr("h", 7).to_string(), "h:7");
    }
}
