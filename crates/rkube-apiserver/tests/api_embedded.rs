//! The API semantics suite on the embedded store.

mod common;
mod suite;

all_suite_tests!(common::TestServer::embedded(), common::TestServer::embedded_storage_reads());
