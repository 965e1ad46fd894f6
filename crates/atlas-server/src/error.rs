//! The API's one error shape, `{"error": {"code", "message", "field"}}` with its status: built
//! from bad arguments, serde's errors (naming the JSON path) and the runtime's errors, and
//! answered as HTTP (with `Retry-After` / `WWW-Authenticate` where they belong).

use atlas_domain::AtlasError;
use atlas_runtime::wire;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error as the API answers it: a status class and `{"error": {"code", "message", "field"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub body: Value,
}

impl ApiError {
    pub fn new(status: u16, code: &str, message: impl Into<String>, field: Option<&str>) -> Self {
        ApiError { status, body: json!({"error": {"code": code, "message": message.into(), "field": field}}) }
    }

    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_input", message, Some(field))
    }

    pub fn forbidden(field: &str, message: &str) -> Self {
        ApiError::new(403, "forbidden", message, Some(field))
    }

    /// A serde error as a 400 whose `field` is the JSON path of the offending field
    /// (`queries[1].qury`, `k`), under `prefix` for an item of a batch.
    pub fn from_serde(e: &serde_path_to_error::Error<serde_json::Error>, prefix: &str) -> Self {
        let inner = e.inner().to_string();
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        // An unknown or missing field is named by serde between backticks, below the path.
        let named = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|p| inner.strip_prefix(p))
            .and_then(|rest| rest.split('`').next());
        let field = match (named, path.is_empty()) {
            (Some(name), true) => name.to_owned(),
            (Some(name), false) if !path.ends_with(name) => format!("{path}.{name}"),
            (_, false) => path,
            (None, true) => String::new(),
        };
        let field = format!("{prefix}{field}");
        let field = field.trim_end_matches('.');
        let shown = if field.is_empty() { "body" } else { field };
        ApiError::new(400, "invalid_input", format!("{shown}: {inner}"), Some(shown))
    }

    /// This error as one of item `index` of a batch: its field under `prefix` (`memories[3].`).
    pub fn in_item(mut self, prefix: &str, index: usize) -> Self {
        let field = self.body["error"]["field"].as_str().map(|f| format!("{prefix}{f}"));
        self.body["error"]["field"] = field.map_or_else(|| Value::from(prefix.trim_end_matches('.')), Value::from);
        self.body["error"]["index"] = Value::from(index);
        self
    }

    /// A runtime error that named no field, as one naming `field`.
    pub(crate) fn or_field(mut self, field: &str) -> Self {
        if self.body["error"]["field"].is_null() {
            self.body["error"]["field"] = Value::from(field);
        }
        self
    }
}

impl From<AtlasError> for ApiError {
    fn from(e: AtlasError) -> Self {
        let status = match &e {
            AtlasError::InvalidInput { .. } => 400,
            AtlasError::Forbidden { .. } => 403,
            AtlasError::NotFound(_) => 404,
            AtlasError::Conflict(_) => 409,
            AtlasError::Busy(_) => 503,
            _ => 500,
        };
        let mut body = wire::error_value(e.code(), &e.to_string(), Some(&e));
        if let AtlasError::Conflict(_) = e {
            body["error"]["field"] = Value::from("Idempotency-Key");
        }
        ApiError { status, body }
    }
}

pub type OpResult = Result<Value, ApiError>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"atlas\""));
        }
        response
    }
}
