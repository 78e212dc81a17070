//! A loopback peer for the tests of a node and of a round's flight: it
//! records the name of every command it reads, in the order it read them,
//! and answers the n-th command with `:n`, or: `FAIL` with an error reply,
//! `SLOW` [`SLOW`] late, `HANG` never (the connection stays open), and
//! `CLOSE` by dropping the connection unanswered. It accepts any number of
//! connections, one after the other.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::resp::{self, Reply};

/// How late `SLOW` is answered.
pub(crate) const SLOW: Duration = Duration::from_millis(400);

/// The peer's URL, and the names it read.
pub(crate) async fn recorder() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://127.0.0.1:{}/", listener.local_addr().unwrap().port());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
            'connection: while let Ok(n @ 1..) = socket.read(&mut chunk).await {
                buf.extend_from_slice(&chunk[..n]);
                while let Ok(Some((Reply::Array(words), used))) = resp::parse(&buf) {
                    buf.drain(..used);
                    let Some(Reply::Bulk(name)) = words.first() else { break 'connection };
                    let name = String::from_utf8_lossy(name).to_string();
                    let count = {
                        let mut seen = record.lock().unwrap();
                        seen.push(name.clone());
                        seen.len()
                    };
                    let answer = match name.as_str() {
                        "CLOSE" => break 'connection,
                        "HANG" => continue,
                        "FAIL" => "-WRONGTYPE not a lock\r\n".to_string(),
                        "SLOW" => {
                            tokio::time::sleep(SLOW).await;
                            format!(":{count}\r\n")
                        }
                        _ => format!(":{count}\r\n"),
                    };
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        break 'connection;
                    }
                }
            }
        }
    });
    (url, seen)
}
