//! What a memory is embedded and indexed as: its own line and the turn it answers; how two
//! embeddings compare.

use crate::Memory;

/// A memory as one line: an episode with a speaker is `"Speaker: text"`, since who said it is
/// part of what it means and questions name people ("what did Caroline research?"). Measured on
/// the LoCoMo dev set, dense recall@10 with int8 MiniLM: 0.280 on the bare text, 0.432 with the
/// speaker (docs/EVAL.md). This line is also what a successor carries as its [`Memory::context`].
pub fn line(memory: &Memory) -> String {
    speaker_line(memory.body.speaker(), &memory.text)
}

/// [`line`] from its parts, for stores that read them from columns.
pub fn speaker_line(speaker: Option<&str>, text: &str) -> String {
    match speaker {
        Some(speaker) => format!("{speaker}: {text}"),
        None => text.to_owned(),
    }
}

/// The text the embedder sees for `memory`: the turn it answers, then its own line. Replies are
/// often meaningless alone ("Yes, twice!"); with the question before them they are found by it.
/// Measured on the LoCoMo dev set with the full-text context column: R@10 0.775 → 0.822
/// (docs/EVAL.md).
pub fn embedding_text(memory: &Memory) -> String {
    match &memory.context {
        Some(context) => format!("{context}\n{}", line(memory)),
        None => line(memory),
    }
}

/// Cosine similarity of two unit vectors (what every embedder here returns): their dot product.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Body, MemoryId, NewMemory, Scope, Timestamp};

    #[test]
    fn episodes_carry_their_speaker() {
        let said = NewMemory::episode("I moved", Scope::default(), Some("Ann".into()), Timestamp(0), Timestamp(0));
        assert_eq!(embedding_text(&said.clone().with_id(MemoryId(1))), "Ann: I moved");
        let anonymous = NewMemory { body: Body::Episode { speaker: None }, ..said };
        assert_eq!(embedding_text(&anonymous.with_id(MemoryId(2))), "I moved");
    }

    #[test]
    fn a_reply_is_embedded_after_the_turn_it_answers() {
        let asked =
            NewMemory::episode("Been to Paris?", Scope::default(), Some("Bo".into()), Timestamp(0), Timestamp(0))
                .with_id(MemoryId(1));
        let mut reply =
            NewMemory::episode("Yes, twice", Scope::default(), Some("Ann".into()), Timestamp(1), Timestamp(1))
                .with_id(MemoryId(2));
        reply.context = Some(line(&asked));
        assert_eq!(embedding_text(&reply), "Bo: Been to Paris?\nAnn: Yes, twice");
    }
}
