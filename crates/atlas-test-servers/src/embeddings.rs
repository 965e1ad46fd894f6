//! An OpenAI-compatible embeddings endpoint for tests (`POST /v1/embeddings`) on a free loopback
//! port, answering either with a function of each input (a test's own embedder) or by passing
//! each request on to a real server (llama.cpp's), and injecting the faults a real endpoint
//! has: a delay past the client's timeout, 429 with `Retry-After`, 500, a reset connection, a
//! cut answer, vectors of the wrong length, a whole outage. It counts requests and remembers
//! each request's inputs, so that tests can check batching and that nothing was lost. As
//! llama.cpp's server does, an `/embeddings` outside `/v1/` answers that server's own shape (a
//! list of `{index, embedding: [[...]]}`), so that a base URL without `/v1` can be tested.

use crate::http::HttpClient;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One fault, injected into the next request that arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answers correctly, but only after this long.
    Delay(Duration),
    /// Answers with this status, and `Retry-After: seconds` when given.
    Status(u16, Option<u64>),
    /// Closes the connection without answering.
    Reset,
    /// A well-formed HTTP answer whose JSON is cut in the middle.
    Truncated,
    /// Every vector one number longer than it should be.
    WrongDimension,
}

/// How requests are answered when no fault is injected.
pub type EmbedFn = Arc<dyn Fn(&str) -> Vec<f32> + Send + Sync>;

enum Answerer {
    Function(EmbedFn),
    Proxy(SocketAddr),
}

#[derive(Default)]
struct State {
    faults: VecDeque<Fault>,
    /// Every request is reset while down.
    down: bool,
    /// Inputs longer than this many characters are refused with this status (400, or 500 as
    /// llama.cpp's server refuses a text longer than its batch), as a server with a window
    /// refuses them.
    max_input_chars: Option<(usize, u16)>,
    /// Every request is answered only after this long for each of its inputs, as a server that
    /// computes on a slow CPU answers.
    per_input_delay: Option<Duration>,
    requests: Vec<Vec<String>>,
}

/// A running endpoint; stopped when dropped.
pub struct EmbeddingsServer {
    /// The API's base, e.g. `http://127.0.0.1:PORT/v1`.
    pub url: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl EmbeddingsServer {
    /// Answers every input with `embed(input)`.
    pub fn answering(embed: EmbedFn) -> Self {
        Self::start(Answerer::Function(embed))
    }

    /// Passes every request on to the server at `upstream` (its `/v1/embeddings`).
    pub fn proxy(upstream: SocketAddr) -> Self {
        Self::start(Answerer::Proxy(upstream))
    }

    fn start(answerer: Answerer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("a local address");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let answerer = Arc::new(answerer);
        {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (state, answerer) = (Arc::clone(&state), Arc::clone(&answerer));
                    std::thread::spawn(move || serve(stream, &state, &answerer));
                }
            });
        }
        EmbeddingsServer { url: format!("http://{addr}/v1"), state, stop, addr }
    }

    /// Faults for the next requests, one each, in order.
    pub fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().expect("state").faults.extend(faults);
    }

    /// Faults not yet met by a request.
    pub fn faults_left(&self) -> usize {
        self.state.lock().expect("state").faults.len()
    }

    /// While down, every request's connection is closed unanswered.
    pub fn set_down(&self, down: bool) {
        self.state.lock().expect("state").down = down;
    }

    pub fn refuse_inputs_longer_than(&self, chars: usize) {
        self.refuse_inputs_longer_than_with(chars, 400);
    }

    /// Refuses inputs longer than `chars` with `status` and the words llama.cpp's server uses.
    pub fn refuse_inputs_longer_than_with(&self, chars: usize, status: u16) {
        self.state.lock().expect("state").max_input_chars = Some((chars, status));
    }

    /// Answers each request only after `per_input` for every one of its inputs.
    pub fn answer_slowly(&self, per_input: Duration) {
        self.state.lock().expect("state").per_input_delay = Some(per_input);
    }

    /// The inputs of every request that arrived, in arrival order.
    pub fn requests(&self) -> Vec<Vec<String>> {
        self.state.lock().expect("state").requests.clone()
    }
}

impl Drop for EmbeddingsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>, answerer: &Answerer) {
    let mut reader = BufReader::new(stream);
    while let Some((path, body)) = read_request(&mut reader) {
        let inputs: Vec<String> = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("input").cloned())
            .map(|input| match input {
                Value::String(one) => vec![one],
                Value::Array(many) => many.iter().map(|i| i.as_str().unwrap_or_default().to_owned()).collect(),
                _ => Vec::new(),
            })
            .unwrap_or_default();
        let (fault, down, max_chars, per_input) = {
            let mut s = state.lock().expect("state");
            s.requests.push(inputs.clone());
            let fault = if s.down { None } else { s.faults.pop_front() };
            (fault, s.down, s.max_input_chars, s.per_input_delay)
        };
        if down || fault == Some(Fault::Reset) {
            return;
        }
        let stream = reader.get_mut();
        if !path.ends_with("/embeddings") {
            respond(stream, 404, &[], &json!({"error": {"message": "no such route"}}).to_string());
            continue;
        }
        match fault {
            Some(Fault::Status(status, retry_after)) => {
                let header = retry_after.map(|s| ("Retry-After", s.to_string()));
                let message = json!({"error": {"message": format!("injected {status}")}}).to_string();
                respond(stream, status, header.as_slice(), &message);
                continue;
            }
            Some(Fault::Delay(d)) => std::thread::sleep(d),
            _ => {}
        }
        if let Some(each) = per_input {
            std::thread::sleep(each * inputs.len() as u32);
        }
        if let Some((max, status)) = max_chars
            && inputs.iter().any(|i| i.chars().count() > max)
        {
            let message =
                format!("input (over {max} characters) is too large to process. increase the physical batch size");
            respond(stream, status, &[], &json!({"error": {"message": message}}).to_string());
            continue;
        }
        let native = !path.contains("/v1/");
        let (status, mut text) = match answerer {
            Answerer::Function(embed) if native => {
                let list: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(index, input)| json!({"index": index, "embedding": [embed(input)]}))
                    .collect();
                (200, Value::Array(list).to_string())
            }
            Answerer::Function(embed) => {
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(index, input)| json!({"object": "embedding", "index": index, "embedding": embed(input)}))
                    .collect();
                let tokens: usize = inputs.iter().map(|i| i.split_whitespace().count()).sum();
                let answer = json!({"object": "list", "data": data, "model": "test",
                                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
                (200, answer.to_string())
            }
            Answerer::Proxy(upstream) => {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                match HttpClient::new(*upstream, None).post_json("/v1/embeddings", &body) {
                    Ok(r) => (r.status, r.text()),
                    Err(_) => return,
                }
            }
        };
        match fault {
            Some(Fault::Truncated) => text.truncate(text.len() / 2),
            Some(Fault::WrongDimension) => text = longer_vectors(&text),
            _ => {}
        }
        respond(stream, status, &[], &text);
    }
}

/// The answer with one more number in every vector.
fn longer_vectors(text: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(text) else { return text.to_owned() };
    if let Some(data) = v.get_mut("data").and_then(Value::as_array_mut) {
        for item in data {
            if let Some(e) = item.get_mut("embedding").and_then(Value::as_array_mut) {
                e.push(json!(0.0));
            }
        }
    }
    v.to_string()
}

/// The next request's path and body, `None` when the client closed the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((path, body))
}

fn respond(stream: &mut TcpStream, status: u16, headers: &[(&str, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        if status < 300 { "OK" } else { "Error" },
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body.as_bytes()));
}
