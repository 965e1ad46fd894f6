//! [`RecallFilter`] as a Qdrant filter, so that every condition is pushed down to the server.

use crate::payload::field;
use atlas_domain::{MemoryKind, RecallFilter, Scope};
use qdrant_client::qdrant::r#match::MatchValue;
use qdrant_client::qdrant::{Condition, Filter, Range, RepeatedStrings};

/// Exact keyword equality. (`MatchValue::from(String)` would turn a value with a space into a
/// full-text match: a session named "team sync" must not match "sync team".)
fn keyword(key: &str, value: &str) -> Condition {
    Condition::matches(key, MatchValue::Keyword(value.to_string()))
}

/// Holds for a soft-deleted memory: only those carry `deleted_at` (an indexed integer, so that
/// excluding them costs an index lookup, not a payload scan).
pub fn soft_deleted() -> Condition {
    Condition::range(field::DELETED_AT, Range { gte: Some(i64::MIN as f64), ..Range::default() })
}

/// Holds for a point of a write not yet committed and rolled forward
/// ([`crate::ledger`]): every read excludes those.
pub fn pending() -> Condition {
    Condition::range(crate::schema::ledger_field::PENDING, Range { gte: Some(i64::MIN as f64), ..Range::default() })
}

/// Memories of one kind, deleted or not (for counting).
pub fn of_kind(kind: MemoryKind) -> Filter {
    Filter { must: vec![kind_is(kind)], must_not: vec![pending()], ..Filter::default() }
}

/// Holds for a memory of `kind`.
pub fn kind_is(kind: MemoryKind) -> Condition {
    keyword(field::KIND, kind.as_str())
}

/// The user's and agent's memories: equal where set, absent where not.
pub fn owned_by(scope: &Scope) -> Vec<Condition> {
    [(field::USER, &scope.user), (field::AGENT, &scope.agent)]
        .into_iter()
        .map(|(key, value)| match value {
            Some(v) => keyword(key, v),
            None => Condition::is_empty(key),
        })
        .collect()
}

/// The conditions of `filter`, all of which must hold, and never a soft-deleted memory (only
/// those, when the filter lists what was forgotten), nor one of a write under way.
pub fn to_qdrant(filter: &RecallFilter) -> Filter {
    let mut must: Vec<Condition> = Vec::new();
    for (key, value) in [
        (field::USER, &filter.scope.user),
        (field::AGENT, &filter.scope.agent),
        (field::SESSION, &filter.scope.session),
    ] {
        if let Some(v) = value {
            must.push(keyword(key, v));
        }
    }
    if !filter.kinds.is_empty() {
        let strings = filter.kinds.iter().map(|k| k.as_str().to_string()).collect();
        must.push(Condition::matches(field::KIND, MatchValue::Keywords(RepeatedStrings { strings })));
    }
    if filter.since.is_some() || filter.until.is_some() {
        let range = Range {
            gte: filter.since.map(|t| t.millis() as f64),
            lt: filter.until.map(|t| t.millis() as f64),
            ..Range::default()
        };
        must.push(Condition::range(field::EVENT_TIME, range));
    }
    if let Some(at) = filter.valid_at {
        let at = at.millis() as f64;
        must.push(Condition::range(field::VALID_FROM, Range { lte: Some(at), ..Range::default() }));
        // Open validity is stored as `payload::OPEN_END`, so one range covers it.
        must.push(Condition::range(field::VALID_UNTIL, Range { gt: Some(at), ..Range::default() }));
    }
    if filter.forgotten {
        must.push(soft_deleted());
        return Filter { must, must_not: vec![pending()], ..Filter::default() };
    }
    Filter { must, must_not: vec![soft_deleted(), pending()], ..Filter::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atlas_domain::{Scope, Timestamp};
    use qdrant_client::qdrant::condition::ConditionOneOf;

    fn conditions(f: &Filter) -> Vec<(String, String)> {
        f.must
            .iter()
            .map(|c| match &c.condition_one_of {
                Some(ConditionOneOf::Field(fc)) => {
                    let what = match (&fc.r#match, &fc.range) {
                        (Some(m), _) => format!("{:?}", m.match_value),
                        (_, Some(r)) => format!("gte={:?} gt={:?} lt={:?} lte={:?}", r.gte, r.gt, r.lt, r.lte),
                        _ => "?".into(),
                    };
                    (fc.key.clone(), what)
                }
                other => panic!("unexpected condition {other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_empty_filter_only_excludes_soft_deleted_and_uncommitted_memories() {
        let f = to_qdrant(&RecallFilter::default());
        assert!(f.must.is_empty() && f.should.is_empty());
        assert_eq!(f.must_not, vec![soft_deleted(), pending()]);
        let Some(ConditionOneOf::Field(fc)) = &f.must_not[0].condition_one_of else { panic!("{f:?}") };
        assert_eq!(fc.key, "deleted_at");
    }

    #[test]
    fn every_part_becomes_a_condition() {
        let filter = RecallFilter {
            scope: Scope { user: Some("dana".into()), agent: None, session: Some("team sync".into()) },
            kinds: vec![MemoryKind::Episode, MemoryKind::Fact],
            since: Some(Timestamp(10)),
            until: Some(Timestamp(20)),
            valid_at: Some(Timestamp(15)),
            forgotten: false,
        };
        let got = conditions(&to_qdrant(&filter));
        assert_eq!(
            got,
            vec![
                ("user".into(), r#"Some(Keyword("dana"))"#.into()),
                ("session".into(), r#"Some(Keyword("team sync"))"#.into()),
                ("kind".into(), r#"Some(Keywords(RepeatedStrings { strings: ["episode", "fact"] }))"#.into()),
                ("event_time".into(), "gte=Some(10.0) gt=None lt=Some(20.0) lte=None".into()),
                ("valid_from".into(), "gte=None gt=None lt=None lte=Some(15.0)".into()),
                ("valid_until".into(), "gte=None gt=Some(15.0) lt=None lte=None".into()),
            ]
        );
    }

    #[test]
    fn only_one_bound_of_time_is_sent_when_only_one_is_given() {
        let got = conditions(&to_qdrant(&RecallFilter { until: Some(Timestamp(5)), ..RecallFilter::default() }));
        assert_eq!(got, vec![("event_time".into(), "gte=None gt=None lt=Some(5.0) lte=None".into())]);
    }
}
