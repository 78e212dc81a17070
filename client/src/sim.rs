//! Where a connection and a random number come from: the two seams a
//! deterministic simulation of the client needs, and nothing a user sees.
//!
//! Without the cargo feature `sim` (every build users make), a connection is
//! a TCP socket and randomness is `rand::random`, and nothing here can change
//! that. With it, a simulator that runs the client on a single-threaded
//! Tokio runtime with paused time replaces both for its thread: connections
//! become in-memory streams it serves ([`set_connector`]) and randomness a
//! seeded generator ([`seed`]), so that one seed replays one history
//! exactly. Thread-locals, not `Config` fields, so that the public API and
//! every other build stay as they are: on a single-threaded runtime every
//! task of the client runs on the simulator's thread.

use std::pin::Pin;
use std::task::{Context, Poll};

use rand::distributions::{Distribution, Standard};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls::TlsTarget;

#[cfg(feature = "sim")]
pub use seams::{seed, set_connector, Connect, Connector};

/// A random value: from the thread's seeded generator when a simulator set
/// one, from `rand::random` otherwise.
pub(crate) fn random<T>() -> T
where
    Standard: Distribution<T>,
{
    #[cfg(feature = "sim")]
    if let Some(value) = seams::seeded() {
        return value;
    }
    rand::random()
}

/// Opens a connection to `host:port`, over TLS when `tls` says how (its
/// handshake's failure in words, see `tls.rs`): the simulator's in-memory
/// stream when it set a connector on this thread (plain only), a TCP
/// socket otherwise.
pub(crate) async fn connect(
    host: &str,
    port: u16,
    tls: Option<&TlsTarget>,
) -> Result<(ReadHalf, WriteHalf), String> {
    #[cfg(feature = "sim")]
    if let Some(connector) = seams::connector() {
        if tls.is_some() {
            return Err("the simulator does not speak TLS".into());
        }
        let stream = connector(host, port).await.map_err(|e| format!("connect failed: {e}"))?;
        let (read, write) = tokio::io::split(stream);
        return Ok((ReadHalf::Sim(read), WriteHalf::Sim(write)));
    }
    let failed = |e: std::io::Error| format!("connect failed: {e}");
    let stream = TcpStream::connect((host, port)).await.map_err(failed)?;
    // Lock commands are small and latency-bound.
    stream.set_nodelay(true).map_err(failed)?;
    let Some(tls) = tls else {
        let (read, write) = stream.into_split();
        return Ok((ReadHalf::Tcp(read), WriteHalf::Tcp(write)));
    };
    let stream = tls.handshake(stream, &format!("{host}:{port}")).await?;
    let (read, write) = tokio::io::split(stream);
    Ok((ReadHalf::Tls(read), WriteHalf::Tls(write)))
}

/// The read half of a connection: a TCP socket's, or a TLS stream's.
pub(crate) enum ReadHalf {
    Tcp(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
    #[cfg(feature = "sim")]
    Sim(tokio::io::ReadHalf<tokio::io::DuplexStream>),
}

/// The write half of a connection (see [`ReadHalf`]).
pub(crate) enum WriteHalf {
    Tcp(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
    #[cfg(feature = "sim")]
    Sim(tokio::io::WriteHalf<tokio::io::DuplexStream>),
}

impl ReadHalf {
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, ReadHalf::Tls(_))
    }
}

impl WriteHalf {
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, WriteHalf::Tls(_))
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Tcp(read) => Pin::new(read).poll_read(cx, buf),
            ReadHalf::Tls(read) => Pin::new(read).poll_read(cx, buf),
            #[cfg(feature = "sim")]
            ReadHalf::Sim(read) => Pin::new(read).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(write) => Pin::new(write).poll_write(cx, bytes),
            WriteHalf::Tls(write) => Pin::new(write).poll_write(cx, bytes),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(write) => Pin::new(write).poll_write(cx, bytes),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(write) => Pin::new(write).poll_flush(cx),
            WriteHalf::Tls(write) => Pin::new(write).poll_flush(cx),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(write) => Pin::new(write).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(write) => Pin::new(write).poll_shutdown(cx),
            WriteHalf::Tls(write) => Pin::new(write).poll_shutdown(cx),
            #[cfg(feature = "sim")]
            WriteHalf::Sim(write) => Pin::new(write).poll_shutdown(cx),
        }
    }
}

#[cfg(feature = "sim")]
mod seams {
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    use rand::distributions::{Distribution, Standard};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use tokio::io::DuplexStream;

    /// What a connector returns: the client's end of an in-memory
    /// connection to `host:port`, or why there is none (refused,
    /// unreachable), after as long as the simulator decides.
    pub type Connect = Pin<Box<dyn Future<Output = std::io::Result<DuplexStream>> + Send>>;

    /// Opens the in-memory connection to `host:port`. The host names the
    /// simulator gives its clients' URLs say which client connects to
    /// which node.
    pub type Connector = Arc<dyn Fn(&str, u16) -> Connect + Send + Sync>;

    thread_local! {
        static CONNECTOR: RefCell<Option<Connector>> = const { RefCell::new(None) };
        static RNG: RefCell<Option<StdRng>> = const { RefCell::new(None) };
    }

    /// Every connection the client opens on this thread from now on comes
    /// from `connector` (`None`: TCP again).
    pub fn set_connector(connector: Option<Connector>) {
        CONNECTOR.with(|slot| *slot.borrow_mut() = connector);
    }

    /// Every random value the client draws on this thread from now on
    /// (tokens, retry jitter) comes from a generator seeded with `seed`
    /// (`None`: `rand::random` again).
    pub fn seed(seed: Option<u64>) {
        RNG.with(|slot| *slot.borrow_mut() = seed.map(StdRng::seed_from_u64));
    }

    pub(super) fn connector() -> Option<Connector> {
        CONNECTOR.with(|slot| slot.borrow().clone())
    }

    pub(super) fn seeded<T>() -> Option<T>
    where
        Standard: Distribution<T>,
    {
        RNG.with(|slot| slot.borrow_mut().as_mut().map(|rng| rng.gen()))
    }
}
