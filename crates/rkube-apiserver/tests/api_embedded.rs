//! The API semantics suite on the embedded store.

use crate::common;

all_suite_tests!(common::TestServer::embedded(), common::TestServer::embedded_storage_reads());
