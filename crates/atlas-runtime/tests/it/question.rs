//! What recall reads in a question (`policy::question`): the numbers it names, and whether it
//! asks about the requester, each on and off over the same memories.

use atlas_domain::policy::fusion::Signal;
use atlas_domain::{Scope, Timestamp};
use atlas_runtime::config::RecallConfig;
use atlas_runtime::{Atlas, Config, Hit, Parts, RecallRequest, Remember};
use atlas_testing::FakeStore;
use std::sync::Arc;

/// A space of `turns` (speaker, text), a minute apart and a session each (no context spreads
/// between them), recalled with `recall`'s settings.
async fn recall(turns: &[(&str, &str)], question: &str, recall: RecallConfig) -> Vec<Hit> {
    let atlas =
        Atlas::from_parts(Parts::from_store(Arc::new(FakeStore::new()), None), Config { recall, ..Config::default() })
            .await
            .unwrap();
    let start = atlas_runtime::now().0 - 3_600_000;
    for (minute, (speaker, text)) in (0..).zip(turns) {
        let said = Remember {
            text: (*text).into(),
            speaker: Some((*speaker).into()),
            scope: Scope { session: Some(format!("s{minute}")), ..Scope::default() },
            time: Some(Timestamp(start + minute * 60_000)),
            ..Remember::default()
        };
        atlas.remember(said).await.unwrap();
    }
    atlas.recall(RecallRequest { query: question.into(), k: 3, ..RecallRequest::default() }).await.unwrap().hits
}

fn texts(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.memory.text.as_str()).collect()
}

#[tokio::test]
async fn the_memory_holding_the_numbers_asked_about_comes_first() {
    let turns = [
        ("user", "How much I study each week to get my quiz score up: my quiz score is 95% this week"),
        ("user", "Quiz day, 88%"),
        ("user", "I study each week; my quiz score this week was 93%"),
    ];
    let asked = "How much did I study this week to get my quiz score to 93%?";
    let plain = recall(&turns, asked, RecallConfig { number_weight: 0.0, ..RecallConfig::default() }).await;
    assert_ne!(plain[0].memory.text, turns[2].1, "by words alone another ranks first: {:?}", texts(&plain));
    let hits = recall(&turns, asked, RecallConfig::default()).await;
    assert_eq!(hits[0].memory.text, turns[2].1, "{:?}", texts(&hits));
    let numbers = hits[0].signals[&Signal::Numbers];
    assert_eq!((numbers.raw, numbers.contribution), (1.0, 0.5));
    assert!(hits[1..].iter().all(|h| !h.signals.contains_key(&Signal::Numbers)), "neither holds 93: {hits:#?}");
    let explained: f64 = hits[0].signals.values().map(|s| s.contribution).sum();
    assert!((explained - hits[0].score).abs() < 1e-9, "the explanation adds up to the score");
}

#[tokio::test]
async fn a_question_about_the_requester_is_answered_by_what_they_said() {
    let turns = [
        ("user", "I finish my marathon training plan in March"),
        ("user", "A plan for dinner"),
        ("assistant", "To finish a marathon training plan is hard: a marathon training plan you finish is a feat"),
    ];
    let off = RecallConfig { agent_turn_weight: 1.0, ..RecallConfig::default() };
    let about_me = "When did I finish my marathon training plan?";
    let plain = recall(&turns, about_me, off.clone()).await;
    assert_eq!(plain[0].memory.text, turns[2].1, "the reply repeats the words more often: {:?}", texts(&plain));
    let hits = recall(&turns, about_me, RecallConfig::default()).await;
    assert_eq!(texts(&hits)[..2], [turns[0].1, turns[2].1]);
    let speaker = hits[1].signals[&Signal::Speaker];
    let explained: f64 = hits[1].signals.values().map(|s| s.contribution).sum();
    assert!((explained - hits[1].score).abs() < 1e-9, "the explanation adds up to the score");
    assert!(speaker.contribution < 0.0, "{speaker:?}");
    assert!(!hits[0].signals.contains_key(&Signal::Speaker));
    // Addressing the agent asks for its side too: nothing changes.
    let to_agent = "What did you tell me about my marathon training plan?";
    let (asked, unasked) =
        (recall(&turns, to_agent, RecallConfig::default()).await, recall(&turns, to_agent, off).await);
    assert_eq!(texts(&asked), texts(&unasked));
    assert!(asked.iter().all(|h| !h.signals.contains_key(&Signal::Speaker)));
}
