//! Which objects a LIST or a watcher selects: namespace, label selector,
//! field selector (upstream `storage.SelectionPredicate`), evaluated on the
//! labels and fields each [`CachedObject`] extracted once.

use rkube_api::list_options::ListOptions;
use rkube_api::selector::{FieldSelector, LabelSelector};

use crate::store::CachedObject;

/// The field the pod node index is keyed by.
pub const NODE_NAME_FIELD: &str = "spec.nodeName";

/// A selection: namespace (None = all namespaces) plus selectors.
#[derive(Debug, Clone, Default)]
pub struct Predicate {
    /// Only objects of this namespace.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub label: LabelSelector,
    /// `fieldSelector`.
    pub field: FieldSelector,
}

impl Predicate {
    /// Selects everything in `namespace`.
    pub fn namespace(namespace: Option<&str>) -> Self {
        Predicate { namespace: namespace.map(str::to_string), ..Default::default() }
    }

    /// The selection of a LIST or WATCH request: `namespace` plus the
    /// request's `labelSelector` / `fieldSelector`.
    pub fn from_list_options(namespace: Option<&str>, opts: &ListOptions) -> Self {
        Predicate {
            namespace: namespace.map(str::to_string),
            label: opts.label_selector.clone(),
            field: opts.field_selector.clone(),
        }
    }

    /// True when neither selector restricts anything (upstream `pred.Empty()`).
    pub fn has_no_selectors(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    /// The node name when the field selector requires `spec.nodeName=X`.
    pub fn node_name(&self) -> Option<&str> {
        self.field.exact_match(NODE_NAME_FIELD)
    }

    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace {
            if obj.namespace.as_deref() != Some(ns.as_str()) {
                return false;
            }
        }
        self.label.matches_btree(&obj.labels) && self.field.matches(|f| obj.field(f).map(str::to_string))
    }
}
