//! Label and field selectors (`labelSelector=`, `fieldSelector=` query parameters).
//!
//! - [`LabelSelector`] follows `k8s.io/apimachinery/pkg/labels/selector.go`
//!   (equality- and set-based requirements, canonical string form).
//! - [`FieldSelector`] follows `k8s.io/apimachinery/pkg/fields/selector.go`
//!   (`=`, `==`, `!=` terms with `\,` `\=` `\\` escaping).
//! - [`label_selector_matches`] matches a `metav1.LabelSelector` object
//!   (JSON) against labels.

pub mod field;
pub mod label;
pub mod object;

pub use field::{FieldOperator, FieldRequirement, FieldSelector};
pub use label::{LabelOperator, LabelRequirement, LabelSelector};
pub use object::label_selector_matches;
