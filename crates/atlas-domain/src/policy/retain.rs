//! Retain tags (seed 003): structured lines an agent writes as it talks, harvested by pattern
//! with no model call. `- W: fact` (world fact, never decays), `- B: did X` (what was done),
//! `- O(c=0.90): opinion` (with its confidence), `- S:entity: state` (an entity's current
//! state: a later state of the same entity supersedes the earlier one), `- U-Preference:
//! pattern` (an observation about the user).
//!
//! A line that does not match exactly is not a tag: no false positives, and never a panic.

/// One harvested tag.
#[derive(Debug, Clone, PartialEq)]
pub enum RetainTag {
    World(String),
    Behavior(String),
    Opinion { confidence: f32, text: String },
    State { entity: String, state: String },
    User { aspect: String, text: String },
}

/// Every tag in `text`, in order. Lines may be indented; the dash and the space after the
/// tag's colon are required, as in the seed's patterns.
pub fn harvest(text: &str) -> Vec<RetainTag> {
    text.lines().filter_map(|line| parse_line(line.trim_start())).collect()
}

fn parse_line(line: &str) -> Option<RetainTag> {
    let rest = line.strip_prefix("- ")?;
    let body = |s: &str| Some(s.trim()).filter(|t| !t.is_empty()).map(str::to_owned);
    if let Some(text) = rest.strip_prefix("W: ") {
        return body(text).map(RetainTag::World);
    }
    if let Some(text) = rest.strip_prefix("B: ") {
        return body(text).map(RetainTag::Behavior);
    }
    if let Some(after) = rest.strip_prefix("O(c=") {
        let (number, text) = after.split_once("): ")?;
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return None;
        }
        let confidence: f32 = number.parse().ok()?;
        if !(0.0..=1.0).contains(&confidence) {
            return None;
        }
        return body(text).map(|text| RetainTag::Opinion { confidence, text });
    }
    if let Some(after) = rest.strip_prefix("S:") {
        let (entity, state) = after.split_once(": ")?;
        let entity = entity.trim();
        if entity.is_empty() || entity.contains(':') {
            return None;
        }
        return body(state).map(|state| RetainTag::State { entity: entity.to_owned(), state });
    }
    if let Some(after) = rest.strip_prefix("U-") {
        let (aspect, text) = after.split_once(": ")?;
        if aspect.is_empty() || !aspect.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        return body(text).map(|text| RetainTag::User { aspect: aspect.to_owned(), text });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_five_tags_of_the_seed() {
        let text = "Noted.\n- W: Mac Mini M4 32GB RAM confirmed\n- B: Reflect v0.5 pipeline build complete\n\
                    - O(c=0.90): inverted structure wins on cost\n  - S:openclaw-rebuild: Phase C complete\n\
                    - U-Preference: reject features without verification\n";
        assert_eq!(
            harvest(text),
            vec![
                RetainTag::World("Mac Mini M4 32GB RAM confirmed".into()),
                RetainTag::Behavior("Reflect v0.5 pipeline build complete".into()),
                RetainTag::Opinion { confidence: 0.9, text: "inverted structure wins on cost".into() },
                RetainTag::State { entity: "openclaw-rebuild".into(), state: "Phase C complete".into() },
                RetainTag::User { aspect: "Preference".into(), text: "reject features without verification".into() },
            ]
        );
    }

    #[test]
    fn near_misses_are_not_tags() {
        for line in [
            "W: no dash",
            "- W:no space",
            "- O(c=high): words",
            "- O(c=1.5): too sure",
            "- O(c=): empty",
            "- S:: no entity",
            "- S:a:b: nested",
            "- U-: no aspect",
            "- X: unknown",
            "- W:    ",
            "-W: tight",
        ] {
            assert!(harvest(line).is_empty(), "{line:?} read as {:?}", harvest(line));
        }
    }

    proptest! {
        #![proptest_config(atlas_testing::proptest_config(256))]
        #[test]
        fn never_panics_and_every_tag_has_text(text in "(\\PC|\n){0,300}") {
            for tag in harvest(&text) {
                let words = match tag {
                    RetainTag::World(t) | RetainTag::Behavior(t) => t,
                    RetainTag::Opinion { confidence, text } => {
                        prop_assert!((0.0..=1.0).contains(&confidence));
                        text
                    }
                    RetainTag::State { entity, state } => {
                        prop_assert!(!entity.is_empty());
                        state
                    }
                    RetainTag::User { aspect, text } => {
                        prop_assert!(!aspect.is_empty());
                        text
                    }
                };
                prop_assert!(!words.trim().is_empty());
            }
        }

        #[test]
        fn a_written_tag_is_read_back(entity in "[a-z][a-z0-9-]{0,12}", state in "[A-Za-z][A-Za-z0-9 ]{0,30}[A-Za-z0-9]", c in 0u32..=100) {
            let confidence = c as f32 / 100.0;
            let text = format!("- S:{entity}: {state}\n- O(c={confidence}): {state}\n");
            prop_assert_eq!(
                harvest(&text),
                vec![
                    RetainTag::State { entity: entity.clone(), state: state.clone() },
                    RetainTag::Opinion { confidence, text: state.clone() },
                ]
            );
        }
    }
}
