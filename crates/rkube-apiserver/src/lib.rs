//! rkube's Kubernetes-compatible API server.
//!
//! HTTP routing, CRUD handlers, watch, discovery, OpenAPI, tables, patches,
//! health endpoints; the `apiserver` and `up` commands live in [`cli`].

pub mod cli;
pub mod openapi;
pub mod patch;
pub mod table;
