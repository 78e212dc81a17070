//! A TCP proxy in front of one node, for the nemeses that act on the
//! network between the clients and a node. Every client connects to a node
//! through its proxy, so the proxy can:
//!
//! - lose replies: a reply the node sent is dropped and the connection cut
//!   (the node acted, the client never hears of it);
//! - partition: nothing passes either way, bytes wait in the proxy; on heal
//!   they are either delivered late, in order (a partition shorter than
//!   TCP's timeouts), or the connections are reset (a longer one);
//! - take the node down: connections are cut and new ones refused;
//! - delay requests or replies: each chunk read while the mode is on waits
//!   that long before it is passed on, and the chunks after it on the same
//!   connection wait behind it (TCP order is kept per connection; a new
//!   connection opened after the delay is lifted is not held back, which is
//!   how a second connection's command overtakes the first's);
//! - retarget: new connections go to another upstream (a promoted replica),
//!   existing ones are cut.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Each reply chunk from the node is lost with this probability (per
    /// mille), and its connection cut.
    DropReplies {
        permille: u32,
    },
    /// Nothing passes either way; bytes wait until the mode changes.
    Partition,
    /// Connections are cut and new ones closed at once (as if refused).
    Down,
    /// Each request chunk read in this mode reaches the node this late.
    DelayRequests {
        ms: u64,
    },
    /// Only request chunks that carry a `LOCK.ACQUIRE` (in any letter case,
    /// as Redis reads command names) are held back (and what follows them
    /// on the same connection): a new connection's
    /// handshake is not, so that a client that opens one per call is not
    /// simply cut off.
    DelayAcquires {
        ms: u64,
    },
    /// Each reply chunk read in this mode reaches the client this late.
    DelayReplies {
        ms: u64,
    },
}

impl Mode {
    fn request_delay(self, chunk: &[u8]) -> Option<Duration> {
        match self {
            Mode::DelayRequests { ms } => Some(Duration::from_millis(ms)),
            Mode::DelayAcquires { ms }
                if chunk.windows(12).any(|w| w.eq_ignore_ascii_case(b"LOCK.ACQUIRE")) =>
            {
                Some(Duration::from_millis(ms))
            }
            _ => None,
        }
    }

    fn reply_delay(self) -> Option<Duration> {
        match self {
            Mode::DelayReplies { ms } => Some(Duration::from_millis(ms)),
            _ => None,
        }
    }
}

struct Shared {
    upstream: AtomicU16,
    mode: watch::Sender<Mode>,
    /// Bumped to cut every open connection.
    cuts: watch::Sender<u64>,
    rng: Mutex<StdRng>,
    dropped: AtomicU64,
    /// Request chunks held back (`DelayRequests`, `DelayAcquires`): a
    /// probe checks that its fault took effect.
    delayed: AtomicU64,
}

pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

impl Proxy {
    pub async fn start(upstream: u16, seed: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream: AtomicU16::new(upstream),
            mode: watch::channel(Mode::Pass).0,
            cuts: watch::channel(0).0,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            dropped: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
        });
        let for_accept = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, for_accept.clone()));
            }
        });
        Proxy { port, shared, accept }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Sets the mode; `Down` also cuts every open connection.
    pub fn set_mode(&self, mode: Mode) {
        if mode == Mode::Down {
            self.cut_all();
        }
        self.shared.mode.send_replace(mode);
    }

    /// Back to `Pass`. With `reset`, the connections open now are cut first
    /// (bytes held by a partition are lost); without, held bytes flow on.
    pub fn heal(&self, reset: bool) {
        if reset {
            self.cut_all();
        }
        self.shared.mode.send_replace(Mode::Pass);
    }

    /// New connections go to `upstream`; open ones are cut.
    pub fn retarget(&self, upstream: u16) {
        self.shared.upstream.store(upstream, Ordering::SeqCst);
        self.cut_all();
    }

    pub fn cut_all(&self) {
        self.shared.cuts.send_modify(|generation| *generation += 1);
    }

    /// Replies dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Request chunks held back so far.
    pub fn delayed(&self) -> u64 {
        self.shared.delayed.load(Ordering::SeqCst)
    }
}

/// Waits while the proxy is partitioned; false once the connection must
/// close (cut, or the node is down).
async fn passable(
    mode: &mut watch::Receiver<Mode>,
    cuts: &mut watch::Receiver<u64>,
    generation: u64,
) -> bool {
    loop {
        // Cuts first: a reset heal bumps them before it changes the mode.
        if *cuts.borrow_and_update() != generation {
            return false;
        }
        let current = *mode.borrow_and_update();
        match current {
            Mode::Down => return false,
            Mode::Partition => {}
            Mode::Pass
            | Mode::DropReplies { .. }
            | Mode::DelayRequests { .. }
            | Mode::DelayAcquires { .. }
            | Mode::DelayReplies { .. } => return true,
        }
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { return false },
            changed = cuts.changed() => if changed.is_err() { return false },
        }
    }
}

async fn cut(mut cuts: watch::Receiver<u64>, generation: u64) {
    loop {
        if *cuts.borrow_and_update() != generation {
            return;
        }
        if cuts.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Sleeps `delay`; false if the connection was cut meanwhile.
async fn wait_uncut(delay: Duration, shared: &Shared, generation: u64) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        _ = cut(shared.cuts.subscribe(), generation) => false,
    }
}

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let mut cuts = shared.cuts.subscribe();
    let generation = *cuts.borrow_and_update();
    let mut mode = shared.mode.subscribe();
    // A connection attempt into a partition hangs until it heals.
    if !passable(&mut mode, &mut cuts, generation).await {
        return;
    }
    let upstream = shared.upstream.load(Ordering::SeqCst);
    let server = tokio::select! {
        server = TcpStream::connect(("127.0.0.1", upstream)) => match server {
            Ok(server) => server,
            Err(_) => return, // the node is down: the client sees the connection close
        },
        _ = cut(shared.cuts.subscribe(), generation) => return,
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();

    let requests = {
        let (mut mode, mut cuts) = (shared.mode.subscribe(), shared.cuts.subscribe());
        let for_delay = shared.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if !passable(&mut mode, &mut cuts, generation).await {
                    return;
                }
                let delay = mode.borrow().request_delay(&buf[..n]);
                if let Some(delay) = delay {
                    for_delay.delayed.fetch_add(1, Ordering::SeqCst);
                    if !wait_uncut(delay, &for_delay, generation).await {
                        return;
                    }
                }
                if server_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let replies = {
        let (mut mode, mut cuts) = (shared.mode.subscribe(), shared.cuts.subscribe());
        let shared = shared.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match server_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if !passable(&mut mode, &mut cuts, generation).await {
                    return;
                }
                let current = *mode.borrow();
                if let Some(delay) = current.reply_delay() {
                    if !wait_uncut(delay, &shared, generation).await {
                        return;
                    }
                }
                if let Mode::DropReplies { permille } = current {
                    let roll = shared.rng.lock().unwrap_or_else(|p| p.into_inner()).gen_range(0..1000);
                    if roll < permille {
                        shared.dropped.fetch_add(1, Ordering::SeqCst);
                        return; // both sockets close when this task ends
                    }
                }
                if client_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
        _ = cut(shared.cuts.subscribe(), generation) => {}
    }
}
