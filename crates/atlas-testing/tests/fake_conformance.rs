//! Runs the storage conformance suite against the in-memory fake, the reference for adapters.

use atlas_testing::{FakeStore, Subject};

atlas_testing::store_conformance!(fake, || Subject::new(FakeStore::new(), ()));
atlas_testing::consolidator_conformance!(fake_consolidator, || Subject::new(FakeStore::new(), ()));
