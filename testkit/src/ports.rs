//! Free loopback ports, from one registry per process.

use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

/// Ports handed out by this process, so parallel tests never pick the same
/// one between "found free" and "bound by redis-server".
fn taken_ports() -> &'static Mutex<Vec<u16>> {
    static TAKEN: OnceLock<Mutex<Vec<u16>>> = OnceLock::new();
    TAKEN.get_or_init(|| Mutex::new(Vec::new()))
}

/// A loopback port free now, and `port + 10000` too (cluster mode binds
/// it), not handed out before in this process until [`give_back`].
pub fn free_port() -> u16 {
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0").expect("bind port 0").local_addr().unwrap().port();
        // Cluster mode also binds port + 10000.
        if port > 55_000 {
            continue;
        }
        let mut taken = taken_ports().lock().unwrap();
        if !taken.contains(&port) && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            taken.push(port);
            return port;
        }
    }
    panic!("no free loopback port found");
}

/// Lets [`free_port`] hand out `port` again (its server is gone).
pub(crate) fn give_back(port: u16) {
    if let Ok(mut taken) = taken_ports().lock() {
        taken.retain(|&p| p != port);
    }
}
