//! Hybrid recall: full text and vectors searched under one filter, fused by reciprocal rank.

use crate::Parts;
use crate::config::RecallConfig;
use atlas_domain::EdgeKind;
use atlas_domain::policy::embedding::{away_from_mean, line};
use atlas_domain::policy::fusion::{RankedList, Signal, SignalScore, fuse, spread};
use atlas_domain::policy::instructions::{INSTRUCTION_PLACE, asks_about_own_past, instructs_the_agent, lift_first};
use atlas_domain::policy::long_text::{Passage, TURN_WORDS, matched_passage, per_turn, words};
use atlas_domain::policy::preferences::{PREFERENCE_PLACE, asks_for_advice, is_stated_preference};
use atlas_domain::policy::query::terms;
use atlas_domain::policy::question::{asks_about_the_requester, numbers, numbers_held};
use atlas_domain::policy::recency::boost;
use atlas_domain::policy::redundancy::collapse;
use atlas_domain::policy::speakers::said_by_the_agent;
use atlas_domain::ports::MemoryStore;
use atlas_domain::{AtlasError, Memory, MemoryId, MemoryKind, RecallFilter, Result, Scope, Timestamp};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The most memories one recall returns.
pub const MAX_K: usize = 10_000;

/// A memory with more typed links than this is a hub (an entity every turn names, a speaker,
/// the summary of a long session): graph expansion reaches it but does not walk on through it,
/// as a word in every document tells a search nothing.
pub const HUB_MENTIONS: usize = 12;

/// The furthest graph expansion walks from a hit, in typed edges.
pub const MAX_GRAPH_DEPTH: u32 = 3;

/// A recall query and its filters.
#[derive(Debug, Clone, Default)]
pub struct RecallRequest {
    pub query: String,
    pub k: usize,
    pub scope: Scope,
    /// Empty means every kind.
    pub kinds: Vec<MemoryKind>,
    /// Event time range: `since` inclusive, `until` exclusive.
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    /// Recall what was valid then; defaults to now.
    pub as_of: Option<Timestamp>,
}

/// One recalled memory, its fused score, and per signal that found it: its rank (1 = best),
/// the signal's raw score and its contribution to the fused score.
#[derive(Debug, Clone)]
pub struct Hit {
    pub memory: Memory,
    pub score: f64,
    pub signals: BTreeMap<Signal, SignalScore>,
    /// Near-duplicates of this memory that ranked below it, folded into it (provenance).
    pub duplicates: Vec<MemoryId>,
    /// For a consolidated memory (a fact), the episodes it came from.
    pub sources: Vec<Memory>,
    /// For a memory longer than a turn, the part of it the query matched
    /// (`policy::long_text::matched_passage`); `None` when all of it did.
    pub passage: Option<Passage>,
}

impl Hit {
    pub fn rank(&self, signal: Signal) -> Option<usize> {
        self.signals.get(&signal).map(|s| s.rank)
    }
}

/// Whether a signal took part, and why not when it did not.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalReport {
    pub signal: Signal,
    pub used: bool,
    /// Why it was skipped, or what limited it (e.g. vectors still being filled).
    pub note: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Recall {
    pub hits: Vec<Hit>,
    pub signals: Vec<SignalReport>,
    pub took_ms: f64,
    pub stages: StageTimings,
    /// Memories still waiting for a vector when the recall answered (found by full text only).
    pub pending_vectors: u64,
}

/// Where a recall's time went, stage by stage (an `Instant` read at each boundary: a few tens of
/// nanoseconds a stage, so always on). Full text (its search, then its candidates' records)
/// runs while the query is embedded and its vector searched, so those four overlap;
/// `took_ms - query_embedding_ms` is the retrieval time without the model. The stages after the
/// searches run one after the other and add up to `fusion_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimings {
    /// Splitting the query into its search terms.
    pub words_ms: f64,
    pub query_embedding_ms: f64,
    /// Full text's search.
    pub text_ms: f64,
    /// Reading full text's candidates' records (a long memory's match is read per turn).
    pub text_rows_ms: f64,
    pub vector_ms: f64,
    /// Everything after the searches: the stages below.
    pub fusion_ms: f64,
    /// Fusing the signals' ranked lists.
    pub fuse_ms: f64,
    /// Walking to neighbouring turns and linked memories, with the candidates' records read
    /// beside it where a standing instruction or a stated preference may be lifted.
    pub walk_ms: f64,
    /// Reading the neighbours' records and spreading scores to them.
    pub spread_ms: f64,
    /// Reading the records of the hits that may be returned, through the filter.
    pub fetch_ms: f64,
    /// Recency, the question's own words, the standing instruction and the stated preference.
    pub rules_ms: f64,
    /// Folding near-duplicates and finding each hit's matched passage.
    pub folding_ms: f64,
    /// Reading the episodes a consolidated hit came from.
    pub sources_ms: f64,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

impl Recall {
    /// Signals that did not run, with the reason, for "degraded" notices.
    pub fn skipped(&self) -> impl Iterator<Item = &SignalReport> {
        self.signals.iter().filter(|s| !s.used)
    }
}

/// What lies around a strong hit: turns up to `reach` temporal edges away, and memories up to
/// `depth` typed edges of other kinds away (edges valid at `at` only), each with its distance.
#[derive(Debug, Default)]
struct Around {
    turns: Vec<(MemoryId, u32)>,
    linked: Vec<(MemoryId, u32)>,
}

/// Breadth first from every start at once, level by level: each start's walks as it would walk
/// alone (each memory once per kind of walk, cycle-safe), while a memory's edges are read once
/// for all of them, and each level's unread memories in one call (one round trip on a store
/// behind a server, one task on SQLite's readers). Unless `entities_wanted`, an entity (the
/// far end of an entity edge) is walked through but not offered as linked: the filter would
/// refuse it after its record was read for nothing.
async fn walk_around(
    store: &dyn MemoryStore,
    starts: &[MemoryId],
    reach: u32,
    depth: u32,
    at: Timestamp,
    entities_wanted: bool,
) -> Result<HashMap<MemoryId, Around>> {
    let mut edges: HashMap<MemoryId, Vec<atlas_domain::Edge>> = HashMap::new();
    let mut around: HashMap<MemoryId, Around> = starts.iter().map(|s| (*s, Around::default())).collect();
    for (temporal, limit) in [(true, reach), (false, depth)] {
        // Per start: what its walk has seen, and its frontier.
        let mut walks: Vec<(MemoryId, std::collections::HashSet<MemoryId>, Vec<MemoryId>)> =
            starts.iter().map(|s| (*s, std::collections::HashSet::from([*s]), vec![*s])).collect();
        for distance in 1..=limit {
            let mut unread: Vec<MemoryId> =
                walks.iter().flat_map(|w| &w.2).filter(|id| !edges.contains_key(id)).copied().collect();
            unread.sort_unstable();
            unread.dedup();
            if !unread.is_empty() {
                // Past the starts, the typed walk needs a memory's links only to walk on or to
                // find it a hub: one link past the hub line tells that (an entity hundreds of
                // turns name would otherwise be read whole, to be passed over).
                let read = if temporal || distance == 1 {
                    store.edges_of_many(unread).await?
                } else {
                    store.links_of_many(unread, HUB_MENTIONS + 1).await?
                };
                edges.extend(read);
            }
            for (start, seen, frontier) in &mut walks {
                let found = around.get_mut(start).expect("one per start");
                let mut next = Vec::new();
                for id in std::mem::take(frontier) {
                    let of_id = edges.get(&id).map_or(&[][..], Vec::as_slice);
                    let links = of_id.iter().filter(|e| e.kind != EdgeKind::Temporal).count();
                    if !temporal && id != *start && links > HUB_MENTIONS {
                        continue;
                    }
                    for e in of_id {
                        // A typed link counts only while valid (as of the recall); turns stay
                        // adjacent. A link of weight 0 records provenance only (a session
                        // summary's turns, which the temporal walk already relates): it is
                        // never walked.
                        let wanted = (e.kind == EdgeKind::Temporal) == temporal;
                        if !wanted || (!temporal && (!e.validity.holds_at(at) || e.weight <= 0.0)) {
                            continue;
                        }
                        let other = if e.src == id { e.dst } else { e.src };
                        if seen.insert(other) {
                            let entity = e.kind == EdgeKind::Entity && other == e.dst;
                            if temporal {
                                found.turns.push((other, distance));
                            } else if entities_wanted || !entity {
                                found.linked.push((other, distance));
                            }
                            next.push(other);
                        }
                    }
                }
                *frontier = next;
            }
        }
    }
    Ok(around)
}

/// Reads the records of `ids` not in `memories` yet, in one call (a forgotten one stays absent).
async fn read_missing(
    store: &dyn MemoryStore,
    memories: &mut HashMap<MemoryId, Memory>,
    ids: impl Iterator<Item = MemoryId>,
) -> Result<()> {
    let mut unread: Vec<MemoryId> = ids.filter(|id| !memories.contains_key(id)).collect();
    unread.sort_unstable();
    unread.dedup();
    if !unread.is_empty() {
        memories.extend(store.get_many(unread).await?.into_iter().map(|m| (m.id, m)));
    }
    Ok(())
}

/// Adds each hit's recency boost (explained as the `recency` signal) and re-sorts.
fn add_recency(hits: &mut [Hit], now: Timestamp, config: &RecallConfig) {
    let half_life_ms = config.recency_half_life_days * 86_400_000.0;
    let mut newest_first: Vec<usize> = (0..hits.len()).collect();
    newest_first.sort_by_key(|&i| std::cmp::Reverse((hits[i].memory.event_time, hits[i].memory.id)));
    for (rank, i) in newest_first.into_iter().enumerate() {
        let h = &mut hits[i];
        let added = boost(h.memory.event_time, now, config.recency_weight, half_life_ms);
        let age_days = (now.millis() - h.memory.event_time.millis()) as f64 / 86_400_000.0;
        h.signals.insert(Signal::Recency, SignalScore { rank: rank + 1, raw: age_days, contribution: added });
        h.score += added;
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.memory.id.cmp(&b.memory.id)));
}

/// What the question itself says about where its answer lies (`policy::question`): a memory
/// that holds the numbers it names gains `number_weight` times the share it holds (the `numbers`
/// signal); for a question about the requester, a turn the agent said keeps `agent_turn_weight`
/// of its score (the `speaker` signal, whose contribution is what it lost). Re-sorts, and says
/// which of the two applied.
fn weigh_by_question(hits: &mut [Hit], query: &str, config: &RecallConfig) -> [Option<Signal>; 2] {
    let asked = if config.number_weight > 0.0 { numbers(query) } else { Vec::new() };
    let about_requester = config.agent_turn_weight < 1.0 && asks_about_the_requester(query);
    if asked.is_empty() && !about_requester {
        return [None, None];
    }
    let (mut holding, mut agent_turns) = (0, 0);
    for hit in hits.iter_mut() {
        if !asked.is_empty() {
            let share = numbers_held(&asked, &hit.memory.text);
            if share > 0.0 {
                holding += 1;
                let added = config.number_weight * share;
                hit.signals.insert(Signal::Numbers, SignalScore { rank: holding, raw: share, contribution: added });
                hit.score += added;
            }
        }
        if about_requester && said_by_the_agent(&hit.memory) {
            agent_turns += 1;
            let lost = hit.score * (1.0 - config.agent_turn_weight.max(0.0));
            hit.signals.insert(Signal::Speaker, SignalScore { rank: agent_turns, raw: hit.score, contribution: -lost });
            hit.score -= lost;
        }
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.memory.id.cmp(&b.memory.id)));
    [(!asked.is_empty()).then_some(Signal::Numbers), about_requester.then_some(Signal::Speaker)]
}

/// Puts the first hit `lifted` accepts at `place` at worst, scored between the hits around its
/// new place (the difference explained as `signal`), so hits stay in score order. Only one that
/// the request's words or vector found: one that spreading brought in beside a hit matched
/// nothing of the request. A standing instruction and a stated preference are lifted so.
fn lift(hits: &mut [Hit], place: usize, signal: Signal, lifted: impl Fn(&Memory) -> bool) {
    let searched = |h: &Hit| h.signals.contains_key(&Signal::Text) || h.signals.contains_key(&Signal::Vector);
    let Some((from, to)) = lift_first(hits, place, |h| searched(h) && lifted(&h.memory)) else { return };
    if from == to {
        return;
    }
    // The hit it passed now stands right below it, the one it did not pass right above.
    let passed = hits[to + 1].score;
    let level = if to > 0 { (hits[to - 1].score + passed) / 2.0 } else { passed };
    let hit = &mut hits[to];
    let added = (level - hit.score).max(0.0);
    hit.signals.insert(signal, SignalScore { rank: 1, raw: hit.score, contribution: added });
    hit.score += added;
}

pub async fn recall(parts: &Parts, config: &RecallConfig, request: RecallRequest, now: Timestamp) -> Result<Recall> {
    let started = Instant::now();
    if request.query.trim().is_empty() {
        return Err(AtlasError::invalid("recall", "field \"query\": empty"));
    }
    if request.k > MAX_K {
        return Err(AtlasError::invalid("recall", format!("field \"k\": at most {MAX_K}, got {}", request.k)));
    }
    if request.k == 0 {
        return Err(AtlasError::invalid("recall", "field \"k\": must be at least 1 (how many memories to return)"));
    }
    if let (Some(since), Some(until)) = (request.since, request.until)
        && since >= until
    {
        return Err(AtlasError::invalid(
            "recall",
            format!(
                "field \"since\": {} is not before until {}, so no memory can match",
                since.to_rfc3339(),
                until.to_rfc3339()
            ),
        ));
    }
    let filter = RecallFilter {
        scope: request.scope,
        // Entities are the graph's nodes, a name each: they link memories and are searched only
        // when asked for by kind (a bare name would top every full-text list and skew fusion).
        // Session summaries are for context assembly: they restate turns that recall already
        // finds, so they too come only when asked for. So do a project's documents (`atlas docs
        // sync`): reference text, not what the agent lived through.
        kinds: if request.kinds.is_empty() {
            MemoryKind::ALL
                .into_iter()
                .filter(|k| !matches!(k, MemoryKind::Entity | MemoryKind::Summary | MemoryKind::Doc))
                .collect()
        } else {
            request.kinds
        },
        since: request.since,
        until: request.until,
        valid_at: Some(request.as_of.unwrap_or(now)),
        forgotten: false,
    };
    let candidates = request.k.max(config.candidates);
    let mut stages = StageTimings::default();
    let t = Instant::now();
    let query_terms = terms(&request.query);
    stages.words_ms = ms_since(t);
    // Per stage, in microseconds; atomics keep the recall future Send.
    let (text_us, text_rows_us, embed_us, vector_us) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let record = |cell: &AtomicU64, t: Instant| cell.store(t.elapsed().as_micros() as u64, Ordering::Relaxed);

    let text = async {
        if query_terms.is_empty() {
            let note = Some("the query has no searchable words".to_owned());
            return Ok((Vec::new(), Vec::new(), SignalReport { signal: Signal::Text, used: false, note }));
        }
        let t = Instant::now();
        let mut hits = parts.text.search_text(query_terms.clone(), filter.clone(), candidates).await?;
        record(&text_us, t);
        let t = Instant::now();
        // A long memory's match is read per turn of its length (policy::long_text); the records
        // are read here, while the query is embedded, and serve the fetch after fusion too.
        let found = parts.store.get_many(hits.iter().map(|h| h.id).collect()).await?;
        let lengths: HashMap<MemoryId, usize> = found.iter().map(|m| (m.id, words(&m.text))).collect();
        for hit in &mut hits {
            hit.score = per_turn(hit.score, lengths.get(&hit.id).copied().unwrap_or(0));
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        record(&text_rows_us, t);
        Ok::<_, AtlasError>((hits, found, SignalReport { signal: Signal::Text, used: true, note: None }))
    };
    let vector = async {
        let Some(embedder) = &parts.embedder else {
            let note = Some("no embedder configured; recall ran on full text only".to_owned());
            return Ok((Vec::new(), SignalReport { signal: Signal::Vector, used: false, note }));
        };
        let t = Instant::now();
        // The space's mean vector is kept or cached by the store; read it while the model runs.
        let mean = async { if config.centre_query { parts.vectors.mean_vector().await } else { Ok(None) } };
        let deadline = std::time::Duration::from_millis(config.query_embedding_timeout_ms.max(1));
        let embedding = crate::query_embedding::embed_query(
            embedder.as_ref(),
            &parts.query_breaker,
            request.query.clone(),
            deadline,
        );
        let (query, mean) = tokio::join!(embedding, mean);
        let query = match query {
            Ok(query) => away_from_mean(&query, mean?.as_deref()),
            // An embedder that fails (an endpoint away, hung or answering garbage) delays
            // vectors; it never fails a recall, nor holds it past its deadline.
            Err(why) => {
                tracing::warn!(%why, "no query vector; recalling on full text only");
                let note = Some(format!("{why}; recall ran on full text only"));
                return Ok((Vec::new(), SignalReport { signal: Signal::Vector, used: false, note }));
            }
        };
        record(&embed_us, t);
        let t = Instant::now();
        let (hits, pending) = tokio::join!(
            parts.vectors.search_vector(query, filter.clone(), candidates),
            parts.vectors.pending_vectors(1)
        );
        record(&vector_us, t);
        let note = (!pending?.is_empty()).then(|| "some memories are still waiting for their vectors".to_owned());
        Ok::<_, AtlasError>((hits?, SignalReport { signal: Signal::Vector, used: true, note }))
    };
    let ((text_hits, text_memories, text_report), (vector_hits, vector_report)) = tokio::try_join!(text, vector)?;
    let fusion_started = Instant::now();
    let t = Instant::now();

    let lists = [
        RankedList { signal: Signal::Text, weight: config.text_weight, hits: text_hits },
        RankedList { signal: Signal::Vector, weight: config.vector_weight, hits: vector_hits },
    ];
    let mut fused = fuse(&lists, config.fusion, config.rrf_k);
    stages.fuse_ms = ms_since(t);
    let t = Instant::now();
    // Records read so far (full text's candidates), and later what spreading and the fetch need.
    let mut memories: HashMap<_, _> = text_memories.into_iter().map(|m| (m.id, m)).collect();
    let mut signals = vec![text_report, vector_report];
    // A standing instruction ranks far below the memories that answer a request it governs
    // (policy::instructions): every candidate's record is read to find the best-ranked one,
    // while spreading walks the graph. With k at most its place, the instruction would take the
    // place of an answer. A question about what the requester did or said is answered by memories
    // of that past, not governed by an instruction: it lifts none.
    let lifting = config.standing_instructions && request.k > INSTRUCTION_PLACE && !asks_about_own_past(&request.query);
    // So does a request for advice, for the user's stated preference it should follow
    // (policy::preferences).
    let preferring = config.standing_preferences && request.k > PREFERENCE_PLACE && asks_for_advice(&request.query);
    let unread: Vec<MemoryId> = if lifting || preferring {
        fused.iter().map(|f| f.id).filter(|id| !memories.contains_key(id)).collect()
    } else {
        Vec::new()
    };
    let spreading = (config.context_weight > 0.0 || config.graph_weight > 0.0) && request.k > 0;
    let from = config.context_from.min(fused.len());
    let starts: Vec<MemoryId> = fused[..from].iter().map(|f| f.id).collect();
    let walk = async {
        if !spreading {
            return Ok(None);
        }
        let reach = if config.context_weight > 0.0 { config.context_reach } else { 0 };
        let depth = if config.graph_weight > 0.0 { config.graph_depth.min(MAX_GRAPH_DEPTH) } else { 0 };
        let entities_wanted = filter.kinds.is_empty() || filter.kinds.contains(&MemoryKind::Entity);
        walk_around(parts.store.as_ref(), &starts, reach, depth, request.as_of.unwrap_or(now), entities_wanted)
            .await
            .map(Some)
    };
    let candidates_read = async { if unread.is_empty() { Ok(Vec::new()) } else { parts.store.get_many(unread).await } };
    let (walked, candidate_records) = tokio::try_join!(walk, candidates_read)?;
    memories.extend(candidate_records.into_iter().map(|m| (m.id, m)));
    stages.walk_ms = ms_since(t);
    let t = Instant::now();
    if let Some(walked) = walked {
        let (mut turns, mut linked) = (HashMap::with_capacity(from), HashMap::with_capacity(from));
        for (id, around) in walked {
            turns.insert(id, around.turns);
            linked.insert(id, around.linked);
        }
        // Context is for turns of conversation: a reply that means little alone gets its share
        // from the question that was found. A long message beside a hit (an assistant's answer,
        // a pasted document) is a memory of its own, found by its own words and vector; credited
        // with its neighbour's score it would surround every hit in the top k.
        read_missing(parts.store.as_ref(), &mut memories, turns.values().flatten().map(|(id, _)| *id)).await?;
        for near in turns.values_mut() {
            near.retain(|(id, _)| memories.get(id).is_some_and(|m| words(&m.text) <= TURN_WORDS));
        }
        if config.context_weight > 0.0 {
            fused = spread(fused, &turns, from, config.context_weight, config.context_decay, Signal::Context);
            signals.push(SignalReport { signal: Signal::Context, used: true, note: None });
        }
        if config.graph_weight > 0.0 {
            fused = spread(fused, &linked, from, config.graph_weight, config.graph_decay, Signal::Graph);
            signals.push(SignalReport { signal: Signal::Graph, used: true, note: None });
        }
    }
    stages.spread_ms = ms_since(t);
    let t = Instant::now();
    // Context can bring in memories no search saw: they pass the same filter before they count.
    // Twice k, so that k distinct hits remain after near-duplicates fold.
    let reachable = config.context_from * 2 * (config.context_reach + config.graph_depth.min(MAX_GRAPH_DEPTH)) as usize;
    // Memories the filter refuses (an entity or a session summary the walk passed through) do
    // not take a place: the window grows until it holds that many the filter admits.
    let want = request.k * 2 + reachable;
    let (mut admitted, mut next) = (0, 0);
    while admitted < want && next < fused.len() {
        let end = (next + want - admitted).min(fused.len());
        let window: Vec<_> = fused[next..end].iter().map(|f| f.id).collect();
        next = end;
        read_missing(parts.store.as_ref(), &mut memories, window.iter().copied()).await?;
        admitted += window.iter().filter(|id| memories.get(id).is_some_and(|m| filter.admits(m))).count();
    }
    // A memory forgotten between search and fetch is simply absent.
    let mut hits: Vec<Hit> = fused
        .into_iter()
        .filter_map(|f| {
            memories.remove(&f.id).map(|memory| Hit {
                memory,
                score: f.score,
                signals: f.signals,
                duplicates: vec![],
                sources: vec![],
                passage: None,
            })
        })
        .filter(|h| filter.admits(&h.memory))
        .collect();
    stages.fetch_ms = ms_since(t);
    let t = Instant::now();
    if request.k > 0 && config.recency_weight > 0.0 {
        add_recency(&mut hits, request.as_of.unwrap_or(now), config);
        signals.push(SignalReport { signal: Signal::Recency, used: true, note: None });
    }
    for signal in weigh_by_question(&mut hits, &request.query, config).into_iter().flatten() {
        signals.push(SignalReport { signal, used: true, note: None });
    }
    if lifting {
        lift(&mut hits, INSTRUCTION_PLACE, Signal::Instruction, instructs_the_agent);
        signals.push(SignalReport { signal: Signal::Instruction, used: true, note: None });
    }
    if preferring {
        lift(&mut hits, PREFERENCE_PLACE, Signal::Preference, is_stated_preference);
        signals.push(SignalReport { signal: Signal::Preference, used: true, note: None });
    }
    stages.rules_ms = ms_since(t);
    let t = Instant::now();
    // Only within one scope: the same words under two keys of a store, or told in two sessions
    // or by two users, are things a caller addressed apart.
    let mut hits: Vec<Hit> =
        collapse(hits, |h| line(&h.memory), |h| h.memory.scope.clone(), config.duplicate_threshold, request.k)
            .into_iter()
            .map(|(mut hit, folded)| {
                hit.duplicates = folded.iter().map(|f| f.memory.id).collect();
                hit.passage = matched_passage(&hit.memory.text, &query_terms);
                hit
            })
            .collect();
    stages.folding_ms = ms_since(t);
    let t = Instant::now();
    attach_sources(parts.store.as_ref(), &mut hits).await?;
    stages.sources_ms = ms_since(t);
    let micros = |cell: &AtomicU64| cell.load(Ordering::Relaxed) as f64 / 1e3;
    stages.query_embedding_ms = micros(&embed_us);
    stages.text_ms = micros(&text_us);
    stages.text_rows_ms = micros(&text_rows_us);
    stages.vector_ms = micros(&vector_us);
    stages.fusion_ms = ms_since(fusion_started);
    Ok(Recall { hits, signals, took_ms: ms_since(started), stages, pending_vectors: 0 })
}

/// A consolidated hit (a fact, a summary) names the episodes it came from (its `derived_from`
/// edges, in the store's order): every hit's edges in one call and every source in one more,
/// however many hits are consolidated.
async fn attach_sources(store: &dyn MemoryStore, hits: &mut [Hit]) -> Result<()> {
    let consolidated: Vec<MemoryId> =
        hits.iter().filter(|h| h.memory.kind() != MemoryKind::Episode).map(|h| h.memory.id).collect();
    if consolidated.is_empty() {
        return Ok(());
    }
    let edges = store.edges_of_many(consolidated).await?;
    let source_ids = |id: &MemoryId| -> Vec<MemoryId> {
        let of_id = edges.get(id).map_or(&[][..], Vec::as_slice);
        of_id.iter().filter(|e| e.kind == EdgeKind::DerivedFrom && e.src == *id).map(|e| e.dst).collect()
    };
    let mut wanted: Vec<MemoryId> = edges.keys().flat_map(source_ids).collect();
    wanted.sort_unstable();
    wanted.dedup();
    if wanted.is_empty() {
        return Ok(());
    }
    let found: HashMap<MemoryId, Memory> = store.get_many(wanted).await?.into_iter().map(|m| (m.id, m)).collect();
    for hit in hits.iter_mut().filter(|h| edges.contains_key(&h.memory.id)) {
        // A source forgotten since is simply absent, and each is named once, as `get_many`
        // leaves them.
        let mut named = std::collections::HashSet::new();
        hit.sources = source_ids(&hit.memory.id)
            .into_iter()
            .filter(|id| named.insert(*id))
            .filter_map(|id| found.get(&id).cloned())
            .collect();
    }
    Ok(())
}
