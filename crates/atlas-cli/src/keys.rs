//! `atlas keys`: the access keys of a served space (docs/SERVER.md, "Tenants and keys"). A new
//! key's token is printed once, as the last line (with --json, in the object); only its hash
//! is kept.

use crate::output;
use anyhow::Result;
use atlas_domain::Scope;
use atlas_domain::access::{AccessKey, Role};
use atlas_runtime::Atlas;
use clap::Subcommand;
use serde_json::{Value, json};

#[derive(Subcommand)]
pub enum KeysAction {
    /// Make a key confined to a user and/or an agent (an admin key may name neither: it sees
    /// every tenant); prints its token once, as the last line.
    Add {
        /// The user whose memories the key may see and write.
        #[arg(long)]
        user: Option<String>,
        /// The agent whose memories the key may see and write.
        #[arg(long)]
        agent: Option<String>,
        /// read: recall, context, get, explain, export, searches; write: also remember,
        /// import, forget, learn, outcomes; admin: everything over every tenant.
        #[arg(long, value_parser = ["read", "write", "admin"])]
        role: String,
    },
    /// Every key (never a token): id, tenant, role, when made and revoked.
    List,
    /// Revoke a key by its id; a running server refuses it within a second.
    Revoke { id: String },
}

fn key_value(key: &AccessKey) -> Value {
    json!({
        "id": key.id,
        "user": key.tenant.user,
        "agent": key.tenant.agent,
        "role": key.role.as_str(),
        "created_at": key.created_at.to_rfc3339(),
        "revoked_at": key.revoked_at.map(|t| t.to_rfc3339()),
    })
}

fn tenant_text(key: &AccessKey) -> String {
    match (&key.tenant.user, &key.tenant.agent) {
        (None, None) => "every tenant".into(),
        (user, agent) => [user.as_ref().map(|u| format!("user:{u}")), agent.as_ref().map(|a| format!("agent:{a}"))]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

pub async fn run(atlas: &Atlas, action: KeysAction, json: bool) -> Result<()> {
    match action {
        KeysAction::Add { user, agent, role } => {
            let role: Role = role.parse().map_err(anyhow::Error::msg)?;
            let made = atlas.add_key(Scope { user, agent, session: None }, role).await?;
            let mut value = key_value(&made.key);
            value["token"] = Value::from(made.token.clone());
            output::print_line(json, value, || {
                format!(
                    "key {} ({}, {}): keep this token, it is not shown again\n{}",
                    made.key.id,
                    tenant_text(&made.key),
                    made.key.role,
                    made.token
                )
            });
        }
        KeysAction::List => {
            let keys = atlas.keys().await?;
            if json {
                println!("{}", json!({"keys": keys.iter().map(key_value).collect::<Vec<_>>()}));
            } else if keys.is_empty() {
                println!("no keys (add one with `atlas keys add --user U --role read|write|admin`)");
            } else {
                for key in &keys {
                    let state =
                        key.revoked_at.map_or_else(|| "live".to_owned(), |t| format!("revoked {}", t.to_rfc3339()));
                    println!(
                        "{}  {:<5}  {}  made {}  {state}",
                        key.id,
                        key.role.as_str(),
                        tenant_text(key),
                        key.created_at.to_rfc3339()
                    );
                }
            }
        }
        KeysAction::Revoke { id } => {
            atlas.revoke_key(&id).await?;
            output::print_line(json, json!({"revoked": id}), || format!("revoked key {id}"));
        }
    }
    Ok(())
}
