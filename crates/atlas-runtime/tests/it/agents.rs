//! The agent memories end to end on SQLite: the Experience memory (store once, search by task
//! with what worked first, refine, prune and recover), the Strategy bank (Beta statistics,
//! ranking, writing from trajectories) and the MemorySystem with parts switched off.

use atlas_domain::Scope;
use atlas_runtime::agents::{MemorySystem, Parts as AgentParts, PruneCriteria};
use atlas_runtime::{Atlas, Config, Parts};
use atlas_store_sqlite::{SqliteOptions, SqliteStore};
use atlas_testing::{HashEmbedder, ScriptedLlm};
use std::path::Path;
use std::sync::Arc;

async fn space(dir: &Path, llm: Option<Arc<ScriptedLlm>>) -> Atlas {
    let db = dir.join("atlas.db");
    let store = Arc::new(SqliteStore::open(&db, &SqliteOptions::default()).unwrap());
    let embedder: Arc<dyn atlas_domain::ports::Embedder> = Arc::new(HashEmbedder::new(64));
    let mut parts = Parts::from_store(Arc::clone(&store), Some(embedder)).with_consolidator(store);
    if let Some(llm) = llm {
        parts = parts.with_llm(llm);
    }
    let atlas = Atlas::from_parts(parts, Config { db, ..Config::default() }).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    atlas
}

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/agents/trajectories.jsonl")
}

#[tokio::test]
async fn experiences_are_stored_once_and_found_with_what_worked_first() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path(), None).await;
    let stored = atlas.store_experience_file(&fixture(), Scope::default()).await.unwrap();
    assert_eq!(stored.len(), 8);
    assert!(stored.iter().all(|s| !s.replayed));
    let again = atlas.store_experience_file(&fixture(), Scope::default()).await.unwrap();
    assert!(again.iter().all(|s| s.replayed), "a trajectory is stored once");
    assert_eq!(atlas.stats().await.unwrap().store.memories(), 8);
    atlas.flush_vectors(None).await.unwrap();

    let hits = atlas.search_experiences("fill the enclosed region with red", 4, Scope::default()).await.unwrap();
    let ids: Vec<&str> = hits.iter().filter_map(|h| h.id.as_deref()).collect();
    assert_eq!(&ids[..2], ["t04", "t03"], "the success first, then the failure that teaches: {hits:?}");
    assert!(hits[1].feedback.as_deref().unwrap().contains("leaked"));
    assert!(!hits[1].success);
    assert!(hits.len() <= 4);
}

#[tokio::test]
async fn refine_folds_near_duplicates_and_prune_is_reversible() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path(), None).await;
    atlas.store_experience_file(&fixture(), Scope::default()).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let refined = atlas.refine_experiences(Scope::default()).await.unwrap();
    assert_eq!(refined.merged, 1, "t06 repeats t01: {refined:?}");
    assert_eq!(refined.demoted, 1, "t05 failed with no lesson");
    let clustered: Vec<&Vec<String>> = refined.clusters.iter().filter(|c| c.len() > 1).collect();
    assert!(clustered.iter().any(|c| c.contains(&"t03".to_owned()) && c.contains(&"t04".to_owned())), "{refined:?}");
    let mirror = atlas.search_experiences("mirror the grid left to right", 4, Scope::default()).await.unwrap();
    assert_eq!(mirror.iter().filter(|h| h.task.starts_with("Mirror")).count(), 1, "one experience left: {mirror:?}");
    let kept = atlas.get(mirror[0].memory_id).await.unwrap().unwrap().memory;
    assert!(
        matches!(kept.body, atlas_domain::Body::Experience { ref merged, .. } if merged == &vec!["t06".to_owned()])
    );

    let pruned = atlas
        .prune_experiences(PruneCriteria { failures_only: true, ..PruneCriteria::default() }, Scope::default())
        .await
        .unwrap();
    assert_eq!(pruned, 2, "the two failures");
    let fills = atlas.search_experiences("fill the enclosed region", 4, Scope::default()).await.unwrap();
    assert!(fills.iter().all(|h| h.success), "{fills:?}");
    let failed = atlas.get(atlas_domain::MemoryId(3)).await.unwrap().unwrap().memory;
    assert!(failed.lifecycle.deleted_at.is_some());
    atlas.recover(failed.id).await.unwrap();
    let fills = atlas.search_experiences("fill the enclosed region", 4, Scope::default()).await.unwrap();
    assert!(fills.iter().any(|h| !h.success), "recovered: found again");
}

#[tokio::test]
async fn strategies_rank_by_relevance_and_success_and_learn_from_trajectories() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path(), None).await;
    let reflect =
        atlas.add_strategy("symmetric grid puzzles", "reflect then duplicate", Scope::default()).await.unwrap();
    let guess = atlas.add_strategy("symmetric grid puzzles", "guess the colors", Scope::default()).await.unwrap();
    atlas.add_strategy("counting cells", "count by color", Scope::default()).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let before = atlas.read_strategies("a symmetric grid puzzle", 5, Scope::default(), false).await.unwrap();
    assert!(before.iter().all(|s| s.success_rate == 0.5 && s.usage_count == 0));
    for ok in [true, true, true] {
        atlas.update_strategy(reflect, ok).await.unwrap();
    }
    let s = atlas.update_strategy(guess, false).await.unwrap();
    assert_eq!((s.usage_count, s.success_rate), (1, 1.0 / 3.0));
    let after = atlas.read_strategies("a symmetric grid puzzle", 2, Scope::default(), false).await.unwrap();
    assert_eq!(after[0].id, reflect, "{after:?}");
    assert_eq!((after[0].usage_count, after[0].success_rate), (3, 0.8));
    assert_eq!(after.len(), 2);
    // Exploration favours the strategy tried least.
    let explore = atlas.read_strategies("a symmetric grid puzzle", 2, Scope::default(), true).await.unwrap();
    assert!(explore.iter().any(|s| s.id == guess));

    // Writing from trajectories: a new situation adds, a near-duplicate updates.
    let t = |id: &str, task: &str, success: bool| atlas_domain::Trajectory {
        id: id.into(),
        task: task.into(),
        steps: vec!["g = load(input)".into(), "out = recolor(g, green, yellow)".into()],
        output: String::new(),
        feedback: None,
        success,
        time: atlas_domain::Timestamp(0),
        tags: Vec::new(),
    };
    let first = atlas.write_strategy(&t("a", "recolor green cells to yellow", true), Scope::default()).await.unwrap();
    let first = first.unwrap();
    assert!(!first.updated);
    atlas.flush_vectors(None).await.unwrap();
    let second = atlas.write_strategy(&t("b", "recolor the green cells to yellow", false), Scope::default()).await;
    let second = second.unwrap().unwrap();
    assert!(second.updated && second.strategy.id == first.strategy.id, "{second:?}");
    assert_eq!((second.strategy.usage_count, second.strategy.success_rate), (2, 0.5));
}

#[tokio::test]
async fn the_model_abstracts_strategies_and_the_memory_system_labels_its_parts() {
    let dir = tempfile::tempdir().unwrap();
    let llm = Arc::new(ScriptedLlm::new(vec![Ok(
        r#"{"situation": "a region enclosed by a border must be filled", "suggestion": "flood fill from a point inside the region"}"#.into(),
    )]));
    let atlas = space(dir.path(), Some(llm.clone())).await;
    let trajectories =
        atlas_runtime::parse_trajectories(&std::fs::read(fixture()).unwrap(), "fixture", atlas_runtime::now()).unwrap();
    let system = MemorySystem {
        atlas: &atlas,
        parts: AgentParts { experiences: true, strategies: true, concepts: false },
        scope: Scope::default(),
    };
    let stored = system.store(&trajectories[3]).await.unwrap();
    assert!(stored.experience.is_some());
    let strategy = stored.strategy.unwrap().strategy;
    assert_eq!(strategy.suggestion, "flood fill from a point inside the region");
    assert_eq!(llm.requests().len(), 1);
    atlas.flush_vectors(None).await.unwrap();
    let answer = system.query("fill an enclosed region", 3).await.unwrap();
    assert_eq!(answer.experiences.unwrap()[0].id.as_deref(), Some("t04"));
    assert_eq!(answer.strategies.unwrap()[0].id, strategy.id);
    let only_strategies =
        MemorySystem { parts: AgentParts { experiences: false, strategies: true, concepts: false }, ..system };
    let answer = only_strategies.query("fill an enclosed region", 3).await.unwrap();
    assert!(answer.experiences.is_none() && answer.strategies.is_some(), "a part that is off answers nothing");
}

#[tokio::test]
async fn the_concept_library_learns_composes_and_counts_uses() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path(), None).await;
    let trajectories =
        atlas_runtime::parse_trajectories(&std::fs::read(fixture()).unwrap(), "fixture", atlas_runtime::now()).unwrap();
    let learned = atlas.compress_trajectories(&trajectories, 3, Scope::default()).await.unwrap();
    assert!(!learned.is_empty());
    for c in &learned {
        assert!(c.occurrences >= 2, "{c:?}");
        assert_eq!(c.source, atlas_domain::ConceptSource::Learned);
        assert!(!c.examples.is_empty() && !c.description.is_empty());
    }
    assert_eq!(learned[0].code, "g = load(input)", "what every trajectory does saves the most");
    let mirror = learned.iter().find(|c| c.name == "flip_horizontal_then_hstack").expect("the recurring mirror");
    assert_eq!(mirror.code, "m = flip_horizontal(g)\nout = hstack(g, m)");
    assert!(learned.iter().all(|c| !c.code.contains("(0, 0)")), "nothing learned from the failed attempt");
    atlas.flush_vectors(None).await.unwrap();
    let again = atlas.compress_trajectories(&trajectories, 3, Scope::default()).await.unwrap();
    assert_eq!(
        again.iter().map(|c| c.id).collect::<Vec<_>>(),
        learned.iter().map(|c| c.id).collect::<Vec<_>>(),
        "learned once"
    );

    let flip = atlas
        .add_concept(
            "mirror",
            "m = flip_horizontal(grid)\nout = hstack(grid, m)",
            "mirror a grid",
            vec!["grid".into()],
            Scope::default(),
        )
        .await
        .unwrap();
    let fill = atlas
        .add_concept(
            "fill_inside",
            "out = flood_fill(grid, interior_point(grid), color)",
            "fill a region",
            vec!["grid".into(), "color".into()],
            Scope::default(),
        )
        .await
        .unwrap();
    let both = atlas.compose_concepts(&[flip.id, fill.id], Scope::default()).await.unwrap();
    assert_eq!(both.params, ["grid", "grid_2", "color"]);
    assert_eq!(
        both.code,
        "m = flip_horizontal(grid)\nout = hstack(grid, m)\nout = flood_fill(grid_2, interior_point(grid_2), color)"
    );
    assert_eq!(both.composed_of, vec![flip.id, fill.id]);
    assert_eq!(both.source, atlas_domain::ConceptSource::Composed);
    assert_eq!(atlas.get_concept(both.id).await.unwrap().unwrap().name, "mirror_then_fill_inside");
    atlas.flush_vectors(None).await.unwrap();
    let found = atlas.search_concepts("mirror a grid", 3, Scope::default()).await.unwrap();
    assert_eq!(found[0].id, flip.id, "{found:?}");

    // A trajectory that calls a concept counts as a use of it, with its outcome.
    let mut t = trajectories[0].clone();
    t.steps = vec!["g = load(input)".into(), "out = mirror(g)".into()];
    let used = atlas.record_concepts_called(&t, Scope::default()).await.unwrap();
    assert_eq!(used.iter().map(|c| (c.id, c.usage_count)).collect::<Vec<_>>(), vec![(flip.id, 1)]);
    assert_eq!(used[0].success_rate, 2.0 / 3.0);
}

#[tokio::test]
async fn the_context_holds_every_section_in_order_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path(), None).await;
    atlas.store_experience_file(&fixture(), Scope::default()).await.unwrap();
    atlas
        .add_strategy("enclosed regions to fill", "flood fill from an interior point", Scope::default())
        .await
        .unwrap();
    let session = Scope { session: Some("now".into()), ..Scope::default() };
    for (i, text) in [
        "Let's do the fill puzzle next.",
        "It has a blue border.",
        "The region is enclosed.",
        "Ready when you are.",
        "Go.",
        "First look at the grid.",
    ]
    .iter()
    .enumerate()
    {
        atlas
            .remember(atlas_runtime::Remember {
                text: (*text).into(),
                speaker: Some("Ann".into()),
                scope: session.clone(),
                time: Some(atlas_domain::Timestamp(1_000 + i as i64)),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    atlas.flush_vectors(None).await.unwrap();
    let context = atlas.context("fill the enclosed region", 8000, session.clone()).await.unwrap();
    let names: Vec<&str> = context.sections.iter().map(|s| s.name).collect();
    assert_eq!(names, ["persona", "core", "goal", "retrieved", "history"]);
    assert!(context.tokens <= 8000);
    let section = |name: &str| context.sections.iter().find(|s| s.name == name).unwrap();
    assert_eq!(section("goal").items, ["Task: fill the enclosed region"]);
    let retrieved = section("retrieved").items.join("\n");
    assert!(
        retrieved.contains("flood fill from an interior point")
            && retrieved.contains("Experience: Fill the enclosed region"),
        "{retrieved}"
    );
    let history = &section("history").items;
    assert_eq!(history.len(), 5, "the last five turns, raw");
    assert_eq!(history.last().unwrap(), "Ann: First look at the grid.", "newest last");
    assert!(!retrieved.contains("Ann: First look at the grid."), "the history's turns are not retrieved twice");
    let text = context.text();
    assert!(text.find("## goal").unwrap() < text.find("## retrieved").unwrap());
    assert!(text.find("## retrieved").unwrap() < text.find("## history").unwrap());

    // A tight budget keeps the newest turn and the order, and never exceeds any section.
    let tight = atlas.context("fill the enclosed region", 300, session).await.unwrap();
    assert!(tight.tokens <= 300);
    for s in &tight.sections {
        assert!(s.tokens <= s.budget, "{s:?}");
    }
    let history = &tight.sections[4].items;
    assert_eq!(history.last().map(String::as_str), Some("Ann: First look at the grid."), "{history:?}");
}

/// Relevance ranks experiences first: the same task, failed without a lesson, comes before a
/// different task that succeeded (issue 27: once the success on another task came first, its
/// relevance normalised to the best and the failure's weight multiplying its own).
#[tokio::test]
async fn the_same_task_failed_comes_before_another_task_succeeded() {
    let dir = tempfile::tempdir().unwrap();
    let atlas = space(dir.path(), None).await;
    let lines = [
        r#"{"id": "a", "task": "Count the blue cells in each row of the grid", "steps": ["count"], "success": true, "feedback": "correct"}"#,
        r#"{"id": "b", "task": "Sort the rows of the grid by their sum", "steps": ["sorted(rows)"], "success": false, "feedback": "no"}"#,
        r#"{"id": "c", "task": "Rotate the picture a quarter turn", "steps": ["rotate"], "success": true}"#,
    ];
    let trajectories =
        atlas_runtime::parse_trajectories(lines.join("\n").as_bytes(), "test", atlas_runtime::now()).unwrap();
    atlas.store_experiences(trajectories, Scope::default()).await.unwrap();
    atlas.flush_vectors(None).await.unwrap();
    let hits = atlas.search_experiences("Sort the rows of the grid by their sum", 3, Scope::default()).await.unwrap();
    assert_eq!(hits[0].id.as_deref(), Some("b"), "the same task first, failed: {hits:?}");
    assert!(!hits[0].success);
    assert!(hits.windows(2).all(|w| w[0].score + 0.05 >= w[1].score), "relevance first: {hits:?}");
}
