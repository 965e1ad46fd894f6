//! Pure policies: query normalisation, rank fusion, input limits, what is indexed and embedded.

pub mod embedding;
pub mod fusion;
pub mod limits;
pub mod query;
pub mod text_fields;
