//! What recall reads in a question (`policy::question`, `policy::preferences`): the numbers it
//! names, whether it asks about the requester, and whether it asks for advice that a stated
//! preference governs, each on and off over the same memories.

use atlas_domain::policy::fusion::Signal;
use atlas_domain::{Scope, Timestamp};
use atlas_runtime::config::RecallConfig;
use atlas_runtime::{Atlas, Config, Hit, Parts, RecallRequest, Remember};
use atlas_testing::FakeStore;
use std::sync::Arc;

/// A space of `turns` (speaker, text), a minute apart and a session each (no context spreads
/// between them), recalled with `recall`'s settings for the best 3.
async fn recall(turns: &[(&str, &str)], question: &str, recall: RecallConfig) -> Vec<Hit> {
    recall_k(turns, question, recall, 3).await
}

async fn recall_k(turns: &[(&str, &str)], question: &str, recall: RecallConfig, k: usize) -> Vec<Hit> {
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
    atlas.recall(RecallRequest { query: question.into(), k, ..RecallRequest::default() }).await.unwrap().hits
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

/// A request for advice shares few words with the message where the user said how they like
/// things done: that message ranks below the memories about the topic, and recall lifts it to
/// place 3 (policy::preferences), scored between its neighbours and explained. Not the
/// assistant's own "I'd rather…", not for a question about what was said, not when k leaves no
/// room for it, and not with the setting off.
#[tokio::test]
async fn the_stated_preference_that_fits_a_request_for_advice_comes_third() {
    let preference = "I prefer short interview panels of two people, a written rubric and feedback within a day";
    // Said first, so that recency does not favour it either.
    let turns = [
        ("user", preference),
        ("user", "The final stages of the interview process are the panel and the offer call"),
        ("user", "Our interview process: the final stages follow the take-home"),
        ("user", "The process for final stages changed; the interview has a structure now"),
        ("user", "Final interview stages take a week in our process"),
        ("assistant", "I'd rather structure the final interview stages around the panel first"),
        ("user", "The interview process for the team lead has final stages of its own"),
        ("user", "We structure the interview process in four stages"),
        ("user", "Stages of the process: screening, take-home, onsite, final"),
    ];
    let asked = "How should I structure the final stages of the interview process?";
    let off = RecallConfig { standing_preferences: false, ..RecallConfig::default() };
    let plain = recall_k(&turns, asked, off.clone(), 5).await;
    assert!(!texts(&plain).contains(&preference), "by its words alone it ranks lower: {:?}", texts(&plain));
    let hits = recall_k(&turns, asked, RecallConfig::default(), 5).await;
    assert_eq!(texts(&hits)[2], preference, "{:?}", texts(&hits));
    assert_eq!(texts(&hits)[..2], texts(&plain)[..2], "the best answers keep their places");
    let lifted = hits[2].signals[&Signal::Preference];
    assert!(lifted.contribution > 0.0, "{lifted:?}");
    let explained: f64 = hits[2].signals.values().map(|s| s.contribution).sum();
    assert!((explained - hits[2].score).abs() < 1e-9, "the explanation adds up to the score");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "hits stay in score order");
    assert_eq!(hits.iter().filter(|h| h.signals.contains_key(&Signal::Preference)).count(), 1);
    // A question about what was said is answered by that past; three memories leave no room
    // beside the best answers.
    for (question, k) in [("What did I say about the final stages of the interview process?", 5), (asked, 3)] {
        let (on, unlifted) = (
            recall_k(&turns, question, RecallConfig::default(), k).await,
            recall_k(&turns, question, off.clone(), k).await,
        );
        assert_eq!(texts(&on), texts(&unlifted), "{question:?} k={k}");
        assert!(on.iter().all(|h| !h.signals.contains_key(&Signal::Preference)), "{question:?} k={k}");
    }
    // Without the user's own statement, the assistant's "I'd rather" is not lifted.
    let without: Vec<_> = turns.iter().copied().filter(|(_, t)| *t != preference).collect();
    let hits = recall_k(&without, asked, RecallConfig::default(), 5).await;
    assert!(hits.iter().all(|h| !h.signals.contains_key(&Signal::Preference)), "{:?}", texts(&hits));
}
