//! What a memory is embedded and indexed as: its own line and the turn it answers; how two
//! embeddings compare.

use crate::Memory;
use crate::policy::long_text::{TURN_WORDS, words};

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

/// The longest turn, in words, that the turn after it carries as its context. Context is for
/// replies that mean little alone ("Yes, twice!"): the line they answer is a conversational turn.
/// A long message before a memory (an assistant's 500-word answer, a pasted document) is not the
/// question the memory answers but a memory of its own, found by its own words; carried along it
/// would fill the embedder's window and outweigh the memory's own words in full text. A paragraph
/// (100 words) bounds a turn of conversation: LoCoMo's longest is 81 words, while 99% of BEAM's
/// assistant answers are longer. Measured with the same model, dense only (docs/EVAL.md): on
/// BEAM any part of a long predecessor lowers recall@10 (own line 0.583; with its first 24 words
/// 0.543, 64 words 0.526), while on LoCoMo the context is what finds replies (0.425 → 0.547).
pub const CONTEXT_MAX_WORDS: usize = TURN_WORDS;

/// What a memory carries of the turn before it (`predecessor` is that turn's [`line`]): all of
/// it when it is a conversational turn of at most [`CONTEXT_MAX_WORDS`] words, else nothing.
pub fn context_from(predecessor: &str) -> Option<String> {
    carried(predecessor).then(|| predecessor.to_owned())
}

fn carried(context: &str) -> bool {
    words(context) <= CONTEXT_MAX_WORDS
}

/// About how many words of English fill the embedder's window (256 word-piece tokens, about 1.3
/// a word, less room for the markers).
pub const WINDOW_WORDS: usize = 150;

/// The text the embedder sees for `memory`: the turn it answers, then its own line, in the order
/// they were said, when both fit the embedder's window ([`WINDOW_WORDS`]); else its own line
/// first, so that the window always holds the memory's own words and the context is what gets
/// cut. Replies are often meaningless alone ("Yes, twice!"); with the question they are found by
/// it. A context longer than [`CONTEXT_MAX_WORDS`] (stored before that rule) is left out.
/// Measured (docs/EVAL.md): on LoCoMo dev, whose turns always fit, the context takes R@10 from
/// 0.775 to 0.822 with the full-text context column; on BEAM, where they often do not, own words
/// first and long turns not carried take R@10 from 0.380 to 0.560.
pub fn embedding_text(memory: &Memory) -> String {
    let own = line(memory);
    match memory.context.as_deref().filter(|c| carried(c)) {
        Some(context) if words(context) + words(&own) <= WINDOW_WORDS => format!("{context}\n{own}"),
        Some(context) => format!("{own}\n{context}"),
        None => own,
    }
}

/// What a vector search looks for: the query's direction away from `mean`, the mean of the
/// space's stored vectors, as a unit vector (the query itself when there is no mean yet, or it is
/// the mean). Sentence embeddings share a common direction (they are anisotropic: Ethayarajh
/// 2019; Mu and Viswanath, "All-but-the-Top", 2018), strongest in long texts, whose mean-pooled
/// vectors sit near the centroid and so come out fairly similar to every query. Measuring
/// `d · (q - mean)` instead of `d · q` ranks each memory by what it shares with the query beyond
/// what every memory of the space shares with it. Measured (docs/EVAL.md), dense only: recall@10
/// on BEAM 0.584 → 0.623, on LoCoMo 0.547 → 0.587; inside ATLAS's fusion it helps BEAM and costs
/// LoCoMo, so recall applies it only when `recall.centre_query` is set.
pub fn away_from_mean(query: &[f32], mean: Option<&[f32]>) -> Vec<f32> {
    let Some(mean) = mean.filter(|m| m.len() == query.len()) else { return query.to_vec() };
    let centred: Vec<f32> = query.iter().zip(mean).map(|(q, m)| q - m).collect();
    let norm = centred.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if !norm.is_finite() || norm < 1e-6 {
        return query.to_vec();
    }
    centred.iter().map(|x| (f64::from(*x) / norm) as f32).collect()
}

/// Cosine similarity of two unit vectors (what every embedder here returns): their dot product.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum()
}

/// Several models' vectors of one text as one vector: each made unit length, scaled by 1/√n and
/// laid end to end. The result is unit length, and its cosine with another text's joined vector
/// is the mean of the models' cosines: one vector search ranks by every model at once, each
/// counting the same, with no weight to fit. Why join at all: models trained differently miss
/// different evidence (a retrieval-trained model finds conversational turns that MiniLM misses,
/// MiniLM long messages that it misses; docs/EVAL.md), and a joined vector keeps one index, one
/// queue and one cache per space. A part that is all zeros adds nothing.
pub fn joined(parts: &[Vec<f32>]) -> Vec<f32> {
    let share = 1.0 / (parts.len().max(1) as f64).sqrt();
    let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for part in parts {
        let norm = part.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
        let scale = if norm.is_finite() && norm > 0.0 { share / norm } else { 0.0 };
        out.extend(part.iter().map(|x| (f64::from(*x) * scale) as f32));
    }
    out
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
        reply.context = context_from(&line(&asked));
        assert_eq!(embedding_text(&reply), "Bo: Been to Paris?\nAnn: Yes, twice");
    }

    #[test]
    fn a_memory_too_long_to_share_the_window_comes_before_its_context() {
        let own = "word ".repeat(WINDOW_WORDS);
        let mut reply =
            NewMemory::episode(own.trim(), Scope::default(), Some("Ann".into()), Timestamp(1), Timestamp(1))
                .with_id(MemoryId(2));
        reply.context = Some("Bo: Been to Paris?".into());
        let text = embedding_text(&reply);
        assert!(text.starts_with("Ann: word word"), "{text}");
        assert!(text.ends_with("\nBo: Been to Paris?"), "{text}");
    }

    #[test]
    fn a_long_turn_is_not_carried_as_context() {
        let long = format!("assistant: {}", "word ".repeat(CONTEXT_MAX_WORDS));
        assert_eq!(context_from(&long), None);
        let short = format!("assistant: {}", "word ".repeat(CONTEXT_MAX_WORDS - 2));
        assert_eq!(context_from(&short).as_deref(), Some(short.as_str()));
        // A context stored before the rule is not embedded either.
        let mut reply = NewMemory::episode("Yes", Scope::default(), Some("user".into()), Timestamp(1), Timestamp(1))
            .with_id(MemoryId(2));
        reply.context = Some(long);
        assert_eq!(embedding_text(&reply), "user: Yes");
    }

    proptest::proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn the_query_away_from_the_mean_is_a_unit_vector_ranking_by_what_is_left(
            query in proptest::collection::vec(-1.0f32..1.0, 8),
            mean in proptest::collection::vec(-0.5f32..0.5, 8),
        ) {
            let away = away_from_mean(&query, Some(&mean));
            let norm: f64 = away.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            let q_norm: f64 = query.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            if q_norm > 1e-3 {
                proptest::prop_assert!((norm - 1.0).abs() < 1e-4 || away == query);
            }
            // No mean, or one of another dimension: the query itself.
            proptest::prop_assert_eq!(away_from_mean(&query, None), query.clone());
            proptest::prop_assert_eq!(away_from_mean(&query, Some(&mean[..4])), query.clone());
            // Ranking by the result is ranking by d·q − d·mean: a document along the mean loses
            // exactly its share of the mean.
            let d: Vec<f32> = mean.clone();
            let lhs = cosine(&d, &away);
            let rhs: f64 = d.iter().zip(&query).zip(&mean).map(|((d, q), m)| f64::from(*d) * f64::from(q - m)).sum::<f64>();
            let scale: f64 = query.iter().zip(&mean).map(|(q, m)| f64::from(q - m).powi(2)).sum::<f64>().sqrt();
            if scale > 1e-3 {
                proptest::prop_assert!((lhs - rhs / scale).abs() < 1e-3);
            }
        }

        #[test]
        fn a_joined_vector_is_unit_length_and_compares_by_the_mean_of_its_parts(
            a in proptest::collection::vec(-1.0f32..1.0, 6),
            b in proptest::collection::vec(-1.0f32..1.0, 4),
            c in proptest::collection::vec(-1.0f32..1.0, 6),
            d in proptest::collection::vec(-1.0f32..1.0, 4),
        ) {
            let unit = |v: &[f32]| {
                let n = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
                v.iter().map(|x| (f64::from(*x) / n) as f32).collect::<Vec<f32>>()
            };
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            proptest::prop_assume!(norm(&a) > 1e-2 && norm(&b) > 1e-2 && norm(&c) > 1e-2 && norm(&d) > 1e-2);
            let first = joined(&[a.clone(), b.clone()]);
            let second = joined(&[c.clone(), d.clone()]);
            proptest::prop_assert_eq!(first.len(), 10);
            proptest::prop_assert!((norm(&first) - 1.0).abs() < 1e-4);
            let mean = (cosine(&unit(&a), &unit(&c)) + cosine(&unit(&b), &unit(&d))) / 2.0;
            proptest::prop_assert!((cosine(&first, &second) - mean).abs() < 1e-4);
            // One part: the part itself, made unit length.
            let alone = joined(std::slice::from_ref(&a));
            proptest::prop_assert!(alone.iter().zip(unit(&a)).all(|(x, y)| (x - y).abs() < 1e-5));
            // A part of zeros adds nothing and takes nothing from the other's direction.
            let zero = joined(&[a.clone(), vec![0.0; 4]]);
            proptest::prop_assert!(zero[6..].iter().all(|x| *x == 0.0));
        }
    }
}
