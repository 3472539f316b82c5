//! etcd v3 backend (to be written).
