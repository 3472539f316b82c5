//! Field paths and field sets, and their `FieldsV1` wire format.
//!
//! Follows `sigs.k8s.io/structured-merge-diff/v4/fieldpath`: a path is a
//! sequence of [`PathElement`]s (a field name, a key of an associative list
//! item, a value of a set item, or an index); a [`FieldSet`] is a tree whose
//! nodes say which paths are *members*. `FieldsV1` (what `managedFields`
//! carries) spells elements `f:<name>`, `k:<json of keys>`, `v:<json>`,
//! `i:<n>`, and marks a node that is itself a member and has children with
//! `".": {}`:
//!
//! ```json
//! {"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// One step of a field path. The derived order (field < key < value <
/// index, then by content) is the serialization order of `FieldsV1`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PathElement {
    /// A field of an object: `f:<name>`, printed `.name`.
    Field(String),
    /// An associative list item, as the compact JSON of its key fields
    /// sorted by name: `k:{"name":"web"}`, printed `[name="web"]`.
    Key(String),
    /// A set item, as its compact JSON: `v:"x"`, printed `[="x"]`.
    Value(String),
    /// A list index: `i:3`, printed `[3]`.
    Index(usize),
}

/// The `FieldsV1` key of the field `name`: `f:<name>`.
pub(crate) fn field_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len() + 2);
    key.push_str("f:");
    key.push_str(name);
    key
}

impl PathElement {
    /// A field element (with room for the `f:` of its `FieldsV1` key, so
    /// [`PathElement::into_fields_v1_key`] needs no new allocation).
    pub(crate) fn field(name: &str) -> Self {
        let mut s = String::with_capacity(name.len() + 2);
        s.push_str(name);
        PathElement::Field(s)
    }

    /// A key element from `(name, value)` pairs (sorted here).
    pub(crate) fn key(mut fields: Vec<(String, Value)>) -> Self {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        let mut m = Map::new();
        for (k, v) in fields {
            m.insert(k, v);
        }
        PathElement::Key(Value::Object(m).to_string())
    }

    /// A value element.
    pub(crate) fn value(v: &Value) -> Self {
        PathElement::Value(v.to_string())
    }

    /// The `FieldsV1` key: `f:name`, `k:{...}`, `v:...`, `i:N`.
    pub(crate) fn to_fields_v1_key(&self) -> String {
        let prefixed = |prefix: &str, text: &str| {
            let mut s = String::with_capacity(prefix.len() + text.len());
            s.push_str(prefix);
            s.push_str(text);
            s
        };
        match self {
            PathElement::Field(n) => field_key(n),
            PathElement::Key(k) => prefixed("k:", k),
            PathElement::Value(v) => prefixed("v:", v),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// [`PathElement::to_fields_v1_key`], reusing a field name's string.
    pub(crate) fn into_fields_v1_key(self) -> String {
        match self {
            PathElement::Field(mut n) => {
                n.insert_str(0, "f:");
                n
            }
            other => other.to_fields_v1_key(),
        }
    }

    /// Parses a `FieldsV1` key; `None` when malformed.
    pub(crate) fn from_fields_v1_key(s: &str) -> Option<Self> {
        let (prefix, rest) = s.split_at_checked(2)?;
        match prefix {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                let obj = v.as_object()?;
                Some(PathElement::key(
                    obj.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                ))
            }
            "v:" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                Some(PathElement::value(&v))
            }
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }
}

impl std::fmt::Display for PathElement {
    /// Upstream's `PathElement.String()`: `.name`, `[k=v,k2="s"]`, `[="x"]`, `[3]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathElement::Field(n) => write!(f, ".{n}"),
            PathElement::Key(k) => {
                let parsed: Value = serde_json::from_str(k).unwrap_or(Value::Null);
                let parts: Vec<String> = match parsed.as_object() {
                    Some(obj) => obj.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                    None => vec![k.clone()],
                };
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A field path.
pub(crate) type Path = Vec<PathElement>;

/// Prints a path like upstream's `Path.String()`: `.spec.containers[name="web"].image`.
pub(crate) fn path_string(path: &[PathElement]) -> String {
    path.iter().map(|pe| pe.to_string()).collect()
}

/// A set of field paths (structured-merge-diff's `fieldpath.Set`).
///
/// Invariant: no child set is empty (operations prune empty children), so
/// `==` compares contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub(crate) fn new() -> Self {
        FieldSet::default()
    }

    /// Whether the set holds no path.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path` (a no-op for the empty path).
    pub(crate) fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => match self.children.get_mut(first) {
                Some(child) => child.insert(rest),
                None => self.children.entry(first.clone()).or_default().insert(rest),
            },
        }
    }

    /// Adds every path `prefix` + one of `members` (the members of one
    /// node, in any order, repeats allowed); nothing when `members` is
    /// empty. The members are sorted once and joined to the node's in one
    /// pass, so a large map's keys cost no tree insertion each.
    pub(crate) fn insert_members(&mut self, prefix: &[PathElement], members: Vec<PathElement>) {
        if members.is_empty() {
            return;
        }
        let mut node = self;
        for pe in prefix {
            node = node.children.entry(pe.clone()).or_default();
        }
        let mut added: BTreeSet<PathElement> = members.into_iter().collect();
        join_members(&mut node.members, &mut added);
    }

    /// Whether `path` is a member.
    #[cfg(test)]
    pub(crate) fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// The members of this node.
    pub(crate) fn members(&self) -> &BTreeSet<PathElement> {
        &self.members
    }

    /// The non-empty subsets under this node's elements.
    pub(crate) fn children(&self) -> &BTreeMap<PathElement, FieldSet> {
        &self.children
    }

    /// How many paths the set holds, counting no further than `limit`.
    pub(crate) fn count_up_to(&self, limit: usize) -> usize {
        let mut n = self.members.len();
        for child in self.children.values() {
            if n >= limit {
                break;
            }
            n += child.count_up_to(limit - n);
        }
        n.min(limit)
    }

    /// Whether every path of `self` is in `other` (no copy: one walk of
    /// both trees).
    pub(crate) fn is_subset(&self, other: &FieldSet) -> bool {
        self.members.is_subset(&other.members)
            && self.children.iter().all(|(pe, mine)| other.children.get(pe).is_some_and(|theirs| mine.is_subset(theirs)))
    }

    /// The subset under `pe`, if any.
    pub(crate) fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    /// Whether `pe` is a member of this node.
    pub(crate) fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// `self ∪ other`, built in `self` (only `other`'s paths are copied).
    pub(crate) fn union(mut self, other: &FieldSet) -> FieldSet {
        if !other.members.is_empty() {
            let mut theirs = other.members.clone();
            join_members(&mut self.members, &mut theirs);
        }
        for (pe, theirs) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => *mine = std::mem::take(mine).union(theirs),
                None => {
                    self.children.insert(pe.clone(), theirs.clone());
                }
            }
        }
        self
    }

    /// `self − other`, path by path (a member of `other` removes only that
    /// exact path, not the paths below it), built in `self`: its cost grows
    /// with `other`, plus one pass over `self`'s members when `other` has
    /// members at that node.
    pub(crate) fn difference(mut self, other: &FieldSet) -> FieldSet {
        if !other.members.is_empty() {
            self.members.retain(|m| !other.members.contains(m));
        }
        for (pe, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                *mine = std::mem::take(mine).difference(theirs);
            }
        }
        self.children.retain(|_, c| !c.is_empty());
        self
    }

    /// `self` without its members that have a path of `other` below them
    /// (a member that is a proper ancestor of something in `other` stays a
    /// prefix only). Pruning with the result never removes a node that still
    /// holds owned fields: upstream removes the whole last-applied set and
    /// adds owned items back (structured-merge-diff `merge/update.go`,
    /// `prune` / `addBackOwnedItems`), which keeps such a node.
    pub(crate) fn without_ancestors_of(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        out.members = self
            .members
            .iter()
            .filter(|pe| !other.children.contains_key(*pe))
            .cloned()
            .collect();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.without_ancestors_of(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(pe.clone(), rest);
            }
        }
        out
    }

    /// `self ∩ other`.
    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        out.members = self.members.intersection(&other.members).cloned().collect();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(pe.clone(), both);
                }
            }
        }
        out
    }

    /// Every member path, in serialization order.
    pub(crate) fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        let keys: BTreeSet<&PathElement> =
            self.members.iter().chain(self.children.keys()).collect();
        for pe in keys {
            prefix.push(pe.clone());
            if self.members.contains(pe) {
                out.push(prefix.clone());
            }
            if let Some(child) = self.children.get(pe) {
                child.collect_paths(prefix, out);
            }
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON object.
    #[cfg(test)]
    pub(crate) fn to_fields_v1(&self) -> Value {
        self.clone().into_fields_v1()
    }

    /// The `FieldsV1` JSON object, made of the set's own strings: keys in
    /// [`PathElement`] order, a node that is a member and has children
    /// marked with `".": {}`.
    pub(crate) fn into_fields_v1(self) -> Value {
        self.into_fields_v1_with(false)
    }

    /// [`FieldSet::into_fields_v1`] of a set whose parent is itself a member:
    /// the object starts with `".": {}`.
    fn into_fields_v1_marked(self) -> Value {
        self.into_fields_v1_with(true)
    }

    fn into_fields_v1_with(self, marked: bool) -> Value {
        let FieldSet { members, children } = self;
        // Sized once: a map's keys can be 100,000s of members.
        let mut m = Map::with_capacity(members.len() + children.len() + usize::from(marked));
        if marked {
            m.insert(".".to_string(), Value::Object(Map::new()));
        }
        if children.is_empty() {
            // Members only (a map's keys, a leaf struct): already in order.
            for pe in members {
                m.insert(pe.into_fields_v1_key(), Value::Object(Map::new()));
            }
            return Value::Object(m);
        }
        // Both are sorted: joined in one pass.
        let mut members = members.into_iter().peekable();
        let mut children = children.into_iter().peekable();
        loop {
            let member_first = match (members.peek(), children.peek()) {
                (None, None) => break,
                (Some(pe), Some((child_pe, _))) => pe <= child_pe,
                (member, _) => member.is_some(),
            };
            let (pe, node) = if member_first {
                let Some(pe) = members.next() else { break };
                match children.next_if(|(child_pe, _)| *child_pe == pe) {
                    Some((_, child)) => (pe, child.into_fields_v1_marked()),
                    None => (pe, Value::Object(Map::new())),
                }
            } else {
                let Some((pe, child)) = children.next() else { break };
                (pe, child.into_fields_v1())
            };
            m.insert(pe.into_fields_v1_key(), node);
        }
        Value::Object(m)
    }

    /// Parses a `FieldsV1` JSON object; `Err` names the first malformed key.
    pub(crate) fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Some(obj) = v.as_object() else {
            return Err(format!("expected an object, got {v}"));
        };
        let mut out = FieldSet::new();
        for (k, child) in obj {
            if k == "." {
                continue;
            }
            let pe = PathElement::from_fields_v1_key(k)
                .ok_or_else(|| format!("invalid field path element {k:?}"))?;
            let child_obj = child
                .as_object()
                .ok_or_else(|| format!("expected an object under {k:?}"))?;
            if child_obj.is_empty() || child_obj.contains_key(".") {
                out.members.insert(pe.clone());
            }
            let sub = FieldSet::from_fields_v1(child)?;
            if !sub.is_empty() {
                out.children.insert(pe, sub);
            }
        }
        Ok(out)
    }
}

/// Moves `more` into `members`: one element at a time when `more` is small
/// next to `members` (a few tree insertions), else by merging the two sorted
/// sets in one pass (linear in both).
fn join_members(members: &mut BTreeSet<PathElement>, more: &mut BTreeSet<PathElement>) {
    if more.len().saturating_mul(16) < members.len() {
        members.extend(std::mem::take(more));
    } else {
        members.append(more);
    }
}

/// Top-level fields whose whole subtree a write of `subresource` never
/// owns: `status` for the main resource, `spec` for `status` (upstream's
/// reset fields, e.g. `pkg/registry/core/pod/strategy.go` `GetResetFields`).
pub(crate) fn ignored_top_level(subresource: &str) -> &'static str {
    if subresource == "status" {
        "spec"
    } else {
        "status"
    }
}

impl FieldSet {
    /// `self` without the top-level field `name` and everything under it
    /// (upstream's `RecursiveDifference` with a one-field set).
    pub(crate) fn without_top_level(mut self, name: &str) -> FieldSet {
        let pe = PathElement::field(name);
        self.members.remove(&pe);
        self.children.remove(&pe);
        self
    }
}

/// The fields upstream's `stripMetaManager` never records as owned:
/// `apiVersion`, `kind`, the `metadata` node itself and its server-set or
/// identifying fields.
pub(crate) fn stripped_fields() -> FieldSet {
    let mut s = FieldSet::new();
    s.insert(&[PathElement::field("apiVersion")]);
    s.insert(&[PathElement::field("kind")]);
    s.insert(&[PathElement::field("metadata")]);
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[PathElement::field("metadata"), PathElement::field(f)]);
    }
    s
}
