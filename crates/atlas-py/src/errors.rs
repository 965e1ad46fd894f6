//! ATLAS's errors as the Python exceptions of `atlas._errors` (one class per error code, each
//! also the built-in exception mem0's and the frameworks' callers catch), and the field path of
//! a Python value that has no JSON form.

use atlas_domain::AtlasError as Error;
use atlas_server::ops::ApiError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use serde_json::{Value, json};

/// The exception class of an error code, as `atlas._errors` defines it.
fn class_of(code: &str) -> &'static str {
    match code {
        "invalid_input" => "InvalidInput",
        "not_found" => "NotFound",
        "forbidden" => "Forbidden",
        "conflict" => "Conflict",
        "busy" => "Busy",
        "storage" | "not_atlas" | "schema_too_new" => "StorageError",
        "embedding" | "embedding_refused" | "model_mismatch" => "EmbeddingError",
        "config" => "ConfigError",
        "closed" => "ClosedError",
        _ => "AtlasError",
    }
}

/// `{"error": {"code", "message", "field", "location", "index"}}` as the exception of its code.
pub fn exception(body: &Value) -> PyErr {
    let error = &body["error"];
    let code = error["code"].as_str().unwrap_or("internal");
    let message = error["message"].as_str().unwrap_or("unknown error").to_owned();
    Python::attach(|py| {
        let class = py
            .import("atlas._errors")
            .and_then(|m| m.getattr(class_of(code)))
            .and_then(|c| Ok(c.cast_into::<PyType>()?));
        let class = match class {
            Ok(class) => class,
            // The package is broken (its _errors module missing): keep the error's words.
            Err(_) => return pyo3::exceptions::PyRuntimeError::new_err(format!("{code}: {message}")),
        };
        let err = PyErr::from_type(class, (message,));
        let value = err.value(py);
        let text = |key: &str| error[key].as_str().map(str::to_owned);
        // Setting attributes on a fresh exception object cannot fail but for memory.
        let _ = value.setattr("code", code);
        let _ = value.setattr("field", text("field"));
        let _ = value.setattr("location", text("location"));
        let _ = value.setattr("index", error["index"].as_u64());
        err
    })
}

pub fn atlas_err(e: Error) -> PyErr {
    exception(&ApiError::from(e).body)
}

pub fn api_err(e: ApiError) -> PyErr {
    exception(&e.body)
}

/// An `InvalidInput` naming `field`.
pub fn invalid(field: &str, message: impl std::fmt::Display) -> PyErr {
    exception(&json!({"error": {"code": "invalid_input", "message": format!("{field}: {message}"), "field": field}}))
}

/// A closed (or inherited across `fork()`) space's error.
pub fn closed(message: String) -> PyErr {
    exception(&json!({"error": {"code": "closed", "message": message}}))
}

/// `value` (the argument `field`; "" for an operation's arguments, whose fields are named
/// alone) as JSON; a value JSON cannot hold (bytes, a set, an object, a key that is not a
/// string, a number too large, NaN), one nested deeper than [`MAX_DEPTH`] or one that contains
/// itself is `InvalidInput` naming its path (`memories[0].meta.when`). The value is walked
/// without recursion before anything converts it, so that no value (10,000 levels, a dict
/// holding itself) can exhaust a thread's stack.
pub fn to_json(field: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let named = |path: &str| if path.is_empty() { "arguments".to_owned() } else { path.to_owned() };
    if let Some((path, why)) = bad_path(value, field) {
        return Err(invalid(&named(&path), why));
    }
    pythonize::depythonize::<Value>(value).map_err(|e| invalid(&named(field), e))
}

/// How deeply an argument may nest lists and dicts: deep enough that the domain's own rule
/// (`meta` holds at most 32 levels) names the field of a value a little too deep, shallow enough
/// that converting it never nears a small thread's stack (about 600 bytes a level: a thread of
/// 512 KB failed at 900 levels).
pub const MAX_DEPTH: usize = 200;

/// How many values one argument may hold in all (a structure that shares one list many times
/// over is walked once per reference).
const MAX_VALUES: usize = 4_000_000;

/// One container being walked: its address (to tell a cycle), its path, its children left.
struct Open<'py> {
    address: usize,
    children: std::vec::IntoIter<(String, Bound<'py, PyAny>)>,
}

/// The first place in `value` that has no JSON form, and why; depth first, without recursion.
fn bad_path(value: &Bound<'_, PyAny>, path: &str) -> Option<(String, String)> {
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut on_path: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let mut next: Option<(String, Bound<'_, PyAny>)> = Some((path.to_owned(), value.clone()));
    let mut seen = 0usize;
    loop {
        if let Some((path, value)) = next.take() {
            seen += 1;
            if seen > MAX_VALUES {
                return Some((path, format!("holds more than {MAX_VALUES} values")));
            }
            match children(&value, &path) {
                Err(why) => return Some((path, why)),
                Ok(None) => {}
                Ok(Some(items)) => {
                    let address = value.as_ptr() as usize;
                    if !on_path.insert(address) {
                        return Some((path, "contains itself (a list or dict inside itself has no JSON form)".into()));
                    }
                    if open.len() >= MAX_DEPTH {
                        return Some((path, format!("nested more than {MAX_DEPTH} levels deep")));
                    }
                    open.push(Open { address, children: items.into_iter() });
                }
            }
        }
        let top = open.last_mut()?;
        match top.children.next() {
            Some(child) => next = Some(child),
            None => {
                on_path.remove(&top.address);
                open.pop();
            }
        }
    }
}

/// The items of a list or dict, each with its path.
type Children<'py> = Vec<(String, Bound<'py, PyAny>)>;

/// A value's children with their paths (`None` for a scalar JSON holds), or why it has no
/// JSON form.
fn children<'py>(value: &Bound<'py, PyAny>, path: &str) -> Result<Option<Children<'py>>, String> {
    if value.is_none() || value.is_instance_of::<PyBool>() || value.is_instance_of::<PyString>() {
        return Ok(None);
    }
    if value.is_instance_of::<PyInt>() {
        return match (value.extract::<i64>(), value.extract::<u64>()) {
            (Err(_), Err(_)) => Err(format!("{value} is out of the range of a 64-bit integer")),
            _ => Ok(None),
        };
    }
    if let Ok(float) = value.cast::<PyFloat>() {
        let float = float.value();
        return if float.is_finite() { Ok(None) } else { Err(format!("{float} is not a finite number")) };
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut items = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let Ok(name) = key.extract::<String>() else {
                let kind = key.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                return Err(format!(
                    "a key must be a string, got {kind} {}",
                    key.repr().map(|r| r.to_string()).unwrap_or_default()
                ));
            };
            let inner = if path.is_empty() { name } else { format!("{path}.{name}") };
            items.push((inner, item));
        }
        return Ok(Some(items));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in value.try_iter().map_err(|e| e.to_string())?.enumerate() {
            items.push((format!("{path}[{i}]"), item.map_err(|e| e.to_string())?));
        }
        return Ok(Some(items));
    }
    let kind = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    Err(format!("{kind} has no JSON form (give a string, number, boolean, None, list or dict)"))
}
