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
        "embedding" | "model_mismatch" => "EmbeddingError",
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
/// string, a number too large) is `InvalidInput` naming its path (`memories[0].meta.when`).
pub fn to_json(field: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    pythonize::depythonize::<Value>(value).map_err(|e| match bad_path(value, field.to_owned(), 0) {
        Some((path, why)) => invalid(if path.is_empty() { "arguments" } else { &path }, why),
        None => invalid(if field.is_empty() { "arguments" } else { field }, e),
    })
}

/// Deeper than this, the path is not walked: the domain's depth rule refuses such a value.
const MAX_WALK: usize = 256;

/// The first place in `value` that has no JSON form, and why.
fn bad_path(value: &Bound<'_, PyAny>, path: String, depth: usize) -> Option<(String, String)> {
    if depth > MAX_WALK {
        return None;
    }
    if value.is_none() || value.is_instance_of::<PyBool>() || value.is_instance_of::<PyString>() {
        return None;
    }
    if value.is_instance_of::<PyInt>() {
        return match (value.extract::<i64>(), value.extract::<u64>()) {
            (Err(_), Err(_)) => Some((path, format!("{value} is out of the range of a 64-bit integer"))),
            _ => None,
        };
    }
    if let Ok(float) = value.cast::<PyFloat>() {
        let float = float.value();
        return (!float.is_finite()).then(|| (path, format!("{float} is not a finite number")));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        for (key, item) in dict.iter() {
            let Ok(name) = key.extract::<String>() else {
                let kind = key.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                return Some((
                    path,
                    format!(
                        "a key must be a string, got {kind} {}",
                        key.repr().map(|r| r.to_string()).unwrap_or_default()
                    ),
                ));
            };
            let inner = if path.is_empty() { name } else { format!("{path}.{name}") };
            if let Some(found) = bad_path(&item, inner, depth + 1) {
                return Some(found);
            }
        }
        return None;
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        for (i, item) in value.try_iter().ok()?.enumerate() {
            if let Some(found) = bad_path(&item.ok()?, format!("{path}[{i}]"), depth + 1) {
                return Some(found);
            }
        }
        return None;
    }
    let kind = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    Some((path, format!("{kind} has no JSON form (give a string, number, boolean, None, list or dict)")))
}
