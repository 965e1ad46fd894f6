//! An answer is read only as far as the call warrants: an endless chunked body, or one that
//! announces more than the cap, is cut off with a failure no retry mends (issue 69: a 1.5 GB
//! stream took a process to 3.3 GB, an endless one to 8.1 GB).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Serves every connection an endless chunked body (or, with `length`, a Content-Length
/// header that announces that many bytes) after the request's head.
fn serve(length: Option<u64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let head = match length {
                    Some(n) => {
                        format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n")
                    }
                    None => {
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".into()
                    }
                };
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let piece = "[0.1,".repeat(13_000);
                let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
                // Until the client hangs up: the body never ends.
                while stream.write_all(chunk.as_bytes()).is_ok() {}
            });
        }
    });
    format!("http://{addr}/v1/embeddings")
}

async fn fetch(url: &str, cap: usize) -> Result<String, atlas_http::Failure> {
    let client = atlas_http::client(Duration::from_secs(20)).unwrap();
    atlas_http::send(client.post(url).body("{}"), Duration::from_secs(20), cap).await
}

#[tokio::test]
async fn an_endless_body_is_cut_at_the_cap() {
    let url = serve(None);
    let failure = fetch(&url, 1 << 20).await.unwrap_err();
    assert!(failure.message.contains("longer than the 1048576 bytes"), "{}", failure.message);
    assert!(!failure.retry, "another try would only read as much again");
}

#[tokio::test]
async fn an_announced_length_past_the_cap_is_refused_before_reading() {
    let url = serve(Some(500_000_000));
    let failure = fetch(&url, 1 << 20).await.unwrap_err();
    assert!(failure.message.contains("500000000 bytes or more"), "{}", failure.message);
}
