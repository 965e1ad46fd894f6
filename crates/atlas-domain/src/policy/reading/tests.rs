//! Unit and property tests of reading a sentence into a relation and a model's statements into keyed facts.

use super::*;
use proptest::prelude::*;

fn reads(text: &str) -> Option<(String, String, String)> {
    read(text, "user").map(|r| (normalize(&r.subject), r.relation.clone(), r.object()))
}

fn triple(s: &str, r: &str, v: &str) -> Option<(String, String, String)> {
    Some((s.into(), r.into(), v.into()))
}

#[test]
fn relations_of_the_table_are_read() {
    assert_eq!(reads("Frank lives in Berlin"), triple("frank", "lives_in", "Berlin"));
    assert_eq!(reads("Frank now lives in Vienna."), triple("frank", "lives_in", "Vienna"));
    assert_eq!(reads("Frank moved to Vienna"), triple("frank", "lives_in", "Vienna"));
    assert_eq!(reads("Frank no longer lives in Berlin"), triple("frank", "lives_in", "not Berlin"));
    assert_eq!(reads("Frank doesn't live in Berlin anymore"), triple("frank", "lives_in", "not Berlin"));
    assert_eq!(reads("I live in Lisbon"), triple("user", "lives_in", "Lisbon"));
    assert_eq!(reads("I'm married to Ann"), triple("user", "married_to", "Ann"));
    assert_eq!(reads("Ann Lee is no longer married to Bo"), triple("ann lee", "married_to", "not Bo"));
    assert_eq!(reads("Priya works at Initech"), triple("priya", "works_at", "Initech"));
    assert_eq!(reads("Priya works as a nurse"), triple("priya", "role", "a nurse"));
    assert_eq!(reads("Frank is 34 years old"), triple("frank", "age", "34"));
    assert_eq!(reads("Frank's age is 35"), triple("frank", "age", "35"));
    assert_eq!(reads("Frank's phone number is 555-0101"), triple("frank", "phone", "555-0101"));
    assert_eq!(reads("My email is me@example.org"), triple("user", "email", "me@example.org"));
    assert_eq!(reads("The Pro plan costs $30 a month"), triple("the pro plan", "price", "$30 a month"));
    assert_eq!(reads("the price of the Pro plan is $25"), triple("the pro plan", "price", "$25"));
    assert_eq!(reads("The billing service runs on Kubernetes"), triple("the billing service", "runs_on", "Kubernetes"));
    assert_eq!(reads("Frank likes jazz"), triple("frank", "likes", "jazz"));
    assert_eq!(reads("Frank has visited Rome"), triple("frank", "visited", "Rome"));
    assert_eq!(reads("Frank's favourite colour is green"), triple("frank", "favorite_colour", "green"));
}

#[test]
fn unknown_relations_are_read_by_their_verb_for_names_only() {
    assert_eq!(reads("Frank drives a Toyota"), triple("frank", "drives", "a Toyota"));
    assert_eq!(reads("Frank plays for the Lions"), triple("frank", "plays", "for the Lions"));
    assert_eq!(reads("the night bus stops at the station"), None);
    assert_eq!(reads("Frank and Ann went to Rome"), None);
}

#[test]
fn what_is_not_one_fact_is_left_alone() {
    for text in [
        "Frank also lives in Vienna",
        "Frank lives in Vienna too",
        "Frank lives in Berlin, and Ann in Rome",
        "Does Frank live in Berlin?",
        "Frank lives in Berlin because of work",
        "Frank lived in Berlin",
        "the cafeteria opens at 8am",
        "visitor parking is free after 6pm",
        "ok",
        "",
    ] {
        assert_eq!(reads(text), None, "{text:?}");
    }
}

#[test]
fn the_one_rule_keys_facts_from_everywhere() {
    let world = key_fact("world", "fact", "Frank lives in Vienna", "user").unwrap();
    assert_eq!(
        (world.subject.as_str(), world.predicate.as_str(), world.object.as_str()),
        ("frank", "lives_in", "Vienna")
    );
    assert_eq!(world.wording.as_deref(), Some("Frank lives in Vienna"));
    let plain = key_fact("world", "fact", "the cafeteria opens at 8am", "user").unwrap();
    assert_eq!((plain.subject.as_str(), plain.predicate.as_str()), ("world", "fact"));
    let model = key_fact("Frank", "Works for", "Acme", "user").unwrap();
    assert_eq!((model.subject.as_str(), model.predicate.as_str()), ("frank", "works_at"));
    let by_words = key_fact("Frank", "relocated to", "Oslo", "user").unwrap();
    assert_eq!((by_words.predicate.as_str(), by_words.object.as_str()), ("lives_in", "Oslo"));
    assert_eq!(key_fact("Frank", "teleported_to", "Mars", "user"), None);
}

#[test]
fn a_models_statement_is_read_a_clause_at_a_time() {
    let keyed = |text: &str| {
        key_statements(text, "Ann").into_iter().map(|k| (k.subject, k.predicate, k.object)).collect::<Vec<_>>()
    };
    let one = |s: &str, r: &str, v: &str| vec![triple(s, r, v).unwrap()];
    assert_eq!(keyed("Ann lives in Rome."), one("ann", "lives_in", "Rome"));
    assert_eq!(keyed("I work as a nurse"), one("ann", "role", "a nurse"));
    assert_eq!(keyed("Leo wants to visit Kyoto"), one("leo", "wants", "visit Kyoto"));
    assert_eq!(keyed("Omar is 41"), one("omar", "age", "41"));
    assert_eq!(keyed("Omar no longer drinks coffee"), one("omar", "fact", "Omar no longer drinks coffee"));
    assert_eq!(keyed("I no longer drink coffee."), one("ann", "fact", "Ann no longer drink coffee"));
    assert_eq!(keyed("Nina's address is Oudegracht 12, for the deliveries"), one("nina", "address", "Oudegracht 12"));
    assert_eq!(
        keyed("Ann's partner is Joao staying in Porto until June"),
        one("ann", "fact", "Ann's partner is Joao staying in Porto until June")
    );
    assert_eq!(
        keyed("Kenji's billing service runs on Kubernetes"),
        one("kenji", "fact", "Kenji's billing service runs on Kubernetes")
    );
    assert_eq!(
        keyed("Omar is 41 and has started running"),
        vec![triple("omar", "age", "41").unwrap(), triple("omar", "has", "started running").unwrap()]
    );
    assert_eq!(
        keyed("Felix works from home on Mondays and Fridays"),
        one("felix", "works_from", "home on Mondays and Fridays"),
        "an and between values keeps the clause whole"
    );
    assert_eq!(keyed("Leo's friend Sara lives in Osaka"), one("sara", "lives_in", "Osaka"));
    assert_eq!(
        keyed("Leo's friend lives in Osaka"),
        one("leo", "fact", "Leo's friend lives in Osaka"),
        "no one named: about the owner"
    );
    for unreal in [
        "Mia might quit her job",
        "Ann will buy a boat if she wins",
        "If I get the job, I'll move to Berlin",
        "Does Ann like jazz?",
        "the weather is nice today",
        "The Pro plan is 30",
        "Ann",
    ] {
        assert_eq!(keyed(unreal), Vec::new(), "{unreal}");
    }
}

#[test]
fn a_revision_in_words_keeps_the_key_it_states() {
    let moved = revised_fact("frank", "lives_in", "Frank lives in Munich");
    assert_eq!((moved.predicate.as_str(), moved.object.as_str()), ("lives_in", "Munich"));
    let plain = revised_fact("frank", "lives_in", "Munich");
    assert_eq!(
        (plain.subject.as_str(), plain.predicate.as_str(), plain.object.as_str()),
        ("frank", "lives_in", "Munich")
    );
    let world = revised_fact("world", "fact", "Frank works at Acme");
    assert_eq!((world.subject.as_str(), world.predicate.as_str()), ("frank", "works_at"));
    let other = revised_fact("frank", "lives_in", "Frank works at Acme");
    assert_eq!((other.predicate.as_str(), other.object.as_str()), ("lives_in", "Frank works at Acme"));
}

proptest! {
    #![proptest_config(atlas_testing::proptest_config(512))]
    #[test]
    fn reading_never_panics_and_keys_are_normalised(text in "\\PC{0,120}", speaker in "[a-z]{1,8}") {
        if let Some(r) = read(&text, &speaker) {
            prop_assert!(!r.value.is_empty());
            prop_assert!(!r.relation.is_empty());
            prop_assert!(r.value.split_whitespace().count() <= MAX_VALUE_WORDS);
        }
        let _ = key_fact("world", "fact", &text, &speaker);
    }

    #[test]
    fn a_name_and_a_table_phrase_read_as_that_relation(
        name in "K[a-z]{2,8}",
        value in "Q[a-z]{2,8}",
        relation in proptest::sample::select(RELATIONS.iter().filter(|r| !r.phrases.is_empty()).collect::<Vec<_>>()),
        which in any::<prop::sample::Index>(),
    ) {
        let phrase = which.get(relation.phrases);
        prop_assume!(!crate::policy::consolidation::proper_names(&format!("x {name}")).is_empty());
        let text = format!("{name} {phrase} {value}");
        let read = read(&text, "user");
        prop_assert!(read.is_some(), "{text:?}");
        let read = read.unwrap();
        // A longer phrase of another relation may open with this one ("has" / "has visited").
        prop_assert_eq!(&read.subject, &name);
        prop_assert!(read.value.ends_with(&value), "{:?}", read);
    }
}
