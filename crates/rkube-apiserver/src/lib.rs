//! rkube's Kubernetes-compatible API server.
//!
//! - [`server`]: routing ([`server::router`]), [`server::serve`] with graceful
//!   shutdown, and [`server::bootstrap`] of the system namespaces.
//! - [`handlers`]: GET/LIST/POST/PUT/PATCH/DELETE with Kubernetes semantics;
//!   [`handlers::watch`]: WATCH streams. Every read is routed by the watch-cache layer
//!   ([`rkube_cache::CacheLayer`], [`state::ApiState::cache`]); this crate
//!   parses requests and encodes answers.
//! - [`source`]: stored objects as JSON values for read-modify-write loops.
//! - [`discovery`], [`system`] (`/version`, health, OpenAPI endpoints),
//!   [`openapi`], [`table`], [`patch`].
//! - [`error`]: every failure becomes a `Status` ([`error::ApiError`]).
//! - [`rbac_aggregation`]: the ClusterRole aggregation controller.
//! - [`metrics_api`]: `metrics.k8s.io/v1beta1` (NodeMetrics, PodMetrics) from the kubelets' scraped usage.
//! - [`csr`]: CertificateSigningRequest write paths, approval/signing checks and the signer.
//! - [`kubernetes_service`]: the `default/kubernetes` Service, Endpoints and EndpointSlice.
//! - [`serviceaccount`]: ServiceAccount tokens (keys, claims, the
//!   authenticator, issuer discovery); [`admission`]: admission plugins
//!   (ServiceAccount); [`controllers`]: the serviceaccount, root CA publisher
//!   and token controllers run in the API server process.
//! - [`splice`]: the two ends of a proxied upgrade (exec, attach, port-forward) spliced.
//! - [`cli`]: the `apiserver` and `up` commands; [`up_auth`]: `rkube up`'s HTTPS, authentication and RBAC defaults.

pub mod admission;
pub mod body_chunks;
pub mod builtin_objects;
pub mod cache_options;
pub mod cli;
pub mod crd_conversion;
pub mod decoded;
pub mod config_data;
pub mod controllers;
pub mod csr;
pub mod discovery;
pub mod error;
pub mod feature_gates;
pub mod filters;
pub mod flowcontrol;
pub mod handlers;
pub mod ipalloc;
pub mod json_value;
pub mod kubelet_client;
pub mod kubernetes_service;
pub mod lazy_storage;
pub mod media;
pub mod metrics_api;
pub mod object;
pub mod openapi;
pub mod patch;
pub mod protobuf_body;
pub mod rbac_aggregation;
pub mod readiness;
pub mod render;
pub mod request;
pub mod server;
pub mod serviceaccount;
pub mod source;
pub mod splice;
pub mod state;
pub mod strict;
pub mod system;
pub mod table;
pub mod testing;
pub mod up_auth;
pub mod validate;
pub mod yaml_depth;
pub mod yaml_value;

pub use server::{bootstrap, router, serve};
pub use state::{ApiState, ServerConfig};
