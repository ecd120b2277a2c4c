//! Oversized request bodies: the client gets HTTP 413 with a Kubernetes `Status`
//! (reason `RequestEntityTooLarge`), never a dropped connection — whether the body announces its
//! size (`Content-Length`) or not (chunked), and although the client is still sending when the
//! server has decided.
//!
//! The client is written by hand over TLS and comes in two kinds: one that reads the answer
//! while it writes the body, and one that reads only once the whole body is written (a plain
//! client; also what a client sees when its write fails first — the API server's Go client then
//! reports the write error, not the answer). Each reports what it read, or that the connection
//! ended before an answer.
//!
//! Why the old listener sometimes dropped the connection: the server answered 413 once 8 MiB
//! were read (or at once for a too large `Content-Length`) and closed the socket with the rest
//! of the body unread; the kernel then resets the connection, and a client still writing gets
//! the reset instead of the answer. The listener now closes by sending its FIN and reading what
//! the client still sends for a while, so the client finishes writing and reads the 413.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mcm_webhook::server::{self, AppState, BODY_LIMIT};
use mcm_webhook::tls::server_config;
use rustls_pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::common::{client_config, serving_certificate};

const HOST: &str = "mcm-webhook.mcm.svc";
/// Each case is sent this many times: a dropped connection was a race, not a certainty.
const ROUNDS: usize = 3;
const TIMEOUT: Duration = Duration::from_secs(60);

struct Server {
    addr: SocketAddr,
    ca_pem: String,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start() -> Server {
    let (store, ca_pem) = serving_certificate("body-ca", HOST);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(server::serve_tls(
        listener,
        server::router(AppState::new(store.clone())),
        server_config(store),
    ));
    Server { addr, ca_pem, task }
}

/// How the body is framed.
#[derive(Clone, Copy, Debug)]
enum Framing {
    ContentLength,
    Chunked,
}

/// When the client reads the answer.
#[derive(Clone, Copy, Debug)]
enum Reading {
    WhileWriting,
    AfterWriting,
}

/// What the client got.
#[derive(Debug)]
enum Outcome {
    Answer {
        status: u16,
        body: Vec<u8>,
    },
    /// The connection ended (or failed) before a complete answer.
    Dropped(String),
}

/// POSTs a body of `size` bytes (a JSON string, so it is well-formed whatever the size) to
/// `path`, writing it while reading the answer.
async fn send(
    server: &Server,
    path: &str,
    size: usize,
    framing: Framing,
    reading: Reading,
) -> Outcome {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(&server.ca_pem).unwrap()))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .unwrap();
    let (mut reader, mut writer) = tokio::io::split(tls);
    let framing_header = match framing {
        Framing::ContentLength => format!("content-length: {size}"),
        Framing::Chunked => "transfer-encoding: chunked".to_owned(),
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n{framing_header}\r\n\r\n"
    );
    let mut writing = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let mut body = vec![b'x'; size];
        body[0] = b'"';
        body[size - 1] = b'"';
        for chunk in body.chunks(64 * 1024) {
            match framing {
                Framing::ContentLength => writer.write_all(chunk).await?,
                Framing::Chunked => {
                    writer
                        .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .await?;
                    writer.write_all(chunk).await?;
                    writer.write_all(b"\r\n").await?;
                }
            }
        }
        if let Framing::Chunked = framing {
            writer.write_all(b"0\r\n\r\n").await?;
        }
        writer.flush().await?;
        // Keep the write half (and so the connection) open until the answer is read.
        Ok::<_, std::io::Error>(writer)
    });
    let _writer = match reading {
        Reading::WhileWriting => None,
        Reading::AfterWriting => match tokio::time::timeout(TIMEOUT, &mut writing).await {
            Ok(Ok(Ok(writer))) => Some(writer),
            Ok(Ok(Err(e))) => return Outcome::Dropped(format!("write: {e}")),
            Ok(Err(e)) => return Outcome::Dropped(format!("writer: {e}")),
            Err(_) => return Outcome::Dropped("write not done in time".to_owned()),
        },
    };
    let answer = tokio::time::timeout(TIMEOUT, read_answer(&mut reader))
        .await
        .unwrap_or_else(|_| Outcome::Dropped("no answer in time".to_owned()));
    writing.abort();
    answer
}

/// Reads one HTTP/1.1 answer with a `content-length`.
async fn read_answer(reader: &mut (impl AsyncReadExt + Unpin)) -> Outcome {
    let mut data = Vec::new();
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if let Some(length) = length
                && data.len() >= end + 4 + length
            {
                return Outcome::Answer {
                    status,
                    body: data[end + 4..end + 4 + length].to_vec(),
                };
            }
        }
        match reader.read(&mut buf).await {
            Ok(0) => return Outcome::Dropped(format!("EOF after {} bytes", data.len())),
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) => return Outcome::Dropped(format!("{e} after {} bytes", data.len())),
        }
    }
}

/// Asserts the answer is a 413 with a Kubernetes Status naming the limit.
fn assert_too_large(outcome: &Outcome, case: &str) {
    let Outcome::Answer { status, body } = outcome else {
        panic!("{case}: connection dropped instead of a 413: {outcome:?}");
    };
    assert_eq!(*status, 413, "{case}: {}", String::from_utf8_lossy(body));
    let status: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{case}: 413 body is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    });
    assert_eq!(status["kind"], "Status", "{case}: {status}");
    assert_eq!(status["apiVersion"], "v1", "{case}: {status}");
    assert_eq!(status["status"], "Failure", "{case}: {status}");
    assert_eq!(
        status["reason"], "RequestEntityTooLarge",
        "{case}: {status}"
    );
    assert_eq!(status["code"], 413, "{case}: {status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&BODY_LIMIT.to_string()),
        "{case}: the message does not name the limit: {message}"
    );
}

#[tokio::test]
async fn oversized_bodies_get_413_with_a_status_never_a_dropped_connection() {
    let server = start().await;
    let mut outcomes = Vec::new();
    for round in 0..ROUNDS {
        for path in [
            "/convert",
            "/validate-machine-sapcloud-io-machinedeployment",
        ] {
            for (size, framing) in [
                (BODY_LIMIT + 1, Framing::ContentLength),
                (BODY_LIMIT + 1, Framing::Chunked),
                (2 * BODY_LIMIT, Framing::ContentLength),
                (2 * BODY_LIMIT, Framing::Chunked),
            ] {
                for reading in [Reading::WhileWriting, Reading::AfterWriting] {
                    let case =
                        format!("round {round}, {path}, {size} bytes, {framing:?}, {reading:?}");
                    let outcome = send(&server, path, size, framing, reading).await;
                    outcomes.push((case, outcome));
                }
            }
        }
    }
    let dropped: Vec<&str> = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Dropped(how) => Some(how.as_str()),
            Outcome::Answer { .. } => None,
        })
        .collect();
    eprintln!(
        "oversized bodies: {} of {} connections dropped: {dropped:?}",
        dropped.len(),
        outcomes.len()
    );
    for (case, outcome) in &outcomes {
        assert_too_large(outcome, case);
    }
}

#[tokio::test]
async fn a_body_at_the_limit_is_read() {
    let server = start().await;
    for framing in [Framing::ContentLength, Framing::Chunked] {
        // A JSON string is no ConversionReview: the webhook reads it and answers 200 with a
        // failed conversion, which shows the body was taken in.
        let outcome = send(
            &server,
            "/convert",
            BODY_LIMIT,
            framing,
            Reading::AfterWriting,
        )
        .await;
        let Outcome::Answer { status, body } = outcome else {
            panic!("{framing:?}: {outcome:?}");
        };
        assert_eq!(
            status,
            200,
            "{framing:?}: {}",
            String::from_utf8_lossy(&body)
        );
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            answer["response"]["result"]["status"], "Failure",
            "{answer}"
        );
    }
}
