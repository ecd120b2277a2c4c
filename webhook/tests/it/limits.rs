//! Connection limits of the HTTPS listener, over real loopback sockets: idle TCP connections,
//! slow TLS handshakes, trickled headers and idle keep-alive connections are closed; connections
//! beyond the cap are refused until slots come back, unless one may be given up for them (a
//! peer's own connections that do not serve it, or those of a peer holding more).
//!
//! Each scenario uses short timeouts for the limit under test and long ones for the others, and
//! waits for the effect with a bound far below the long ones, so it shows which limit acted
//! without asserting on durations.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use mcm_webhook::limits::ConnectionLimits;
use mcm_webhook::metrics::{CloseLabels, ConnectionMetrics};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::server_config;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

use crate::common::{client_config, serving_certificate};

const HOST: &str = "mcm-webhook.mcm.svc";
const SHORT: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(120);
/// How long a test waits for an effect of a SHORT limit; far below LONG.
const PATIENCE: Duration = Duration::from_secs(30);

struct Server {
    addr: SocketAddr,
    ca_pem: String,
    metrics: ConnectionMetrics,
    task: JoinHandle<()>,
}

impl Server {
    /// Waits until `expected` connections have been closed for `reason` (the server counts a
    /// close just after the client may see it); false if the count differs after `PATIENCE`.
    async fn closed(&self, reason: &'static str, expected: u64) -> bool {
        let count = || {
            self.metrics
                .closed
                .get_or_create(&CloseLabels { reason })
                .get()
        };
        let reached = tokio::time::timeout(PATIENCE, async {
            while count() < expected {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        reached.is_ok() && count() == expected
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(limits: ConnectionLimits) -> Server {
    let (store, ca_pem) = serving_certificate("test-ca", HOST);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = ConnectionMetrics::default();
    let task = tokio::spawn(server::serve_tls_with_limits(
        listener,
        server::router(AppState::new(store.clone())),
        server_config(store),
        limits,
        metrics.clone(),
    ));
    Server {
        addr,
        ca_pem,
        metrics,
        task,
    }
}

fn limits(
    tls_handshake_timeout: Duration,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
) -> ConnectionLimits {
    ConnectionLimits {
        tls_handshake_timeout,
        header_read_timeout,
        idle_timeout,
        max_connections,
        // Every client here is 127.0.0.1: the per-peer limit must not act first (it is tested in
        // `flood`).
        max_connections_per_peer: usize::MAX,
        // Handshakes are never given up for new connections here (see `flood` for that).
        eviction_grace: LONG,
    }
}

/// Waits until the server closes `stream` (EOF or reset); false if it is still open after
/// `PATIENCE`. Bytes the server sends (a TLS alert) are read past.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0_u8; 1024];
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Whether the server still holds `stream` open right now (nothing to read, no EOF).
fn still_open(stream: &TcpStream) -> bool {
    let mut buf = [0_u8; 1];
    matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

async fn tls_connect(
    server: &Server,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, std::io::Error> {
    let config = client_config(&server.ca_pem).unwrap();
    let tcp = TcpStream::connect(server.addr).await?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), tcp)
        .await
}

/// A client keep-alive connection: the task driving it ends when the connection closes (the
/// sender is kept because dropping it would close the connection from the client side).
struct KeptAlive {
    driver: JoinHandle<()>,
    sender: hyper::client::conn::http1::SendRequest<Full<axum::body::Bytes>>,
}

impl KeptAlive {
    /// Sends one conversion request and returns the status.
    async fn convert(&mut self) -> Result<u16, String> {
        let body = serde_json::json!({ "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": { "uid": "u", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": [] } });
        let request = http::Request::post("/convert")
            .header("host", HOST)
            .header("content-type", "application/json")
            .body(Full::new(axum::body::Bytes::from(
                serde_json::to_vec(&body).unwrap(),
            )))
            .unwrap();
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let _ = response.into_body().collect().await;
        Ok(status)
    }
}

impl KeptAlive {
    /// Sends a GET of `path`, which is no review, and returns the status.
    async fn get(&mut self, path: &str) -> Result<u16, String> {
        let request = http::Request::get(path)
            .header("host", HOST)
            .body(Full::new(axum::body::Bytes::new()))
            .unwrap();
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let _ = response.into_body().collect().await;
        Ok(status)
    }
}

/// Opens a keep-alive connection without sending anything on it.
async fn keep_alive(server: &Server) -> Result<KeptAlive, String> {
    let tls = tls_connect(server).await.map_err(|e| e.to_string())?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(KeptAlive { driver, sender })
}

/// Sends one conversion request on a fresh keep-alive connection; returns the status and the
/// open connection.
async fn request(server: &Server) -> Result<(u16, KeptAlive), String> {
    let mut kept = keep_alive(server).await?;
    let status = kept.convert().await?;
    Ok((status, kept))
}

#[tokio::test]
async fn idle_and_slow_handshakes_are_closed_after_the_handshake_timeout() {
    let server = start(limits(SHORT, LONG, LONG, 1000)).await;
    // Connections that never start TLS, and connections that trickle a ClientHello byte by byte
    // (so it is the handshake deadline, not inactivity, that ends them).
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let mut trickling = Vec::new();
    for _ in 0..10 {
        let stream = TcpStream::connect(server.addr).await.unwrap();
        trickling.push(tokio::spawn(async move {
            let mut stream = stream;
            // A TLS record header announcing a long handshake message, then one byte at a time.
            if stream
                .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
                .await
                .is_err()
            {
                return true;
            }
            let deadline = tokio::time::Instant::now() + PATIENCE;
            while tokio::time::Instant::now() < deadline {
                if stream.write_all(&[0x01]).await.is_err() {
                    return true;
                }
                let mut buf = [0_u8; 64];
                let read =
                    tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf)).await;
                if let Ok(Ok(0) | Err(_)) = read {
                    return true;
                }
            }
            false
        }));
    }
    for (i, stream) in silent.iter_mut().enumerate() {
        assert!(
            closed_by_server(stream).await,
            "silent connection {i} still open"
        );
    }
    for (i, task) in trickling.into_iter().enumerate() {
        assert!(task.await.unwrap(), "trickling connection {i} still open");
    }
    assert!(server.closed("tls_handshake_timeout", 110).await);
    // The server still serves.
    assert_eq!(request(&server).await.unwrap().0, 200);
}

#[tokio::test]
async fn trickled_headers_are_cut_by_the_header_read_timeout() {
    let server = start(limits(LONG, SHORT, LONG, 1000)).await;
    let mut tls = tls_connect(&server).await.unwrap();
    tls.write_all(b"POST /convert HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // One header line every 200 ms: always active (so not idle), never complete.
    let cut = tokio::time::timeout(PATIENCE, async {
        loop {
            if tls.write_all(b"x-slow: 1\r\n").await.is_err() || tls.flush().await.is_err() {
                return;
            }
            let mut buf = [0_u8; 256];
            let read = tokio::time::timeout(Duration::from_millis(200), tls.read(&mut buf)).await;
            if let Ok(Ok(0) | Err(_)) = read {
                return;
            }
        }
    })
    .await;
    assert!(cut.is_ok(), "slow headers were not cut");
    assert!(server.closed("header_read_timeout", 1).await);
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    let server = start(limits(LONG, LONG, SHORT, 1000)).await;
    let mut connections = Vec::new();
    for _ in 0..20 {
        let (status, connection) = request(&server).await.unwrap();
        assert_eq!(status, 200);
        connections.push(connection);
    }
    for (i, connection) in connections.into_iter().enumerate() {
        assert!(
            tokio::time::timeout(PATIENCE, connection.driver)
                .await
                .is_ok(),
            "keep-alive connection {i} still open"
        );
    }
    assert!(server.closed("idle_timeout", 20).await);
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused_until_slots_free_up() {
    const CAP: usize = 8;
    let server = start(limits(LONG, LONG, LONG, CAP)).await;
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(TcpStream::connect(server.addr).await.unwrap());
    }
    // The accept queue is first in, first out: these come after the held ones and find no slot.
    for i in 0..CAP {
        let mut extra = TcpStream::connect(server.addr).await.unwrap();
        assert!(
            closed_by_server(&mut extra).await,
            "connection {i} beyond the cap was not refused"
        );
    }
    for (i, stream) in held.iter().enumerate() {
        assert!(
            still_open(stream),
            "held connection {i} was closed, not the surplus"
        );
    }
    assert!(server.closed("global_limit", CAP as u64).await);
    assert_eq!(server.metrics.open.get(), CAP as i64);
    drop(held);
    // Slots come back when the held connections end; poll until a request is served.
    let served = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok((200, _)) = request(&server).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "no request served after the slots freed up");
}

/// The header timeout runs from a request's first byte, not while a keep-alive connection
/// waits for its next request (hyper's own header timer would close it).
#[tokio::test]
async fn keep_alive_connections_outlive_the_header_timeout() {
    let server = start(limits(LONG, SHORT, LONG, 1000)).await;
    let (status, mut connection) = request(&server).await.unwrap();
    assert_eq!(status, 200);
    tokio::time::sleep(3 * SHORT).await;
    assert_eq!(connection.convert().await, Ok(200));
    assert!(!connection.driver.is_finished());
}

/// A TCP connection to `server` from the loopback address `source`.
async fn connect_from(source: IpAddr, server: &Server) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    socket.connect(server.addr).await.unwrap()
}

#[tokio::test]
async fn a_peer_at_its_cap_gives_up_its_silent_connections_not_the_one_serving_it() {
    const PER_PEER: usize = 4;
    let server = start(ConnectionLimits {
        max_connections_per_peer: PER_PEER,
        ..limits(LONG, LONG, LONG, 1000)
    })
    .await;
    // A keep-alive connection that delivered a review, then silent connections from the same
    // address: three fill the cap, ten more each take the place of the oldest silent one.
    let (status, mut kept) = request(&server).await.unwrap();
    assert_eq!(status, 200);
    let mut silent = Vec::new();
    for _ in 0..13 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    assert!(server.closed("per_peer_limit_evicted", 10).await);
    for (i, stream) in silent[..10].iter_mut().enumerate() {
        assert!(
            closed_by_server(stream).await,
            "silent connection {i} is still open"
        );
    }
    for (i, stream) in silent[10..].iter().enumerate() {
        assert!(
            still_open(stream),
            "silent connection {} was closed",
            10 + i
        );
    }
    // The connection that serves the peer still does, and a new one is served.
    assert_eq!(kept.convert().await, Ok(200));
    assert_eq!(request(&server).await.unwrap().0, 200);
    assert!(server.closed("per_peer_limit", 0).await);
}

#[tokio::test]
async fn a_full_listener_makes_room_for_a_peer_holding_fewer_connections() {
    const CAP: usize = 6;
    let server = start(limits(LONG, LONG, LONG, CAP)).await;
    let crowd = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(connect_from(crowd, &server).await);
    }
    // The listener is full of one address's fresh handshakes: another address (the client of
    // `request`, 127.0.0.1) still gets in, in the place of the crowd's oldest connection.
    let (status, _kept) = request(&server).await.unwrap();
    assert_eq!(status, 200);
    assert!(closed_by_server(&mut held[0]).await);
    assert!(server.closed("global_limit_evicted_idle", 1).await);
    // The crowd, holding the most, gets no more: its next connection is refused.
    let mut more = connect_from(crowd, &server).await;
    assert!(closed_by_server(&mut more).await);
    assert!(server.closed("global_limit", 1).await);
    for (i, stream) in held[1..].iter().enumerate() {
        assert!(still_open(stream), "held connection {} was closed", i + 1);
    }
}

#[tokio::test]
async fn a_connection_that_sent_no_review_is_given_up_before_one_taking_its_steps() {
    const PER_PEER: usize = 3;
    let server = start(ConnectionLimits {
        max_connections_per_peer: PER_PEER,
        ..limits(LONG, LONG, LONG, 1000)
    })
    .await;
    // One connection delivered a review, one only asked for a page that is none, and one is a
    // fresh handshake (within the grace): the cap is reached.
    let (status, mut reviewer) = request(&server).await.unwrap();
    assert_eq!(status, 200);
    let mut asker = keep_alive(&server).await.unwrap();
    assert_eq!(asker.get("/nothing-here").await, Ok(404));
    let mut fresh = TcpStream::connect(server.addr).await.unwrap();
    // The next connection takes the place of the one that sent no review, although the fresh
    // handshake came later.
    let next = TcpStream::connect(server.addr).await.unwrap();
    assert!(
        tokio::time::timeout(PATIENCE, &mut asker.driver)
            .await
            .is_ok(),
        "the connection that sent no review is still open"
    );
    assert!(still_open(&fresh), "the fresh handshake was given up first");
    // Then the fresh handshakes go, longest waiting first; the reviewer stays.
    let _last = TcpStream::connect(server.addr).await.unwrap();
    assert!(closed_by_server(&mut fresh).await);
    assert!(still_open(&next));
    assert!(server.closed("per_peer_limit_evicted", 2).await);
    assert_eq!(reviewer.convert().await, Ok(200));
}
