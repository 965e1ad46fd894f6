//! Pure policies: query normalisation, rank fusion, input limits.

pub mod embedding;
pub mod fusion;
pub mod limits;
pub mod query;
