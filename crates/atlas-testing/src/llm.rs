//! A scripted language model for tests of consolidation: it answers from a list, in order, and
//! remembers every request.

use async_trait::async_trait;
use atlas_domain::ports::{Completion, Llm, LlmRequest};
use atlas_domain::{AtlasError, Result};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Answers each call with the next scripted outcome (`Err` text becomes an LLM error, as a
/// timeout or a 5xx would); a call past the script's end is an error. Tokens are counted as
/// whitespace-separated words, a stand-in that is stable across runs.
#[derive(Default)]
pub struct ScriptedLlm {
    script: Mutex<VecDeque<std::result::Result<String, String>>>,
    requests: Mutex<Vec<LlmRequest>>,
}

impl ScriptedLlm {
    pub fn new(script: Vec<std::result::Result<String, String>>) -> Self {
        ScriptedLlm { script: Mutex::new(script.into()), requests: Mutex::new(Vec::new()) }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Adds outcomes at the end of the script.
    pub fn then(&self, outcome: std::result::Result<String, String>) {
        self.script.lock().unwrap().push_back(outcome);
    }
}

#[async_trait]
impl Llm for ScriptedLlm {
    async fn complete(&self, request: LlmRequest) -> Result<Completion> {
        let words = |s: &str| s.split_whitespace().count() as u64;
        let input_tokens = words(&request.system) + words(&request.prompt);
        self.requests.lock().unwrap().push(request);
        match self.script.lock().unwrap().pop_front() {
            Some(Ok(text)) => Ok(Completion { output_tokens: words(&text), text, input_tokens, cost: 0.0 }),
            Some(Err(e)) => Err(AtlasError::Llm(e)),
            None => Err(AtlasError::Llm("the scripted model has no more answers".into())),
        }
    }
}
