//! `GET /openapi.json`: an OpenAPI 3.1 document generated from [`crate::ROUTES`] and the
//! argument types of [`crate::ops`] (their JSON Schemas come from the types, through schemars),
//! so that it cannot drift from what the server answers.

use crate::ops::schema_of;
use crate::{Op, ROUTES};
use crate::{batch_field, op_name};
use serde_json::{Map, Value, json};

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

/// The arguments of `op` that travel in the path or the query rather than the body.
fn parameters(path: &str, op: Op) -> Vec<Value> {
    let mut parameters: Vec<Value> = path
        .split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "integer", "minimum": 1}}))
        .collect();
    let query = crate::query_parameter(op);
    if let Some((name, description)) = query {
        parameters.push(json!({"name": name, "in": "query", "required": false, "description": description,
                               "schema": {"type": "boolean", "default": false}}));
    }
    parameters
}

/// The body schema of `op` without the fields that come from the path or query.
fn body_schema(op: Op, path: &str) -> Value {
    let mut schema = schema_of(op);
    for name in ["id", "hard"] {
        if path.contains(&format!("{{{name}}}")) || (op == Op::Forget && name == "hard") {
            if let Some(properties) = schema["properties"].as_object_mut() {
                properties.remove(name);
            }
            if let Some(required) = schema["required"].as_array_mut() {
                required.retain(|r| r != name);
            }
        }
    }
    schema
}

/// The document.
pub fn document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for route in ROUTES {
        let mut operation = json!({
            "operationId": op_name(route.op),
            "summary": route.summary,
            "responses": {
                "400": error_response("Bad input; `field` names what was wrong."),
                "401": error_response("Missing or wrong bearer token."),
                "403": error_response("Refused: a Host or Origin not allowed, a role too low, or a scope outside the key's tenant."),
                "404": error_response("No such memory or route."),
                "409": error_response("The Idempotency-Key was used before for another payload; nothing was stored."),
                "413": error_response("Body over the limit."),
                "415": error_response("The body is not JSON (application/json; JSON Lines on import)."),
                "503": error_response("Busy or timed out; retry after `Retry-After` seconds."),
            },
        });
        if let Some(tool) = &route.tool {
            operation["description"] = Value::from(tool.description);
            operation["x-mcp-tool"] = Value::from(tool.name);
        }
        let parameters = parameters(route.path, route.op);
        if !parameters.is_empty() {
            operation["parameters"] = Value::from(parameters);
        }
        let body = match route.op {
            Op::Health
            | Op::Metrics
            | Op::OpenApi
            | Op::Export
            | Op::Get
            | Op::Explain
            | Op::Forget
            | Op::Stats
            | Op::Cycles
            | Op::Archived => None,
            Op::Import => Some(json!({"application/x-ndjson": {"schema": {"type": "string",
                "description": "JSON Lines: one memory per line, or a full export (header, memories, trailer)"}}})),
            op => {
                let schema = match route.batch {
                    Some(batch) => json!({"oneOf": [body_schema(op, route.path), body_schema(batch, route.path)],
                                          "description": format!("One, or many under `{}`.", batch_field(batch))}),
                    None => body_schema(op, route.path),
                };
                Some(json!({"application/json": {"schema": schema}}))
            }
        };
        if let Some(content) = body {
            // Operations whose every argument has a default take an empty body.
            let required = !matches!(route.op, Op::Consolidate | Op::List | Op::Sessions | Op::Recover);
            operation["requestBody"] = json!({"required": required, "content": content});
        }
        let (status, content) = match route.op {
            Op::Metrics => ("200", json!({"text/plain": {"schema": {"type": "string"}}})),
            Op::Export => ("200", json!({"application/x-ndjson": {"schema": {"type": "string"}}})),
            Op::Remember | Op::Import => ("201", json!({"application/json": {"schema": {"type": "object"}}})),
            Op::Health => ("200", json!({"application/json": {"schema": {"type": "object"}}})),
            _ => ("200", json!({"application/json": {"schema": {"type": "object"}}})),
        };
        operation["responses"][status] =
            json!({"description": "Done; the CLI's `--json` shape.", "content": content.clone()});
        if route.op == Op::Import {
            operation["responses"]["200"] = json!({"description": "The same content was imported before: a replay, nothing stored.", "content": content});
        }
        if route.op == Op::Health {
            // Answered without a token.
            operation["security"] = json!([]);
        }
        let entry = paths.entry(route.path.to_owned()).or_insert_with(|| json!({}));
        entry[route.method.to_ascii_lowercase()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "ATLAS", "version": env!("CARGO_PKG_VERSION"),
                 "description": "The memory of an agent: remember, recall, forget, consolidate; the agent memories. \
                                 The same operations are MCP tools at /mcp (x-mcp-tool names each)."},
        "paths": paths,
        "components": {
            "schemas": {"Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                               "field": {"type": ["string", "null"]},
                               "index": {"type": "integer", "minimum": 0},
                               "location": {"type": ["string", "null"]}}}}}},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    })
}
