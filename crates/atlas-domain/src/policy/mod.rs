//! Pure policies: query normalisation, rank fusion, recency, near-duplicate collapse, input
//! limits, what is indexed and embedded.

pub mod embedding;
pub mod fusion;
pub mod limits;
pub mod query;
pub mod recency;
pub mod redundancy;
pub mod text_fields;
