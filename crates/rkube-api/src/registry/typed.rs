//! The `k8s-openapi` type behind a built-in row: decoding a JSON object as
//! that type (what kube-apiserver's typed decoder does: type errors, unknown
//! fields) and the OpenAPI schema published for it.

use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Hooks into one `k8s-openapi` resource type, as plain function pointers so
/// rows stay `const`.
#[derive(Clone, Copy)]
pub struct TypedKind {
    /// Decodes a JSON object as the type and encodes it back: the result holds
    /// exactly the fields the type knows (`Err` = the type's decoding error).
    pub roundtrip: fn(&Value) -> Result<Value, String>,
    /// Registers the type's schema (and what it references) with a generator.
    pub add_schema: fn(&mut SchemaGenerator),
    /// The OpenAPI definition name, e.g. `io.k8s.api.core.v1.Pod`.
    pub definition: fn() -> String,
    /// `(apiVersion, kind, plural, namespaced)` as `k8s-openapi` declares them
    /// (its `Resource` trait), to check rows against.
    pub resource: fn() -> (&'static str, &'static str, &'static str, bool),
}

impl std::fmt::Debug for TypedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TypedKind").field(&(self.definition)()).finish()
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<Value, String> {
    let typed = T::deserialize(obj).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

fn add_schema<T: JsonSchema>(generator: &mut SchemaGenerator) {
    // Only the side effect (the definitions it registers) is wanted.
    let _reference = generator.subschema_for::<T>();
}

fn definition<T: JsonSchema>() -> String {
    T::schema_name().into_owned()
}

fn resource<T>() -> (&'static str, &'static str, &'static str, bool)
where
    T: k8s_openapi::Resource,
    T::Scope: 'static,
{
    let namespaced = std::any::TypeId::of::<T::Scope>() == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>();
    (T::API_VERSION, T::KIND, T::URL_PATH_SEGMENT, namespaced)
}

/// The hooks of `T`.
pub const fn typed<T>() -> TypedKind
where
    T: k8s_openapi::Resource + DeserializeOwned + Serialize + JsonSchema + 'static,
    T::Scope: 'static,
{
    TypedKind {
        roundtrip: roundtrip::<T>,
        add_schema: add_schema::<T>,
        definition: definition::<T>,
        resource: resource::<T>,
    }
}

/// The hooks of a type that is not a resource of its own (`Binding`, `Scale`,
/// `Eviction`): decoding and schema only.
#[derive(Clone, Copy)]
pub struct TypedBody {
    /// As [`TypedKind::roundtrip`].
    pub roundtrip: fn(&Value) -> Result<Value, String>,
    /// As [`TypedKind::add_schema`].
    pub add_schema: fn(&mut SchemaGenerator),
    /// As [`TypedKind::definition`].
    pub definition: fn() -> String,
}

/// The hooks of a body type `T`.
pub const fn body<T>() -> TypedBody
where
    T: DeserializeOwned + Serialize + JsonSchema,
{
    TypedBody { roundtrip: roundtrip::<T>, add_schema: add_schema::<T>, definition: definition::<T> }
}
