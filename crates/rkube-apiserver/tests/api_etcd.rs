//! The API semantics suite on a real etcd (started on free loopback ports
//! by `rkube_storage::testing::EtcdServer`, stopped by PID when the test ends).

use crate::common;

all_suite_tests!(common::TestServer::etcd(), common::TestServer::etcd_storage_reads());
