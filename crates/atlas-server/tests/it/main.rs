//! The server's integration tests as one binary, a module per concern: one compile and one
//! link of the server instead of one per file.

mod api;
mod safety;
mod support;
mod tenants;
