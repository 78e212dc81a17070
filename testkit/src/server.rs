//! A real `redis-server` (or any binary of the matrix) with the module
//! loaded: its start-up with retries, its process, its log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{cmd, Connection};

use crate::binary::{server_bin, server_name};
use crate::built::{clock_shim_path, module_path};
use crate::dirs::fresh_dir;
use crate::ports::{free_port, give_back};
use crate::tls::TlsPort;
use crate::wait::wait_until;

/// How long a server may take to answer PING after it is spawned.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// From the first server a test process starts: every panic message (a
/// failed assertion anywhere in the test) ends with the server under test.
fn name_server_in_panics() {
    static HOOKED: Once = Once::new();
    HOOKED.call_once(|| {
        let name = server_name();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            eprintln!("server under test: {name}");
        }));
    });
}

/// The `process_id` the server at the other end of `c` reports.
fn process_id(c: &mut Connection) -> Option<u32> {
    let text: String = cmd("INFO").arg("server").query(c).ok()?;
    text.lines().find_map(|line| line.strip_prefix("process_id:")).and_then(|pid| pid.trim().parse().ok())
}

/// How to start a server.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    /// Extra `loadmodule` arguments, e.g. `["max-ttl-ms", "5000"]`.
    pub module_args: Vec<String>,
    /// Extra `--name value` server options, e.g. `("appendonly", "yes")`.
    pub config: Vec<(String, String)>,
    /// Start under the clock shim, reading its offset from this file (a
    /// [`ClockFile`](crate::ClockFile)'s path).
    pub clock_file: Option<PathBuf>,
    /// Do not load the module (for the "plain Redis" baselines).
    pub without_module: bool,
    /// Run in this directory (made by the test, such as a small tmpfs)
    /// instead of a fresh temporary one.
    pub dir: Option<PathBuf>,
    /// Open a TLS port too ([`Server::tls_port`]), as this says.
    pub tls: Option<TlsPort>,
}

impl Opts {
    pub fn new() -> Opts {
        Opts::default()
    }
    pub fn module_arg(mut self, name: &str, value: &str) -> Opts {
        self.module_args.extend([name.to_string(), value.to_string()]);
        self
    }
    pub fn config(mut self, name: &str, value: &str) -> Opts {
        self.config.push((name.to_string(), value.to_string()));
        self
    }
    pub fn aof_always(self) -> Opts {
        self.config("appendonly", "yes").config("appendfsync", "always")
    }
    pub fn clock_file(mut self, path: &Path) -> Opts {
        self.clock_file = Some(path.to_path_buf());
        self
    }
    pub fn dir(mut self, path: &Path) -> Opts {
        self.dir = Some(path.to_path_buf());
        self
    }
    pub fn tls(mut self, port: TlsPort) -> Opts {
        self.tls = Some(port);
        self
    }
}

/// A running redis-server. Killed (SIGKILL, by PID) when dropped.
pub struct Server {
    pub port: u16,
    /// The TLS port, when [`Opts::tls`] asked for one.
    pub tls_port: Option<u16>,
    pub dir: PathBuf,
    pub opts: Opts,
    child: Option<Child>,
}

impl Server {
    pub fn start() -> Server {
        Server::with(Opts::new())
    }

    pub fn with(opts: Opts) -> Server {
        name_server_in_panics();
        // A port can be taken by another process between our probe and the
        // server's bind: try a few, each in a fresh directory (a failed
        // attempt's drop removes its directory, so a shared one would be
        // gone for the next attempt, which then cannot start at all).
        let mut failures = Vec::new();
        for _ in 0..5 {
            let dir = opts.dir.clone().unwrap_or_else(|| fresh_dir("test"));
            let tls_port = opts.tls.as_ref().map(|_| free_port());
            let mut server = Server { port: free_port(), tls_port, dir, opts: opts.clone(), child: None };
            if server.spawn() {
                return server;
            }
            failures.push(format!("port {}: {}", server.port, server.log().trim_end()));
        }
        panic!("could not start {}:\n{}", server_name(), failures.join("\n"));
    }

    /// Spawns the process and waits until it answers as itself (its
    /// `process_id`); false if it exited.
    fn spawn(&mut self) -> bool {
        let mut command = Command::new(server_bin());
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--protected-mode", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if let (Some(tls), Some(port)) = (&self.opts.tls, self.tls_port) {
            command.args(tls.args(port));
            // With tls-cluster, the bus port would follow the TLS port
            // (+10000), which free_port did not check: keep it at the
            // plain port's (and CLUSTER MEET's default).
            if self.opts.config.iter().any(|(name, value)| name == "cluster-enabled" && value == "yes") {
                command.arg("--cluster-port").arg((self.port + 10_000).to_string());
            }
        }
        for (name, value) in &self.opts.config {
            command.arg(format!("--{name}")).arg(value);
        }
        if !self.opts.without_module {
            command.arg("--loadmodule").arg(module_path()).args(&self.opts.module_args);
            // Tests start servers that hold no earlier locks: no restart
            // quarantine unless a test asks for one.
            if !self.opts.module_args.iter().any(|a| a == "quarantine-ms") {
                command.args(["quarantine-ms", "0"]);
            }
        }
        if let Some(file) = &self.opts.clock_file {
            command.env("LD_PRELOAD", clock_shim_path()).env("CLOCKSHIM_FILE", file);
        }
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let child = command.spawn().unwrap_or_else(|e| {
            panic!("spawn {}: {e} (is it installed? scripts/install-deps)", server_name())
        });
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            if let Ok(mut c) = self.try_connect() {
                // The server answering must be ours: another process may
                // have bound the port between our probe and our server's
                // bind (ours then exits with "Failed listening", above).
                // PING also waits out the loading of the dataset (it
                // answers LOADING until then; INFO does not).
                let ours = self.child.as_ref().map(|child| child.id());
                if ours.is_some() && process_id(&mut c) == ours && cmd("PING").query::<String>(&mut c).is_ok()
                {
                    return true;
                }
            }
            sleep(Duration::from_millis(20));
        }
        self.kill();
        panic!(
            "{} on port {} did not answer within {:?}; log: {}",
            server_name(),
            self.port,
            START_DEADLINE,
            self.log()
        );
    }

    /// Whether its process runs (not killed, not exited).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `rediss://HOST:TLS_PORT/` (the host: `localhost` or `127.0.0.1`,
    /// both in the test certificates).
    pub fn tls_url(&self, host: &str) -> String {
        format!("rediss://{host}:{}/", self.tls_port.expect("a server started with a TLS port"))
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(self.url())?;
        let c = client.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        c.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(c)
    }

    /// A new connection with read/write timeouts.
    pub fn conn(&self) -> Connection {
        self.try_connect().unwrap_or_else(|e| panic!("connect to {}: {e}; log: {}", self.url(), self.log()))
    }

    /// The tail of the server log, for failure messages, after a line
    /// naming the server.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("[{} log, last lines]\n{}", server_name(), lines[lines.len().saturating_sub(30)..].join("\n"))
    }

    /// SIGKILL and reap: no shutdown save, no AOF rewrite.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// kill -9, then start again on the same port and directory.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.restart();
    }

    /// Starts a stopped server again (same port, dir and options).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running server");
        let deadline = Instant::now() + START_DEADLINE;
        while !self.spawn() {
            assert!(Instant::now() < deadline, "restart failed; log: {}", self.log());
            sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until the process exits by itself; its exit status.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn signal(&self, signal: &str) {
        let status =
            Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("server {} kept its dir for inspection: {}", self.port, self.dir.display());
        }
        give_back(self.port);
        if let Some(port) = self.tls_port {
            give_back(port);
        }
    }
}

/// Options for a master that starts a full sync at once (the diskless-sync
/// default waits 5 s for more replicas to join).
pub fn fast_sync() -> Opts {
    Opts::new().config("repl-diskless-sync-delay", "0")
}

/// Makes `replica` replicate `master` and waits (bounded) for the link.
pub fn replicate(replica: &Server, master: &Server) -> Duration {
    replicate_to(replica, master.port)
}

/// Makes `replica` replicate the master at `port` (its TLS port, for a
/// replica with `tls-replication yes`) and waits (bounded) for the link.
pub fn replicate_to(replica: &Server, port: u16) -> Duration {
    let t = Instant::now();
    let mut r = replica.conn();
    let ok: String = cmd("REPLICAOF").arg("127.0.0.1").arg(port).query(&mut r).unwrap();
    assert_eq!(ok, "OK");
    wait_until(Duration::from_secs(20), "master_link_status:up", || {
        let text: String = cmd("INFO").arg("replication").query(&mut r).unwrap();
        text.lines().any(|l| l.trim() == "master_link_status:up")
    });
    t.elapsed()
}

/// The server's wall clock (`TIME`) in epoch ms: the module clock starts on
/// it at load.
pub fn server_clock_ms(c: &mut Connection) -> i64 {
    let (secs, micros): (i64, i64) = cmd("TIME").query(c).expect("TIME");
    secs * 1000 + micros / 1000
}

/// `BGREWRITEAOF`, and waits (bounded) until it has finished well: the AOF
/// then holds the data set as it is (and the module's ledger in its RDB
/// preamble), and none of the commands before.
pub fn rewrite_aof(c: &mut Connection) {
    let rewrites = |c: &mut Connection| crate::replies::info_field(c, "persistence", "aof_rewrites");
    let before = rewrites(c);
    let _: String = cmd("BGREWRITEAOF").query(c).expect("BGREWRITEAOF");
    wait_until(Duration::from_secs(20), "the AOF rewrite to finish", || {
        let text: String = cmd("INFO").arg("persistence").query(c).expect("INFO persistence");
        text.contains("aof_rewrite_in_progress:0")
            && text.contains("aof_rewrite_scheduled:0")
            && text.contains("aof_last_bgrewrite_status:ok")
            && rewrites(c) > before
    });
}
