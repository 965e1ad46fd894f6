//! The Concept library (seed 002, after Stitch and LILO): reusable code patterns with a name,
//! a description, a signature and usage statistics. Concepts are added by hand, composed from
//! others, or compressed out of trajectories (`atlas_domain::policy::concepts`); a model names
//! and describes a learned one where configured (AutoDoc), its calls' names otherwise.

use crate::{Atlas, now};
use atlas_domain::policy::concepts::{Learned, compress};
use atlas_domain::policy::strategy::{rank_score, record, success_rate};
use atlas_domain::ports::{LlmRequest, Update};
use atlas_domain::{
    AtlasError, Body, ConceptDetail, ConceptSource, Lifecycle, Memory, MemoryId, MemoryKind, NewMemory, Result, Scope,
    Trajectory, Validity,
};
use serde::Serialize;

/// Most steps a learned concept spans.
const MAX_CONCEPT_STEPS: usize = 4;

/// Examples kept per learned concept.
const EXAMPLES: usize = 3;

/// A concept as the library shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ConceptHit {
    pub id: MemoryId,
    pub name: String,
    pub description: String,
    pub code: String,
    pub params: Vec<String>,
    pub examples: Vec<String>,
    pub source: ConceptSource,
    /// How many trajectories it abstracts (learned concepts).
    pub occurrences: u32,
    pub composed_of: Vec<MemoryId>,
    pub usage_count: u32,
    pub success_rate: f64,
    /// For a search: relevance × (0.5 + success rate), as the Strategy bank ranks.
    pub score: f64,
    /// For a search: the cosine of query and concept, where the vector search found it.
    pub similarity: Option<f64>,
}

fn concept_hit(m: &Memory, score: f64) -> Option<ConceptHit> {
    let Body::Concept { name, code, composed_of, detail } = &m.body else { return None };
    Some(ConceptHit {
        id: m.id,
        name: name.clone(),
        description: detail.description.clone(),
        code: code.clone(),
        params: detail.params.clone(),
        examples: detail.examples.clone(),
        source: detail.source,
        occurrences: detail.occurrences,
        composed_of: composed_of.clone(),
        usage_count: detail.successes + detail.failures,
        success_rate: success_rate(detail.successes, detail.failures),
        score,
        similarity: None,
    })
}

/// A parameter name is a word of the code: renamed only where it stands alone.
fn rename_word(code: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(if word == from { to } else { word });
        word.clear();
    };
    for c in code.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

impl Atlas {
    async fn store_concept(
        &self,
        name: &str,
        code: &str,
        composed_of: Vec<MemoryId>,
        detail: ConceptDetail,
        scope: Scope,
    ) -> Result<ConceptHit> {
        if name.trim().is_empty() || code.trim().is_empty() {
            let field = if name.trim().is_empty() { "name" } else { "code" };
            return Err(AtlasError::invalid(format!("--{field}"), format!("field \"{field}\": must not be blank")));
        }
        let at = now();
        let text = match detail.description.trim() {
            "" => format!("{name}({})\n{code}", detail.params.join(", ")),
            description => format!("{name}({}): {description}\n{code}", detail.params.join(", ")),
        };
        let memory = NewMemory {
            scope,
            text,
            event_time: at,
            recorded_at: at,
            validity: Validity::from(at),
            meta: serde_json::Map::new(),
            body: Body::Concept { name: name.trim().to_owned(), code: code.to_owned(), composed_of, detail },
        };
        let id = self.parts.store.insert(vec![memory.clone()], None).await?[0];
        self.background.wake();
        Ok(concept_hit(&memory.with_id(id), 0.0).expect("a concept"))
    }

    /// Adds a primitive concept (one a person or a tool's API provides).
    pub async fn add_concept(
        &self,
        name: &str,
        code: &str,
        description: &str,
        params: Vec<String>,
        scope: Scope,
    ) -> Result<ConceptHit> {
        let detail = ConceptDetail { description: description.trim().to_owned(), params, ..ConceptDetail::default() };
        self.store_concept(name, code, Vec::new(), detail, scope).await
    }

    pub async fn get_concept(&self, id: MemoryId) -> Result<Option<ConceptHit>> {
        Ok(self.parts.store.get(id).await?.filter(|m| !m.lifecycle.is_deleted()).and_then(|m| concept_hit(&m, 0.0)))
    }

    /// The `k` concepts for `query`, ranked like strategies: relevance × (0.5 + success rate).
    pub async fn search_concepts(&self, query: &str, k: usize, scope: Scope) -> Result<Vec<ConceptHit>> {
        let candidates = self.candidates(query, MemoryKind::Concept, k, scope).await?;
        let mut hits: Vec<ConceptHit> = candidates
            .iter()
            .filter_map(|(m, relevance, similarity)| {
                let hit = concept_hit(m, 0.0)?;
                Some(ConceptHit { score: rank_score(*relevance, hit.success_rate), similarity: *similarity, ..hit })
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(k);
        Ok(hits)
    }

    /// A new concept that runs `ids` in order: its code chains theirs, its signature is theirs
    /// joined (a parameter name two parts share is renamed in the later part).
    pub async fn compose_concepts(&self, ids: &[MemoryId], scope: Scope) -> Result<ConceptHit> {
        if ids.len() < 2 {
            return Err(AtlasError::invalid("compose", "give at least two concept ids"));
        }
        let mut parts = Vec::with_capacity(ids.len());
        for id in ids {
            parts.push(self.get_concept(*id).await?.ok_or(AtlasError::NotFound(*id))?);
        }
        let (mut params, mut code, mut names) = (Vec::<String>::new(), Vec::new(), Vec::new());
        for (i, part) in parts.iter().enumerate() {
            let mut body = part.code.clone();
            for p in &part.params {
                let name = if params.contains(p) { format!("{p}_{}", i + 1) } else { p.clone() };
                if name != *p {
                    body = rename_word(&body, p, &name);
                }
                params.push(name);
            }
            code.push(body);
            names.push(part.name.clone());
        }
        let detail = ConceptDetail {
            description: format!("Runs {} in order.", names.join(", then ")),
            params,
            source: ConceptSource::Composed,
            ..ConceptDetail::default()
        };
        self.store_concept(&names.join("_then_"), &code.join("\n"), ids.to_vec(), detail, scope).await
    }

    /// Records one use of a concept and whether it worked.
    pub async fn record_concept_use(&self, id: MemoryId, success: bool) -> Result<ConceptHit> {
        let m = self.parts.store.get(id).await?.ok_or(AtlasError::NotFound(id))?;
        let Body::Concept { name, code, composed_of, detail } = &m.body else {
            return Err(AtlasError::invalid(format!("memory {id}"), format!("is a {}, not a concept", m.kind())));
        };
        let (successes, failures) = record(detail.successes, detail.failures, success);
        let detail = ConceptDetail { successes, failures, ..detail.clone() };
        let body = Body::Concept { name: name.clone(), code: code.clone(), composed_of: composed_of.clone(), detail };
        let lifecycle = Lifecycle { last_used: Some(now()), uses: m.lifecycle.uses.saturating_add(1), ..m.lifecycle };
        self.parts.store.update(vec![Update { id, lifecycle, body: Some(body.clone()) }]).await?;
        Ok(concept_hit(&Memory { body, lifecycle, ..m }, 0.0).expect("a concept"))
    }

    /// The library's concepts that `trajectory`'s steps call (by name), each recording one use
    /// with the trajectory's outcome.
    pub async fn record_concepts_called(&self, trajectory: &Trajectory, scope: Scope) -> Result<Vec<ConceptHit>> {
        let mut called: Vec<String> = Vec::new();
        for step in &trajectory.steps {
            atlas_domain::policy::program::parse_step(step).callees(&mut called);
        }
        called.sort();
        called.dedup();
        let mut recorded = Vec::new();
        for name in called {
            let found = self.search_concepts(&name, 3, scope.clone()).await?;
            if let Some(concept) = found.into_iter().find(|c| c.name == name) {
                recorded.push(self.record_concept_use(concept.id, trajectory.success).await?);
            }
        }
        Ok(recorded)
    }

    /// Learns concepts from what recurs across the successful `trajectories` and adds up to
    /// `max_concepts` new ones to the library; one whose code the library already holds is not
    /// added twice (it is returned with the new ones).
    pub async fn compress_trajectories(
        &self,
        trajectories: &[Trajectory],
        max_concepts: usize,
        scope: Scope,
    ) -> Result<Vec<ConceptHit>> {
        // Solutions only: what recurs in failed attempts is a habit to lose, not a concept.
        let solved: Vec<&Trajectory> = trajectories.iter().filter(|t| t.success).collect();
        let programs: Vec<Vec<String>> = solved.iter().map(|t| t.steps.clone()).collect();
        // Concepts the library already holds come back too: up to `max_concepts` new ones are
        // learned beyond them.
        let learned = compress(&programs, max_concepts * 4, MAX_CONCEPT_STEPS);
        let mut added = Vec::with_capacity(learned.len());
        let mut new = 0;
        for concept in learned {
            if let Some(existing) = self.concept_with_code(&concept.code, &scope).await? {
                added.push(existing);
                continue;
            }
            if new == max_concepts {
                break;
            }
            new += 1;
            let tasks: Vec<&str> =
                concept.occurrences.iter().take(EXAMPLES).map(|o| solved[o.program].task.as_str()).collect();
            let (name, description) = match self.autodoc(&concept, &tasks).await {
                Some(doc) => doc,
                None => (concept.name.clone(), default_description(&concept, &solved)),
            };
            let examples = concept
                .occurrences
                .iter()
                .take(EXAMPLES)
                .map(|o| format!("{name}({})  # {}", o.args.join(", "), solved[o.program].id))
                .collect();
            let detail = ConceptDetail {
                description,
                params: concept.params.clone(),
                examples,
                source: ConceptSource::Learned,
                occurrences: concept.programs as u32,
                ..ConceptDetail::default()
            };
            added.push(self.store_concept(&name, &concept.code, Vec::new(), detail, scope.clone()).await?);
        }
        Ok(added)
    }

    async fn concept_with_code(&self, code: &str, scope: &Scope) -> Result<Option<ConceptHit>> {
        let candidates = self.candidates(code, MemoryKind::Concept, 3, scope.clone()).await?;
        Ok(candidates.iter().find_map(|(m, _, _)| concept_hit(m, 0.0).filter(|c| c.code == code)))
    }

    /// AutoDoc: the model's name (an identifier) and one-sentence description of a concept,
    /// from its code and the tasks it was learned from (so that a task finds it).
    async fn autodoc(&self, concept: &Learned, tasks: &[&str]) -> Option<(String, String)> {
        let llm = self.parts.llm.as_ref()?;
        // The name's pattern is checked below (the answer check leaves patterns to the caller).
        let schema = serde_json::json!({
            "type": "object", "required": ["name", "description"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z_][a-z0-9_]{0,47}$", "maxLength": 48},
                "description": {"type": "string", "minLength": 1, "maxLength": 300}
            }
        });
        let request = LlmRequest {
            system: "You name and document a reusable code pattern learned from an agent's programs. Answer with \
                     JSON only: {\"name\": \"snake_case_identifier\", \"description\": \"one sentence\"}."
                .into(),
            prompt: format!(
                "Parameters: {}\nCode:\n{}\nLearned from these tasks:\n{}",
                concept.params.join(", "),
                concept.code,
                tasks.join("\n")
            ),
            json_schema: Some(schema.clone()),
        };
        let answer = llm.complete(request).await.map_err(|e| tracing::warn!(error = %e, "autodoc failed")).ok()?;
        let value = atlas_domain::policy::model_answer::read_answer(&answer.text, &schema)
            .map_err(|why| tracing::warn!(%why, "the model's concept name is outside its schema"))
            .ok()?;
        let name = value.get("name")?.as_str()?.trim();
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let description = value.get("description")?.as_str()?.trim();
        (valid && !description.is_empty()).then(|| (name.to_owned(), description.to_owned()))
    }
}

fn default_description(concept: &Learned, trajectories: &[&Trajectory]) -> String {
    let tasks: Vec<&str> = concept.occurrences.iter().take(2).map(|o| trajectories[o.program].task.as_str()).collect();
    format!(
        "Learned from {} trajectories (description length saved: {}), e.g. for: {}",
        concept.programs,
        concept.saved,
        tasks.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_renamed_only_as_whole_words() {
        assert_eq!(rename_word("g2 = f(g, g_x)\nh(g)", "g", "g_2"), "g2 = f(g_2, g_x)\nh(g_2)");
    }
}
