//! Pure policies: the text pipeline and BM25 every store ranks by, query normalisation, what a question says (its numbers, whether it asks about the requester), who said a turn, rank fusion, standing instructions, what a long
//! memory's text match is worth, recency, near-duplicate collapse, id references and their
//! renumbering on restore, input limits, the checks every model answer and vector passes, secrets kept out of what is shown and stored, what is indexed and embedded,
//! the rules of consolidation (retain tags, phatic turns, names, the relations it knows and the reading of facts in words, fact decisions) and of
//! forgetting (decay, reinforcement, SM-2), and the dialectic that admits observations about
//! the user into core memory; the agent memories' statistics (experience weights and
//! clusters, strategy success rates and ranking), and the Concept library's program structure
//! and compression.

pub mod bank;
pub mod bm25;
pub mod concepts;
pub mod consolidation;
pub mod context;
pub mod decay;
pub mod dialectic;
pub mod documents;
pub mod embedding;
pub mod experience;
pub mod fusion;
pub mod grounding;
pub mod instructions;
pub mod limits;
pub mod long_text;
pub mod model_answer;
pub mod preferences;
pub mod program;
pub mod query;
pub mod question;
pub mod reading;
pub mod recency;
pub mod redundancy;
pub mod references;
pub mod relations;
pub mod retain;
pub mod secrets;
pub mod speakers;
pub mod strategy;
pub mod summary;
pub mod text;
pub mod text_fields;
pub mod timeline;
pub mod values;
