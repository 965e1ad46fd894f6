//! What a person or a library does to memories by hand, beside remembering and recalling:
//! list a scope's memories newest first, revise one (the new text supersedes it and keeps its
//! history, like a fact the sleep cycle replaces) and forget a whole scope.

use crate::{Atlas, now};
use atlas_domain::policy::limits::validate;
use atlas_domain::ports::{Consolidation, MemoryRef, NewEdge, Revision};
use atlas_domain::{AtlasError, Body, EdgeKind, Memory, MemoryId, NewMemory, RecallFilter, Result, Scope, Validity};

/// How many memories one pass of [`Atlas::forget_scope`] reads at a time.
const SCAN_PIECE: usize = 1_000;

/// What [`Atlas::revise`] did: the new version and the one it replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct Revised {
    pub id: MemoryId,
    pub previous: MemoryId,
}

impl Atlas {
    /// Up to `limit` live memories the filter admits, newest first by (event time, id).
    pub async fn latest(&self, filter: RecallFilter, limit: usize) -> Result<Vec<Memory>> {
        self.parts.store.latest(filter, limit).await
    }

    /// Replaces memory `id`'s text with `text`: a new memory of the same kind, scope, speaker
    /// and metadata supersedes it (its validity ends now, and `explain` shows both ends of the
    /// change), in one write. What was said is never rewritten in place: an episode revised is
    /// a correction recorded beside it. Only episodes and facts are revised; a fact takes `text`
    /// as its object, or, when `text` states its relation in words, the value it states. `meta`, when given, replaces the
    /// metadata the new version inherits.
    pub async fn revise(
        &self,
        id: MemoryId,
        text: String,
        meta: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<Revised> {
        let Some(consolidator) = self.parts.consolidator.clone() else {
            return Err(AtlasError::Config("this store keeps no history, so memories cannot be revised".into()));
        };
        let old =
            self.parts.store.get(id).await?.filter(|m| !m.lifecycle.is_deleted()).ok_or(AtlasError::NotFound(id))?;
        let at = now();
        if old.validity.valid_until.is_some_and(|until| until <= at) {
            return Err(AtlasError::invalid(
                format!("memory {id}"),
                "field \"id\": this version was already replaced; revise the current one (`explain` names it)",
            ));
        }
        let body = match &old.body {
            Body::Episode { speaker } => Body::Episode { speaker: speaker.clone() },
            Body::Fact { subject, predicate, confidence, .. } => {
                // The one rule: "Frank lives in Munich" revises `lives_in` to Munich.
                let keyed = atlas_domain::policy::reading::revised_fact(subject, predicate, &text);
                Body::Fact {
                    subject: keyed.subject,
                    predicate: keyed.predicate,
                    object: keyed.object,
                    confidence: *confidence,
                }
            }
            other => {
                return Err(AtlasError::invalid(
                    format!("memory {id}"),
                    format!("field \"id\": a {} is not revised by hand (only episodes and facts are)", other.kind()),
                ));
            }
        };
        let memory = NewMemory {
            scope: old.scope.clone(),
            text,
            event_time: at,
            recorded_at: at,
            validity: Validity::from(at),
            meta: meta.unwrap_or_else(|| old.meta.clone()),
            body,
        };
        validate(&memory, self.config.max_text_bytes, "revise")?;
        let edge = NewEdge {
            src: MemoryRef::New(0),
            dst: MemoryRef::Stored(id),
            kind: EdgeKind::Supersedes,
            weight: 1.0,
            validity: Validity::from(at),
            recorded_at: at,
        };
        let batch = Consolidation {
            memories: vec![memory],
            edges: vec![edge],
            revisions: vec![Revision { id, valid_from: None, valid_until: Some(at), confidence: None }],
            report: serde_json::json!({"revision": {"of": id.0}}),
            ..Consolidation::empty(at)
        };
        let new_id = consolidator
            .apply(batch)
            .await?
            .pop()
            .ok_or_else(|| AtlasError::Storage("a revision stored no memory".into()))?;
        self.background.wake();
        Ok(Revised { id: new_id, previous: id })
    }

    /// Forgets, for good, every memory whose scope `scope` admits (with an empty scope, every
    /// memory of the space), soft-deleted ones included; returns how many. Each memory goes in
    /// its own hard forget, so an interrupted call leaves the rest as they were.
    pub async fn forget_scope(&self, scope: &Scope) -> Result<usize> {
        let mut doomed = Vec::new();
        let mut after = None;
        loop {
            let piece = self.parts.store.scan(after, SCAN_PIECE).await?;
            let Some(last) = piece.last() else { break };
            after = Some(last.id);
            doomed.extend(piece.iter().filter(|m| scope.admits(&m.scope)).map(|m| m.id));
        }
        let mut forgotten = 0;
        for id in doomed {
            if self.forget_hard(id).await?.from_store {
                forgotten += 1;
            }
        }
        Ok(forgotten)
    }
}
