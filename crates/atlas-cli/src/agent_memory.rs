//! The `experience`, `strategy` and `concept` commands: the agent memories, translated into runtime calls
//! and printed (human lines, or the JSON shapes scripts read).

use crate::args::{ConceptAction, ExperienceAction, StrategyAction};
use crate::output::print_line;
use crate::parse_scope;
use anyhow::Result;
use atlas_runtime::Atlas;
use atlas_runtime::agents::{PruneCriteria, StrategyHit};
use atlas_runtime::concepts::ConceptHit;
use atlas_runtime::wire::{experience_value, strategy_value};
use serde_json::json;

fn strategy_line(s: &StrategyHit) -> String {
    format!(
        "strategy {} ({:.0}% of {} uses): {} → {}",
        s.id,
        s.success_rate * 100.0,
        s.usage_count,
        s.situation.replace('\n', " "),
        s.suggestion.replace('\n', " ")
    )
}

pub async fn experience(atlas: &Atlas, action: ExperienceAction, json: bool) -> Result<()> {
    match action {
        ExperienceAction::Store { file, scope } => {
            let stored = atlas.store_experience_file(&file, parse_scope(&scope)?).await?;
            let new = stored.iter().filter(|s| !s.replayed).count();
            let value = json!({"stored": new, "replayed": stored.len() - new, "experiences": stored});
            print_line(json, value, || {
                format!("stored {new} experiences from {} ({} were already stored)", file.display(), stored.len() - new)
            });
        }
        ExperienceAction::Search { task, k, scope } => {
            let hits = atlas.search_experiences(&task, k, parse_scope(&scope)?).await?;
            if json {
                println!("{}", json!({"task": task, "hits": hits.iter().map(experience_value).collect::<Vec<_>>()}));
            } else if hits.is_empty() {
                println!("no experience of a task like this");
            } else {
                for (i, h) in hits.iter().enumerate() {
                    let verdict = if h.success { "succeeded" } else { "failed" };
                    let id = h.id.as_deref().unwrap_or("?");
                    println!("{:>3}. [{:.3}] {id} {verdict}: {}", i + 1, h.score, h.task.replace('\n', " "));
                    if let Some(f) = &h.feedback {
                        println!("       feedback: {f}");
                    }
                }
            }
        }
        ExperienceAction::Refine { scope } => {
            let r = atlas.refine_experiences(parse_scope(&scope)?).await?;
            print_line(json, serde_json::to_value(&r)?, || {
                format!(
                    "refined: {} near-duplicates folded, {} failures without a lesson, {} clusters",
                    r.merged,
                    r.demoted,
                    r.clusters.len()
                )
            });
        }
        ExperienceAction::Prune { older_than, failures, unused, scope } => {
            let criteria = PruneCriteria { older_than_days: older_than, failures_only: failures, unused_only: unused };
            let n = atlas.prune_experiences(criteria, parse_scope(&scope)?).await?;
            print_line(json, json!({"pruned": n}), || {
                format!("pruned {n} experiences (soft: `atlas recover ID` brings one back)")
            });
        }
    }
    Ok(())
}

pub async fn strategy(atlas: &Atlas, action: StrategyAction, json: bool) -> Result<()> {
    match action {
        StrategyAction::Add { situation, suggestion, scope } => {
            let id = atlas.add_strategy(&situation, &suggestion, parse_scope(&scope)?).await?;
            print_line(json, json!({"id": id.0}), || format!("added strategy {id}"));
        }
        StrategyAction::Update { id, success } => {
            let s = atlas.update_strategy(id, success).await?;
            print_line(json, strategy_value(&s), || strategy_line(&s));
        }
        StrategyAction::Read { task, k, explore, scope } => {
            let hits = atlas.read_strategies(&task, k, parse_scope(&scope)?, explore).await?;
            if json {
                println!("{}", json!({"task": task, "hits": hits.iter().map(strategy_value).collect::<Vec<_>>()}));
            } else if hits.is_empty() {
                println!("no strategy for a task like this");
            } else {
                for (i, s) in hits.iter().enumerate() {
                    println!("{:>3}. [{:.3}] {}", i + 1, s.score, strategy_line(s));
                }
            }
        }
        StrategyAction::Write { file, scope } => {
            let scope = parse_scope(&scope)?;
            let shown = file.display().to_string();
            let bytes = std::fs::read(&file).map_err(|e| anyhow::anyhow!("{shown}: cannot read: {e}"))?;
            let trajectories = atlas_runtime::parse_trajectories(&bytes, &shown, atlas_runtime::now())?;
            let mut written = Vec::new();
            for t in &trajectories {
                if let Some(w) = atlas.write_strategy(t, scope.clone()).await? {
                    written.push(
                        json!({"trajectory": t.id, "updated": w.updated, "strategy": strategy_value(&w.strategy)}),
                    );
                }
            }
            let updated = written.iter().filter(|w| w["updated"] == true).count();
            let value = json!({"added": written.len() - updated, "updated": updated, "strategies": written});
            print_line(json, value, || {
                format!("{} strategies added, {updated} updated from {shown}", written.len() - updated)
            });
        }
    }
    Ok(())
}

fn concept_line(c: &ConceptHit) -> String {
    let mut line = format!("concept {} {}({})", c.id, c.name, c.params.join(", "));
    if c.occurrences > 0 {
        line.push_str(&format!(" [learned from {} trajectories]", c.occurrences));
    }
    if c.usage_count > 0 {
        line.push_str(&format!(" [{:.0}% of {} uses]", c.success_rate * 100.0, c.usage_count));
    }
    if !c.description.is_empty() {
        line.push_str(&format!(": {}", c.description));
    }
    for code in c.code.lines() {
        line.push_str(&format!("\n    {code}"));
    }
    line
}

pub async fn concept(atlas: &Atlas, action: ConceptAction, json: bool) -> Result<()> {
    let many = |hits: &[ConceptHit]| {
        if json {
            println!("{}", json!({"concepts": hits}));
        } else if hits.is_empty() {
            println!("no concept");
        } else {
            hits.iter().for_each(|c| println!("{}", concept_line(c)));
        }
    };
    let one =
        |c: &ConceptHit| print_line(json, serde_json::to_value(c).expect("a concept serialises"), || concept_line(c));
    match action {
        ConceptAction::Compress { file, max, scope } => {
            let shown = file.display().to_string();
            let bytes = std::fs::read(&file).map_err(|e| anyhow::anyhow!("{shown}: cannot read: {e}"))?;
            let trajectories = atlas_runtime::parse_trajectories(&bytes, &shown, atlas_runtime::now())?;
            many(&atlas.compress_trajectories(&trajectories, max, parse_scope(&scope)?).await?);
        }
        ConceptAction::Add { name, code, description, params, scope } => {
            one(&atlas.add_concept(&name, &code, &description, params, parse_scope(&scope)?).await?);
        }
        ConceptAction::Search { query, k, scope } => {
            many(&atlas.search_concepts(&query, k, parse_scope(&scope)?).await?)
        }
        ConceptAction::Get { id } => {
            one(&atlas.get_concept(id).await?.ok_or(atlas_domain::AtlasError::NotFound(id))?)
        }
        ConceptAction::Compose { ids, scope } => one(&atlas.compose_concepts(&ids, parse_scope(&scope)?).await?),
        ConceptAction::Update { id, success } => one(&atlas.record_concept_use(id, success).await?),
    }
    Ok(())
}
