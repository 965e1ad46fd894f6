//! A minimal blocking HTTP/1.1 client with keep-alive, for the tests and the load benchmark
//! that talk to `atlas serve` over a real socket (one connection per client thread, as a
//! pooled client would hold it; no client library in the build).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One answer.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| String::from_utf8_lossy(&self.body).into_owned().into())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A client of one server, holding one connection open between requests.
pub struct HttpClient {
    addr: SocketAddr,
    token: Option<String>,
    connection: Option<BufReader<TcpStream>>,
}

impl HttpClient {
    pub fn new(addr: SocketAddr, token: Option<String>) -> Self {
        HttpClient { addr, token, connection: None }
    }

    /// Sends one request and reads its whole answer (by `Content-Length` or chunked).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> std::io::Result<HttpResponse> {
        let result = self.exchange(method, path, body, headers);
        if result.is_err() {
            self.connection = None;
        }
        result
    }

    pub fn post_json(&mut self, path: &str, body: &serde_json::Value) -> std::io::Result<HttpResponse> {
        self.request("POST", path, Some(&body.to_string()), &[("content-type", "application/json")])
    }

    fn exchange(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> std::io::Result<HttpResponse> {
        if self.connection.is_none() {
            let stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(120)))?;
            self.connection = Some(BufReader::new(stream));
        }
        let connection = self.connection.as_mut().expect("connected above");
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if let Some(token) = &self.token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        let body = body.unwrap_or_default();
        request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        connection.get_mut().write_all(request.as_bytes())?;

        let mut line = String::new();
        if connection.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            connection.read_line(&mut line)?;
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let find = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if let Some(length) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(length, 0);
            connection.read_exact(&mut body)?;
        } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                line.clear();
                connection.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim(), 16)
                    .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
                let start = body.len();
                body.resize(start + size, 0);
                connection.read_exact(&mut body[start..])?;
                line.clear();
                connection.read_line(&mut line)?;
                if size == 0 {
                    break;
                }
            }
        }
        if find("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            self.connection = None;
        }
        Ok(HttpResponse { status, headers, body })
    }
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Waits until `GET path` answers 200, or `within` passes.
pub fn wait_healthy(addr: SocketAddr, path: &str, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if HttpClient::new(addr, None).request("GET", path, None, &[]).is_ok_and(|r| r.status == 200) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}
