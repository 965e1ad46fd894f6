//! The text index's port on Qdrant: candidates by the sparse `text` vector under the filter,
//! rescored exactly by the domain's BM25 from the corpus' statistics (read again when stale).

use crate::decode::{include, memory_id};
use crate::{CorpusStats, QdrantStore, collection, filter, payload, sparse};
use async_trait::async_trait;
use atlas_domain::policy::bm25::{self, Document};
use atlas_domain::ports::{ScoredId, TextIndex};
use atlas_domain::{RecallFilter, Result};
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::{Filter, PointId, QueryPointsBuilder, ScrollPointsBuilder};
use std::time::Duration;

/// How many text candidates Qdrant finds for the exact rescoring, at least, and per hit asked.
pub(crate) const TEXT_POOL_MIN: usize = 200;
const TEXT_POOL_PER_HIT: usize = 2;
/// The corpus statistics of the rescoring (rows, average length) are read again after this
/// long, or once this store has written a hundredth of the rows since.
const CORPUS_STATS_TTL: Duration = Duration::from_secs(30);
/// The average length is read from at most this many points (all of them in smaller spaces).
const CORPUS_LENGTH_SAMPLE: usize = 20_000;
impl QdrantStore {
    /// How many points hold each stem, counted once per stem while the corpus statistics last.
    async fn stem_frequencies(&self, terms: &[u32]) -> Result<Vec<u64>> {
        let missing: Vec<u32> = {
            let known = self.stem_counts.lock().expect("stem counts lock");
            terms.iter().copied().filter(|t| !known.contains_key(t)).collect()
        };
        let filters = missing
            .iter()
            .map(|t| {
                qdrant_client::qdrant::Filter::must([qdrant_client::qdrant::Condition::matches(
                    payload::field::TERMS,
                    i64::from(*t),
                )])
            })
            .collect();
        let counted = self.collection.count_each(filters).await?;
        let mut known = self.stem_counts.lock().expect("stem counts lock");
        known.extend(missing.into_iter().zip(counted));
        Ok(terms.iter().map(|t| known.get(t).copied().unwrap_or(0)).collect())
    }

    /// Rows and average length of the collection, read again when stale.
    async fn corpus_stats(&self) -> Result<CorpusStats> {
        use std::sync::atomic::Ordering;
        let writes = self.writes.load(Ordering::Relaxed);
        if let Some(stats) = *self.corpus.lock().expect("corpus lock")
            && stats.read_at.elapsed() < CORPUS_STATS_TTL
            && (writes - stats.writes_at) * 100 <= stats.rows
        {
            return Ok(stats);
        }
        let rows =
            self.collection.count(Some(Filter { must_not: vec![filter::pending()], ..Default::default() })).await?;
        let mut lengths = 0u64;
        let mut counted = 0u64;
        let mut offset: Option<PointId> = None;
        while (counted as usize) < CORPUS_LENGTH_SAMPLE {
            let mut request = ScrollPointsBuilder::new(self.collection.name())
                .limit(1000)
                .with_payload(include(&[payload::field::TEXT_LEN]))
                .with_vectors(false);
            if let Some(o) = offset.take() {
                request = request.offset(o);
            }
            let page = self.collection.call("scroll", self.collection.client().scroll(request.build())).await?.points;
            let full = page.len() == 1000;
            for p in &page {
                if let Some(n) = p.payload.get(payload::field::TEXT_LEN).and_then(|v| v.as_integer()) {
                    lengths += n.max(0) as u64;
                    counted += 1;
                }
            }
            let next = page.last().and_then(|p| p.id.clone()).and_then(|id| match id.point_id_options {
                Some(PointIdOptions::Num(n)) => Some(PointId::from(n + 1)),
                _ => None,
            });
            match (full, next) {
                (true, Some(n)) => offset = Some(n),
                _ => break,
            }
        }
        let stats = CorpusStats {
            rows,
            avg_len: if counted == 0 { 1.0 } else { lengths as f64 / counted as f64 },
            read_at: std::time::Instant::now(),
            writes_at: writes,
        };
        *self.corpus.lock().expect("corpus lock") = Some(stats);
        self.stem_counts.lock().expect("stem counts lock").clear();
        Ok(stats)
    }
}

#[async_trait]
impl TextIndex for QdrantStore {
    async fn search_text(&self, terms: Vec<String>, filter: RecallFilter, limit: usize) -> Result<Vec<ScoredId>> {
        let query = self.bm25.query(&terms);
        if limit == 0 || query.indices.is_empty() || !self.collection.exists().await? {
            return Ok(Vec::new());
        }
        // Candidates by the sparse vector, a pool wide enough to hold the best `limit`...
        let pairs: Vec<(u32, f32)> = query.indices.into_iter().zip(query.values).collect();
        let fields = [payload::field::TEXT, payload::field::SPEAKER, payload::field::CONTEXT];
        let request = QueryPointsBuilder::new(self.collection.name())
            .query(qdrant_client::qdrant::Query::new_nearest(pairs.as_slice()))
            .using(collection::TEXT_VECTOR)
            .limit((limit * TEXT_POOL_PER_HIT).max(TEXT_POOL_MIN) as u64)
            .with_payload(include(&fields))
            .filter(filter::to_qdrant(&filter));
        let candidates = self.collection.call("query", self.collection.client().query(request.build())).await?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        // ... rescored exactly as every store scores them, from their text and the corpus'
        // statistics. A candidate that holds none of the tokens (it shares only a hash) drops out.
        let terms = bm25::query_tokens(&terms);
        let stats = self.corpus_stats().await?;
        let indices: Vec<u32> = terms.iter().map(|(token, _)| sparse::term_index(token)).collect();
        let frequencies = self.stem_frequencies(&indices).await?;
        let weighted: Vec<(String, u32, f64)> = terms
            .into_iter()
            .zip(&frequencies)
            .map(|((token, times), &n)| (token, times, bm25::idf(stats.rows.max(n), n)))
            .collect();
        let mut hits = Vec::with_capacity(candidates.len());
        for p in candidates {
            let id = memory_id(p.id.as_ref())?;
            let text = |f: &str| p.payload.get(f).and_then(|v| v.as_str()).map(String::as_str);
            let document = Document::of(text(fields[0]).unwrap_or_default(), text(fields[1]), text(fields[2]));
            if let Some(score) = bm25::score(&document, &weighted, stats.avg_len) {
                hits.push(ScoredId { id, score });
            }
        }
        // Best first, ties to the smaller id, as on every store.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(limit);
        Ok(hits)
    }
}
