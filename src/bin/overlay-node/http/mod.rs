//! The daemon's HTTP endpoints: Prometheus metrics (`--metrics`) and the live web view
//! (`--http`), served by a small HTTP/1.1 server written for the purpose.
//!
//! The server answers GET only, one request per connection (`Connection: close`), so it
//! needs no keep-alive bookkeeping; scrapers and browsers reconnect cheaply on loopback
//! or a LAN. Every bad input gets a status code, never a panic, and is logged at debug
//! level only: a port scanner must not fill the node's log.

mod metrics;
mod rtt;
mod web;

pub use rtt::publish_rtt_row;
pub use web::{Routes, Watch};

use anyhow::anyhow;
use futures::{Stream, StreamExt};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::debug;

/// Largest request head read (request line and headers); a GET needs far less.
const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its request head, so idle connections do not pin a slot.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time one write may take, so a client that stops reading is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once (open event streams included); more get 503.
const MAX_CONNECTIONS: usize = 64;

/// A parsed request: what the routes look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The path, without the query (`/metrics`).
    pub path: String,
    /// The query string after `?`, raw (empty when none).
    pub query: String,
}

impl Request {
    /// The percent-decoded value of query parameter `key`, if present.
    pub fn param(&self, key: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == key).then(|| percent_decode(v))
        })
    }
}

/// A stream of Server-Sent Events: each item is one event's data (one line of JSON).
pub type EventStream = Pin<Box<dyn Stream<Item = String> + Send>>;

/// What a route answers.
pub enum Response {
    /// A complete body with its status code and content type.
    Full {
        status: u16,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// An event stream, written until the client goes away or the stream ends.
    Events(EventStream),
}

impl Response {
    /// A 200 answer.
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response::Full {
            status: 200,
            content_type,
            body: body.into(),
        }
    }

    /// An error answer with a one-line plain-text body.
    pub fn error(status: u16, text: &str) -> Response {
        Response::Full {
            status,
            content_type: "text/plain; charset=utf-8",
            body: format!("{text}\n").into_bytes(),
        }
    }
}

/// Binds `addr` for the flag `flag`, with an error a user can act on
/// (`--metrics 127.0.0.1:1: cannot listen: permission denied`).
pub async fn listen(flag: &str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        // "Permission denied (os error 13)" reads better as "permission denied".
        let text = e.to_string();
        let text = text.split(" (os error").next().unwrap_or(&text);
        let mut chars = text.chars();
        let text = match chars.next() {
            Some(c) => c.to_lowercase().chain(chars).collect::<String>(),
            None => String::new(),
        };
        anyhow!("{flag} {addr}: cannot listen: {text}")
    })
}

/// Accepts connections on `listener` and answers them with `routes`, forever (the task
/// ends with the runtime when the daemon exits).
pub async fn serve(listener: TcpListener, routes: Arc<Routes>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                debug!(error = %e, "http accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let routes = routes.clone();
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, &routes).await {
                        debug!(%peer, error = %e, "http connection ended");
                    }
                    drop(permit);
                });
            }
            Err(_) => {
                tokio::spawn(async move {
                    let busy = Response::error(503, "too many connections");
                    let _ = write_response(stream, busy).await;
                });
            }
        }
    }
}

/// Serves one connection: reads the head, routes, writes the answer.
async fn connection(mut stream: TcpStream, routes: &Routes) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => {
            let too_long = Response::error(431, "request head too large");
            return write_response(stream, too_long).await;
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            let slow = Response::error(408, "request timeout");
            return write_response(stream, slow).await;
        }
    };
    let response = match parse_head(&head) {
        Err(why) => {
            debug!(why, "bad http request");
            Response::error(400, why)
        }
        Ok((method, _)) if method != "GET" => Response::error(405, "only GET is served"),
        Ok((_, request)) => routes.answer(&request).await,
    };
    write_response(stream, response).await
}

/// Reads up to the blank line ending the head; `None` if it is longer than [`MAX_HEAD`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_end(&head) {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// Where the head ends (the first blank line), bare `\n` line ends accepted.
fn find_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The method and the request of a head; the headers are not needed by any route.
fn parse_head(head: &[u8]) -> Result<(String, Request), &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8")?;
    let line = text.lines().next().ok_or("empty request")?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("unsupported HTTP version");
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("malformed method");
    }
    if !target.starts_with('/') {
        return Err("the target must be a path");
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let request = Request {
        path: path.to_string(),
        query: query.to_string(),
    };
    Ok((method.to_string(), request))
}

/// Decodes `%XX` escapes and `+` (a space in a query); invalid escapes stay as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The reason phrase of the status codes the server uses.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Writes `response` and closes the connection.
async fn write_response(mut stream: TcpStream, response: Response) -> std::io::Result<()> {
    match response {
        Response::Full {
            status,
            content_type,
            body,
        } => {
            let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
            let head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
                 Cache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
                reason(status),
                body.len()
            );
            write_all(&mut stream, head.as_bytes()).await?;
            write_all(&mut stream, &body).await?;
        }
        Response::Events(mut events) => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                        Cache-Control: no-store\r\nConnection: close\r\n\r\n";
            write_all(&mut stream, head.as_bytes()).await?;
            while let Some(data) = events.next().await {
                // One `data:` line per event: the JSON never holds a raw newline.
                let event = format!("data: {}\n\n", data.replace('\n', " "));
                write_all(&mut stream, event.as_bytes()).await?;
            }
        }
    }
    let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.shutdown()).await;
    Ok(())
}

async fn write_all(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(bytes)).await {
        Ok(result) => result,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::{find_end, parse_head, percent_decode};

    #[test]
    fn heads_parse_or_are_refused_without_panicking() {
        let (m, r) = parse_head(b"GET /api/tree?root=ab%20c HTTP/1.1\r\nHost: x").unwrap();
        assert_eq!((m.as_str(), r.path.as_str()), ("GET", "/api/tree"));
        assert_eq!(r.param("root").as_deref(), Some("ab c"));
        assert_eq!(r.param("missing"), None);
        for bad in [
            &b""[..],
            b"GET",
            b"GET / HTTP/1.1 extra",
            b"GET / SPDY/3",
            b"get / HTTP/1.1",
            b"GET http://x/ HTTP/1.1",
            b"\xff\xfe / HTTP/1.1",
        ] {
            assert!(parse_head(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n"), None);
        for s in ["%", "%4", "%zz", "a%2", "%%%", "+%41"] {
            let _ = percent_decode(s);
        }
        assert_eq!(percent_decode("+%41%"), " A%");
    }
}
