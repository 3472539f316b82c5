//! Label and field selectors (`labelSelector=`, `fieldSelector=` query parameters).
//!
//! - [`LabelSelector`] follows `k8s.io/apimachinery/pkg/labels/selector.go`
//!   (equality- and set-based requirements, canonical string form).
//! - [`FieldSelector`] follows `k8s.io/apimachinery/pkg/fields/selector.go`
//!   (`=`, `==`, `!=` terms with `\,` `\=` `\\` escaping).

pub mod field;
pub mod label;

pub use field::{FieldOperator, FieldRequirement, FieldSelector};
pub use label::{LabelOperator, LabelRequirement, LabelSelector};
