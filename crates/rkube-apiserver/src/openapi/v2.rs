//! The Swagger 2.0 document (`GET /openapi/v2`) and its gnostic protobuf
//! encoding.
//!
//! The JSON → protobuf mapping follows gnostic's compiler: known keywords go
//! to their fields, `x-*` keys become `vendor_extension` entries whose value
//! is the YAML text of the JSON value, and `default`/`example`/`enum` values
//! are carried as YAML too. Keywords Swagger 2.0 has no field for are dropped.

use prost::Message;
use serde_json::{json, Map, Value};

use super::paths::{self, Flavor, PathItem};
use super::proto;
use super::schemas::Definitions;
use super::{OpenApiError, INFO_TITLE, INFO_VERSION};

/// The Swagger 2.0 document as JSON.
pub(crate) fn document(defs: &Definitions, items: &[PathItem]) -> Value {
    let definitions: Map<String, Value> = defs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    json!({
        "swagger": "2.0",
        "info": {"title": INFO_TITLE, "version": INFO_VERSION},
        "paths": paths::render(items, Flavor::V2),
        "definitions": definitions,
    })
}

/// Encodes the Swagger document as an `openapi.v2.Document` protobuf message.
pub(crate) fn to_protobuf(doc: &Value) -> Result<Vec<u8>, OpenApiError> {
    let message = document_to_proto(doc)?;
    Ok(message.encode_to_vec())
}

fn str_of(m: &Map<String, Value>, key: &str) -> String {
    m.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn strings_of(m: &Map<String, Value>, key: &str) -> Vec<String> {
    m.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn yaml_any(v: &Value) -> Result<proto::Any, OpenApiError> {
    Ok(proto::Any { value: None, yaml: serde_yaml::to_string(v)? })
}

fn extensions(m: &Map<String, Value>) -> Result<Vec<proto::NamedAny>, OpenApiError> {
    m.iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| Ok(proto::NamedAny { name: k.clone(), value: Some(yaml_any(v)?) }))
        .collect()
}

fn document_to_proto(doc: &Value) -> Result<proto::Document, OpenApiError> {
    let m = doc.as_object().ok_or(OpenApiError::Shape("document is not an object"))?;
    let info = m.get("info").and_then(Value::as_object).map(|i| proto::Info {
        title: str_of(i, "title"),
        version: str_of(i, "version"),
        description: str_of(i, "description"),
        vendor_extension: Vec::new(),
    });
    let mut path_items = Vec::new();
    if let Some(paths) = m.get("paths").and_then(Value::as_object) {
        for (name, item) in paths {
            let item = item.as_object().ok_or(OpenApiError::Shape("path item is not an object"))?;
            path_items.push(proto::NamedPathItem { name: name.clone(), value: Some(path_item_to_proto(item)?) });
        }
    }
    let mut definitions = Vec::new();
    if let Some(defs) = m.get("definitions").and_then(Value::as_object) {
        for (name, schema) in defs {
            definitions.push(proto::NamedSchema { name: name.clone(), value: Some(schema_to_proto(schema)?) });
        }
    }
    Ok(proto::Document {
        swagger: str_of(m, "swagger"),
        info,
        host: String::new(),
        base_path: String::new(),
        schemes: strings_of(m, "schemes"),
        consumes: strings_of(m, "consumes"),
        produces: strings_of(m, "produces"),
        paths: Some(proto::Paths { vendor_extension: Vec::new(), path: path_items }),
        definitions: Some(proto::Definitions { additional_properties: definitions }),
        vendor_extension: extensions(m)?,
    })
}

fn path_item_to_proto(m: &Map<String, Value>) -> Result<proto::PathItem, OpenApiError> {
    let op = |method: &str| -> Result<Option<proto::Operation>, OpenApiError> {
        match m.get(method).and_then(Value::as_object) {
            Some(o) => Ok(Some(operation_to_proto(o)?)),
            None => Ok(None),
        }
    };
    Ok(proto::PathItem {
        r#ref: str_of(m, "$ref"),
        get: op("get")?,
        put: op("put")?,
        post: op("post")?,
        delete: op("delete")?,
        options: op("options")?,
        head: op("head")?,
        patch: op("patch")?,
        parameters: parameters_to_proto(m.get("parameters"))?,
        vendor_extension: extensions(m)?,
    })
}

fn operation_to_proto(m: &Map<String, Value>) -> Result<proto::Operation, OpenApiError> {
    let mut response_code = Vec::new();
    if let Some(responses) = m.get("responses").and_then(Value::as_object) {
        for (code, r) in responses {
            let r = r.as_object().ok_or(OpenApiError::Shape("response is not an object"))?;
            let schema = match r.get("schema") {
                Some(s) => Some(proto::SchemaItem { oneof: Some(proto::schema_item::Oneof::Schema(schema_to_proto(s)?)) }),
                None => None,
            };
            let response = proto::Response { description: str_of(r, "description"), schema, vendor_extension: extensions(r)? };
            response_code.push(proto::NamedResponseValue {
                name: code.clone(),
                value: Some(proto::ResponseValue { oneof: Some(proto::response_value::Oneof::Response(response)) }),
            });
        }
    }
    Ok(proto::Operation {
        tags: strings_of(m, "tags"),
        summary: str_of(m, "summary"),
        description: str_of(m, "description"),
        operation_id: str_of(m, "operationId"),
        produces: strings_of(m, "produces"),
        consumes: strings_of(m, "consumes"),
        parameters: parameters_to_proto(m.get("parameters"))?,
        responses: Some(proto::Responses { response_code, vendor_extension: Vec::new() }),
        schemes: strings_of(m, "schemes"),
        deprecated: m.get("deprecated").and_then(Value::as_bool).unwrap_or(false),
        vendor_extension: extensions(m)?,
    })
}

fn parameters_to_proto(params: Option<&Value>) -> Result<Vec<proto::ParametersItem>, OpenApiError> {
    let Some(params) = params.and_then(Value::as_array) else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(params.len());
    for p in params {
        let p = p.as_object().ok_or(OpenApiError::Shape("parameter is not an object"))?;
        let item = if let Some(reference) = p.get("$ref").and_then(Value::as_str) {
            proto::parameters_item::Oneof::JsonReference(proto::JsonReference {
                r#ref: reference.to_string(),
                description: str_of(p, "description"),
            })
        } else {
            proto::parameters_item::Oneof::Parameter(parameter_to_proto(p)?)
        };
        out.push(proto::ParametersItem { oneof: Some(item) });
    }
    Ok(out)
}

fn parameter_to_proto(p: &Map<String, Value>) -> Result<proto::Parameter, OpenApiError> {
    let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
    let unique_items = p.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false);
    let oneof = match p.get("in").and_then(Value::as_str) {
        Some("body") => proto::parameter::Oneof::BodyParameter(proto::BodyParameter {
            description: str_of(p, "description"),
            name: str_of(p, "name"),
            r#in: "body".into(),
            required,
            schema: match p.get("schema") {
                Some(s) => Some(schema_to_proto(s)?),
                None => None,
            },
            vendor_extension: extensions(p)?,
        }),
        Some("query") => proto::parameter::Oneof::NonBodyParameter(proto::NonBodyParameter {
            oneof: Some(proto::non_body_parameter::Oneof::QueryParameterSubSchema(proto::QueryParameterSubSchema {
                required,
                r#in: "query".into(),
                description: str_of(p, "description"),
                name: str_of(p, "name"),
                allow_empty_value: false,
                r#type: str_of(p, "type"),
                format: str_of(p, "format"),
                unique_items,
                vendor_extension: extensions(p)?,
            })),
        }),
        Some("path") => proto::parameter::Oneof::NonBodyParameter(proto::NonBodyParameter {
            oneof: Some(proto::non_body_parameter::Oneof::PathParameterSubSchema(proto::PathParameterSubSchema {
                required,
                r#in: "path".into(),
                description: str_of(p, "description"),
                name: str_of(p, "name"),
                r#type: str_of(p, "type"),
                format: str_of(p, "format"),
                unique_items,
                vendor_extension: extensions(p)?,
            })),
        }),
        _ => return Err(OpenApiError::Shape("parameter location is not body, query or path")),
    };
    Ok(proto::Parameter { oneof: Some(oneof) })
}

/// Converts one JSON schema to gnostic's `Schema` message.
pub(crate) fn schema_to_proto(v: &Value) -> Result<proto::Schema, OpenApiError> {
    let m = v.as_object().ok_or(OpenApiError::Shape("schema is not an object"))?;
    let f64_of = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let i64_of = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0);
    let bool_of = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    let any_of = |k: &str| -> Result<Option<proto::Any>, OpenApiError> {
        match m.get(k) {
            Some(v) => Ok(Some(yaml_any(v)?)),
            None => Ok(None),
        }
    };
    let r#type = match m.get("type") {
        Some(Value::String(t)) => Some(proto::TypeItem { value: vec![t.clone()] }),
        Some(Value::Array(ts)) => Some(proto::TypeItem { value: ts.iter().filter_map(Value::as_str).map(str::to_string).collect() }),
        _ => None,
    };
    let items = match m.get("items") {
        Some(Value::Array(list)) => Some(proto::ItemsItem { schema: list.iter().map(schema_to_proto).collect::<Result<_, _>>()? }),
        Some(item @ Value::Object(_)) => Some(proto::ItemsItem { schema: vec![schema_to_proto(item)?] }),
        _ => None,
    };
    let additional_properties = match m.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            Some(Box::new(proto::AdditionalPropertiesItem { oneof: Some(proto::additional_properties_item::Oneof::Boolean(*b)) }))
        }
        Some(s @ Value::Object(_)) => Some(Box::new(proto::AdditionalPropertiesItem {
            oneof: Some(proto::additional_properties_item::Oneof::Schema(Box::new(schema_to_proto(s)?))),
        })),
        _ => None,
    };
    let properties = match m.get("properties").and_then(Value::as_object) {
        Some(props) => Some(proto::Properties {
            additional_properties: props
                .iter()
                .map(|(name, s)| Ok(proto::NamedSchema { name: name.clone(), value: Some(schema_to_proto(s)?) }))
                .collect::<Result<_, OpenApiError>>()?,
        }),
        None => None,
    };
    let all_of = match m.get("allOf").and_then(Value::as_array) {
        Some(list) => list.iter().map(schema_to_proto).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let r#enum = match m.get("enum").and_then(Value::as_array) {
        Some(list) => list.iter().map(yaml_any).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok(proto::Schema {
        r#ref: str_of(m, "$ref"),
        format: str_of(m, "format"),
        title: str_of(m, "title"),
        description: str_of(m, "description"),
        default: any_of("default")?,
        multiple_of: f64_of("multipleOf"),
        maximum: f64_of("maximum"),
        exclusive_maximum: bool_of("exclusiveMaximum"),
        minimum: f64_of("minimum"),
        exclusive_minimum: bool_of("exclusiveMinimum"),
        max_length: i64_of("maxLength"),
        min_length: i64_of("minLength"),
        pattern: str_of(m, "pattern"),
        max_items: i64_of("maxItems"),
        min_items: i64_of("minItems"),
        unique_items: bool_of("uniqueItems"),
        max_properties: i64_of("maxProperties"),
        min_properties: i64_of("minProperties"),
        required: strings_of(m, "required"),
        r#enum,
        additional_properties,
        r#type,
        items,
        all_of,
        properties,
        discriminator: str_of(m, "discriminator"),
        read_only: bool_of("readOnly"),
        example: any_of("example")?,
        vendor_extension: extensions(m)?,
    })
}
