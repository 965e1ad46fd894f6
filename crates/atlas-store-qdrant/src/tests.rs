//! The store's requests, checked against a mock of the client: what is sent, in which order, and
//! what happens when the server fails. (The conformance suite runs on a real server.)

use super::*;
use crate::api::MockQdrantApi;
use crate::text_index::TEXT_POOL_MIN;
use atlas_domain::policy::bm25;
use atlas_domain::ports::{MemoryStore, ScoredId, TextIndex};
use atlas_domain::{MemoryId, NewMemory, RecallFilter, Scope, Timestamp};
use qdrant_client::qdrant::{DeletePoints, PointStruct, QueryPoints, RetrievedPoint, ScoredPoint};
use std::sync::Mutex;

fn turn(text: &str, speaker: &str, t: i64) -> NewMemory {
    let scope = Scope { session: Some("s".into()), user: Some("ann".into()), ..Scope::default() };
    NewMemory::episode(text, scope, Some(speaker.into()), Timestamp(t), Timestamp(t))
}

/// A collection that exists, with the payload indexes of this version, and nothing for an
/// open to finish (no write records, no memory ids yet).
pub(crate) fn existing_collection() -> MockQdrantApi {
    let mut api = MockQdrantApi::new();
    api.expect_collection_exists().returning(|_| Ok(true));
    api.expect_collection_info().returning(|_| Ok(all_indexes()));
    api.expect_scroll()
        .withf(|r| to_meta(&r.collection_name) && format!("{:?}", r.filter).contains("\"writing\""))
        .returning(|_| Ok(Default::default()));
    api.expect_scroll()
        .withf(|r| r.order_by.as_ref().is_some_and(|o| o.key == "id"))
        .returning(|_| Ok(Default::default()));
    // The space's settings: no model bound yet.
    api.expect_get_points().withf(|r| to_meta(&r.collection_name)).returning(|_| Ok(Vec::new()));
    api
}

fn all_indexes() -> qdrant_client::qdrant::GetCollectionInfoResponse {
    let info = qdrant_client::qdrant::CollectionInfo {
        payload_schema: crate::schema::MEMORY_INDEXES
            .iter()
            .chain(&crate::schema::META_INDEXES)
            .map(|(f, _)| ((*f).to_owned(), Default::default()))
            .collect(),
        ..Default::default()
    };
    qdrant_client::qdrant::GetCollectionInfoResponse { result: Some(info), ..Default::default() }
}

async fn open(dir: &Path, api: MockQdrantApi) -> QdrantStore {
    QdrantStore::open_with(&dir.join("space.db"), QdrantOptions::new("http://q:6334"), Arc::new(api)).await.unwrap()
}

fn text_of(p: &PointStruct, key: &str) -> Option<String> {
    p.payload.get(key).map(|v| serde_json::Value::from(v.clone())).and_then(|v| v.as_str().map(str::to_owned))
}

fn to_meta(collection: &str) -> bool {
    collection.ends_with("_meta")
}

/// What a mock server holds: the points of each collection (by their id's debug form) and
/// a log of the calls, "call collection". Writes ignore their conditions except
/// insert-only; enough to follow a write from its record to its reveal.
#[derive(Default)]
struct Server {
    points: HashMap<String, Vec<PointStruct>>,
    log: Vec<String>,
}

impl Server {
    fn of(&mut self, collection: &str) -> &mut Vec<PointStruct> {
        self.points.entry(if to_meta(collection) { "meta" } else { "memories" }.to_owned()).or_default()
    }

    fn note(&mut self, call: &str, collection: &str) {
        self.log.push(format!("{call} {}", if to_meta(collection) { "meta" } else { "memories" }));
    }

    fn memories(&self) -> Vec<PointStruct> {
        self.points.get("memories").cloned().unwrap_or_default()
    }
}

fn retrieved(p: &PointStruct) -> RetrievedPoint {
    RetrievedPoint { id: p.id.clone(), payload: p.payload.clone(), ..Default::default() }
}

/// The points a selector names: listed ids, ids in a filter, or (any other filter) all.
fn selected(selector: Option<&qdrant_client::qdrant::PointsSelector>, points: &[PointStruct]) -> Vec<usize> {
    use qdrant_client::qdrant::points_selector::PointsSelectorOneOf;
    let ids: Option<Vec<PointId>> = match selector.and_then(|s| s.points_selector_one_of.as_ref()) {
        Some(PointsSelectorOneOf::Points(list)) => Some(list.ids.clone()),
        Some(PointsSelectorOneOf::Filter(f)) => f.must.iter().find_map(|c| match &c.condition_one_of {
            Some(qdrant_client::qdrant::condition::ConditionOneOf::HasId(h)) => Some(h.has_id.clone()),
            _ => None,
        }),
        None => None,
    };
    (0..points.len()).filter(|i| ids.as_ref().is_none_or(|ids| ids.contains(points[*i].id.as_ref().unwrap()))).collect()
}

/// A mock server; `failing_upserts` makes every upsert of memories fail (unreachable).
fn server(failing_upserts: bool) -> (MockQdrantApi, Arc<Mutex<Server>>) {
    let state: Arc<Mutex<Server>> = Arc::default();
    let mut api = MockQdrantApi::new();
    api.expect_collection_exists().returning(|_| Ok(true));
    api.expect_collection_info().returning(|_| Ok(all_indexes()));
    let s = Arc::clone(&state);
    api.expect_upsert_points().returning(move |r| {
        let mut s = s.lock().unwrap();
        s.note("upsert", &r.collection_name);
        if failing_upserts && !to_meta(&r.collection_name) {
            return Err(qdrant_client::QdrantError::ResponseError {
                status: tonic::Status::unavailable("connection refused"),
            });
        }
        let insert_only = r.update_mode == Some(qdrant_client::qdrant::UpdateMode::InsertOnly as i32);
        let held = s.of(&r.collection_name);
        for p in r.points {
            match held.iter().position(|h| h.id == p.id) {
                Some(_) if insert_only => {}
                Some(i) => held[i] = p,
                None => held.push(p),
            }
        }
        Ok(())
    });
    let s = Arc::clone(&state);
    api.expect_get_points().returning(move |r| {
        let mut s = s.lock().unwrap();
        s.note("get", &r.collection_name);
        let held = s.of(&r.collection_name);
        Ok(held.iter().filter(|p| r.ids.contains(p.id.as_ref().unwrap())).map(retrieved).collect())
    });
    let s = Arc::clone(&state);
    api.expect_set_payload().returning(move |r| {
        let mut s = s.lock().unwrap();
        s.note("set_payload", &r.collection_name);
        let held = s.of(&r.collection_name);
        for i in selected(r.points_selector.as_ref(), held) {
            held[i].payload.extend(r.payload.clone());
        }
        Ok(())
    });
    let s = Arc::clone(&state);
    api.expect_delete_payload().returning(move |r| {
        let mut s = s.lock().unwrap();
        s.note("delete_payload", &r.collection_name);
        let held = s.of(&r.collection_name);
        for i in selected(r.points_selector.as_ref(), held) {
            for key in &r.keys {
                held[i].payload.remove(key);
            }
        }
        Ok(())
    });
    let s = Arc::clone(&state);
    api.expect_delete_points().returning(move |r| {
        let mut s = s.lock().unwrap();
        s.note(&format!("delete {}", deleted(&r)), &r.collection_name);
        Ok(())
    });
    let s = Arc::clone(&state);
    api.expect_scroll().returning(move |r| {
        let mut s = s.lock().unwrap();
        s.note("scroll", &r.collection_name);
        // Only the edges of a memory are ever found (the store's other scrolls: nothing).
        let edges = to_meta(&r.collection_name) && r.filter.as_ref().is_some_and(|f| !f.should.is_empty());
        let points = if edges {
            s.of(&r.collection_name).iter().filter(|p| p.payload.contains_key("src")).map(retrieved).collect()
        } else {
            Vec::new()
        };
        Ok(api::ScrollPage { points, next: None })
    });
    api.expect_count().returning(|_| Ok(0));
    (api, state)
}

fn deleted(request: &DeletePoints) -> String {
    format!("{:?}", request.points)
}

#[tokio::test]
async fn an_insert_lands_invisible_is_read_back_then_one_commit_reveals_it() {
    let dir = tempfile::tempdir().unwrap();
    let (api, state) = server(false);
    let store = open(dir.path(), api).await;
    state.lock().unwrap().log.clear();
    let ids = store.insert(vec![turn("Been to Lisbon?", "Bo", 1), turn("Yes, twice", "Ann", 2)], None).await.unwrap();
    assert!(ids[0] < ids[1] && ids[1].0 < 1 << 53, "{ids:?}");
    {
        let s = state.lock().unwrap();
        let calls: Vec<&str> = s.log.iter().map(String::as_str).collect();
        assert_eq!(
            calls[..9],
            [
                "upsert meta",             // the write's record, `writing` (unkeyed: its own id)
                "scroll memories",         // the turn before the first one in its session
                "upsert memories",         // the points, pending, insert-only
                "get memories",            // ... read back: no id another write took
                "upsert meta",             // the temporal edge, pending
                "set_payload meta",        // the commit
                "get meta",                // ... read back: committed by this write
                "delete_payload memories", // revealed
                "delete_payload meta",     // its edge too
            ],
            "{calls:#?}"
        );
        // The session's bookkeeping (created, then raised), then the record goes.
        assert_eq!(calls[9..11], ["upsert meta", "set_payload meta"], "{calls:#?}");
        assert!(calls[11].starts_with("delete Some") && calls.len() == 12, "{calls:#?}");
        // Two more writes, one to the same session: its bookkeeping exists, one raise and no
        // creation; no edges (this mock's scroll finds no earlier turn), nothing to reveal in meta.
    }
    state.lock().unwrap().log.clear();
    store.insert(vec![turn("And you?", "Ann", 3)], None).await.unwrap();
    store
        .insert(vec![NewMemory::episode("no session", Scope::default(), None, Timestamp(4), Timestamp(4))], None)
        .await
        .unwrap();
    let s = state.lock().unwrap();
    let calls: Vec<&str> = s.log.iter().map(String::as_str).collect();
    let count = |call: &str| calls.iter().filter(|c| **c == call).count();
    assert_eq!(count("upsert meta"), 2, "the two records: {calls:#?}");
    assert_eq!(count("set_payload meta"), 3, "two commits, one raise: {calls:#?}");
    assert_eq!(count("delete_payload meta"), 0, "{calls:#?}");
    let points = s.memories();
    let reply = points.iter().find(|p| p.id == Some(PointId::from(ids[1].0 as u64))).unwrap();
    assert_eq!(text_of(reply, "context").as_deref(), Some("Bo: Been to Lisbon?"));
    assert_eq!(text_of(reply, "user").as_deref(), Some("ann"));
    assert!(!reply.payload.contains_key(ledger::field::PENDING), "visible once committed");
    assert!(reply.payload.contains_key(ledger::field::WRITE));
    assert!(reply.payload.contains_key(queue::field::VECTOR_QUEUE), "queued for a vector");
}

#[tokio::test]
async fn a_failed_upsert_removes_what_may_have_landed_and_names_the_collection() {
    let dir = tempfile::tempdir().unwrap();
    let (api, state) = server(true);
    let store = open(dir.path(), api).await;
    state.lock().unwrap().log.clear();
    let err = store.insert(vec![turn("a", "Bo", 1), turn("b", "Ann", 2)], None).await.unwrap_err().to_string();
    assert!(err.contains("unreachable") && err.contains(store.collection()), "{err}");
    let s = state.lock().unwrap();
    assert!(!s.log.iter().any(|c| c == "set_payload meta"), "never committed: {:?}", s.log);
    let deletes: Vec<&String> = s.log.iter().filter(|c| c.starts_with("delete")).collect();
    assert_eq!(deletes.len(), 3, "its points, its edges, its record: {deletes:?}");
    assert!(deletes[0].contains("pending") && deletes[0].ends_with("memories"), "{deletes:?}");
    assert!(deletes[1].contains("pending") && deletes[1].ends_with("meta"), "{deletes:?}");
}

#[tokio::test]
async fn forgetting_a_turn_rewrites_its_reply_without_it_before_deleting_it() {
    let dir = tempfile::tempdir().unwrap();
    let (api, state) = server(false);
    let store = open(dir.path(), api).await;
    let ids = store.insert(vec![turn("Been to Lisbon?", "Bo", 1), turn("Yes, twice", "Ann", 2)], None).await.unwrap();
    state.lock().unwrap().log.clear();
    assert!(store.forget(ids[0]).await.unwrap());
    let s = state.lock().unwrap();
    let upserts: Vec<usize> = (0..s.log.len()).filter(|i| s.log[*i] == "upsert memories").collect();
    let delete = s.log.iter().position(|c| c.starts_with("delete") && c.ends_with("memories")).unwrap();
    assert_eq!(upserts.len(), 1, "{:?}", s.log);
    assert!(upserts[0] < delete, "the reply is rewritten first: {:?}", s.log);
    let reply = s.memories().into_iter().find(|p| p.id == Some(PointId::from(ids[1].0 as u64))).unwrap();
    assert_eq!(text_of(&reply, "context"), None);
    assert_eq!(text_of(&reply, "text").as_deref(), Some("Yes, twice"));
    assert!(reply.payload.contains_key(queue::field::VECTOR_QUEUE), "re-embedded without it");
    assert!(s.log[delete].contains(&format!("Num({})", ids[0].0)), "{:?}", s.log);
}

#[tokio::test]
async fn text_search_finds_candidates_by_the_sparse_vector_and_ranks_them_by_bm25() {
    let dir = tempfile::tempdir().unwrap();
    let mut api = existing_collection();
    let long = "we went to Lisbon and Lisbon again on a long trip of many days";
    let candidate = |id: u64, score: f32, text: &str| ScoredPoint {
        id: Some(PointId::from(id)),
        score,
        payload: qdrant_client::Payload::from(serde_json::json!({"text": text}).as_object().unwrap().clone()).into(),
        ..Default::default()
    };
    let (long_text, short_text) = (long.to_owned(), "Lisbon".to_owned());
    api.expect_query()
        .times(1)
        .withf(|q: &QueryPoints| {
            let filter = format!("{:?}", q.filter);
            q.using.as_deref() == Some(collection::TEXT_VECTOR)
                && q.limit == Some(TEXT_POOL_MIN as u64)
                && filter.contains("\"user\"")
                && filter.contains("Keyword(\"ann\")")
        })
        // Qdrant's order (its own IDF, an assumed average length) puts the long one first.
        .returning(move |_| Ok(vec![candidate(7, 9.0, &long_text), candidate(8, 1.0, &short_text)]));
    // 10 rows; the stem of "lisbon" in 2 of them.
    api.expect_count().returning(|r| Ok(if r.filter.as_ref().is_some_and(|f| !f.must.is_empty()) { 2 } else { 10 }));
    api.expect_scroll().times(1).withf(|r| r.order_by.is_none() && !to_meta(&r.collection_name)).returning(|_| {
        let points = (1..=10u64)
            .map(|id| RetrievedPoint {
                id: Some(PointId::from(id)),
                payload: qdrant_client::Payload::from(serde_json::json!({"text_len": 6}).as_object().unwrap().clone())
                    .into(),
                ..Default::default()
            })
            .collect();
        Ok(api::ScrollPage { points, next: None })
    });
    let store = open(dir.path(), api).await;
    let only_ann = RecallFilter { scope: Scope { user: Some("ann".into()), ..Scope::default() }, ..Default::default() };
    let hits = store.search_text(vec!["lisbon".into()], only_ann, 5).await.unwrap();
    let idf = bm25::idf(10, 2);
    let exact = |text: &str| bm25::score(&bm25::Document::of(text, None, None), &[("lisbon", 1, idf)], 6.0).unwrap();
    assert_eq!(
        hits,
        [ScoredId { id: MemoryId(8), score: exact("Lisbon") }, ScoredId { id: MemoryId(7), score: exact(long) }]
    );
}
