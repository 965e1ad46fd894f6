//! Reading a point back: the memory id it is stored under, the memory its payload holds (with
//! what rewriting it keeps), and the payload selectors every request uses.

use crate::payload::from_payload;
use atlas_domain::{AtlasError, Memory, MemoryId, Result};
use qdrant_client::qdrant::point_id::PointIdOptions;
use qdrant_client::qdrant::{PointId, RetrievedPoint};

pub(crate) use crate::schema::CONSOLIDATED_AT;

/// What a point holds besides its memory and vectors that rewriting it keeps.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Kept {
    /// When the sleep cycle processed the episode.
    pub(crate) consolidated_at: Option<i64>,
}

/// Only these payload fields in the answer.
pub(crate) fn include(fields: &[&str]) -> qdrant_client::qdrant::PayloadIncludeSelector {
    qdrant_client::qdrant::PayloadIncludeSelector { fields: fields.iter().map(|f| (*f).to_owned()).collect() }
}

pub(crate) fn memory_id(id: Option<&PointId>) -> Result<MemoryId> {
    match id.and_then(|p| p.point_id_options.as_ref()) {
        Some(PointIdOptions::Num(n)) => i64::try_from(*n)
            .map(MemoryId)
            .map_err(|_| AtlasError::Storage(format!("Qdrant point id {n} is not an ATLAS memory id"))),
        other => Err(AtlasError::Storage(format!("Qdrant point id {other:?} is not an ATLAS memory id"))),
    }
}

pub(crate) fn decode(p: RetrievedPoint, dense: Option<&str>) -> Result<(Memory, Option<Vec<f32>>, Kept)> {
    let id = memory_id(p.id.as_ref())?;
    let kept = Kept { consolidated_at: p.payload.get(CONSOLIDATED_AT).and_then(|v| v.as_integer()) };
    let payload: serde_json::Map<String, serde_json::Value> =
        p.payload.into_iter().map(|(k, v)| (k, serde_json::Value::from(v))).collect();
    let memory = from_payload(id.0 as u64, payload)?;
    let vector = match (dense, p.vectors) {
        (Some(name), Some(vectors)) => match vectors.get_vector_by_name(name) {
            Some(qdrant_client::qdrant::vector_output::Vector::Dense(d)) => Some(d.data),
            Some(_) => return Err(AtlasError::Storage(format!("Qdrant point {id}: vector {name:?} is not dense"))),
            None => None,
        },
        _ => None,
    };
    Ok((memory, vector, kept))
}
