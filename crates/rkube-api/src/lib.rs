//! Kubernetes apimachinery for rkube: the leaf utilities every other crate
//! uses to speak the Kubernetes API exactly like kube-apiserver does.
//!
//! - [`status`] — [`Status`], the `metav1.Status` error body,
//!   with constructors for every upstream reason (`NotFound` 404, `Conflict`
//!   409, `Invalid` 422, `Expired` 410, `Timeout` 504, ...).
//! - [`field_error`] — field errors (`FieldValueInvalid`, ...) that make up the
//!   causes of an `Invalid` Status.
//! - [`selector`] — [`LabelSelector`] (equality- and
//!   set-based) and [`FieldSelector`].
//! - [`list_options`] — [`ListOptions`], the parsed and
//!   validated LIST/WATCH query (`labelSelector`, `resourceVersion`,
//!   `resourceVersionMatch`, `limit`, `continue`, `watch`, `sendInitialEvents`, ...).
//! - [`continue_token`] — [`ContinueToken`],
//!   the pagination token format of `k8s.io/apiserver/pkg/storage/continue.go`.
//! - [`validation`] — DNS-1123 names, qualified names, label values,
//!   `metadata.name` / `labels` / `annotations` checks with upstream messages.
//! - [`protobuf`] — Kubernetes protobuf request bodies decoded to JSON.
//! - [`time`] — `metav1.Time` and `metav1.MicroTime` timestamps.
//! - [`wire`] — body bytes as kube-apiserver writes them: typed key order
//!   (`kind`, `apiVersion`, `metadata`, ..., `status`) and the trailing newline.
//! - [`registry`] — the resource table (group, version, resource, kind, scope,
//!   short names, verbs, subresources, selectable fields, typed schema,
//!   strategy), one row per served resource.
//! - [`strategy`] — per-kind defaulting, create-time preparation and
//!   validation (upstream `SetDefaults_*` and registry strategies).
//!
//! Nothing here does I/O; every function is pure and cheap to test.

#![deny(missing_docs)]
// `Status` is the wire error type the HTTP edge serializes; it is returned
// only on failure paths, so its size does not matter there.
#![allow(clippy::result_large_err)]

pub mod apiextensions;
pub mod continue_token;
pub mod csr;
pub mod field_error;
pub mod list_options;
pub mod printers;
pub mod protobuf;
pub mod quota;
pub mod registry;
pub mod selector;
pub mod status;
pub mod strategy;
pub mod time;
pub mod validation;
pub mod wire;

pub use continue_token::ContinueToken;
pub use list_options::{parse_resource_version, ListOptions, ResourceVersionMatch};
pub use selector::{FieldSelector, LabelSelector};
pub use status::{Status, StatusCause, StatusDetails};
