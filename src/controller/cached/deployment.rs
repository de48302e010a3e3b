//! The cached `DeepInferDeployment`: its spec kept as compressed text.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::meta::*;

/// JSON text as a cache keeps it, compressed with DEFLATE: the spec and status of a resource
/// (and the spec a revision keeps) are read once per pass, and take a third of their text so.
#[derive(Clone, Debug, Default)]
pub(crate) struct Deflated(Box<[u8]>);

impl Deflated {
    pub(crate) fn of(text: &str) -> Self {
        Self(miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 6).into_boxed_slice())
    }

    /// The text back.
    pub(crate) fn text(&self) -> Result<Vec<u8>, serde_json::Error> {
        miniz_oxide::inflate::decompress_to_vec(&self.0).map_err(|e| {
            <serde_json::Error as serde::de::Error>::custom(format!("a cached text: {e}"))
        })
    }
}

/// The names under `configMapKeyRef` and `configMap` keys anywhere in `spec` (engine variables,
/// volumes, projected sources), each once.
pub(crate) fn config_maps_named(spec: &Value) -> Box<[Box<str>]> {
    fn walk(v: &Value, out: &mut Vec<Box<str>>) {
        match v {
            Value::Object(map) => {
                for (key, value) in map {
                    if key == "configMapKeyRef" || key == "configMap" {
                        if let Some(name) = value.get("name").and_then(Value::as_str) {
                            if !out.iter().any(|n| &**n == name) {
                                out.push(name.into());
                            }
                        }
                    }
                    walk(value, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(spec, &mut out);
    out.into_boxed_slice()
}

/// A `DeepInferDeployment` as the controller's cache keeps it: its metadata (without
/// `managedFields` and the last-applied annotation; its labels and annotations are kept with the
/// rest, below), the ConfigMap its `spec.acceptance.promptsFrom` names and its checkpoint's
/// PersistentVolumeClaim (the ConfigMap and claim watches map events through them), and every
/// other field of the object as JSON text, parsed by the pass that reads it. Any JSON is kept: a
/// resource that does not match the schema is cached too, and its pass reports the field.
#[derive(Clone, Debug, Default)]
pub struct CachedDeployment {
    /// The object's metadata without `managedFields`, labels and annotations: what the
    /// controller's queue and store read.
    pub metadata: ObjectMeta,
    /// `spec.acceptance.promptsFrom.name`, when set.
    pub prompts_from: Option<String>,
    /// The ConfigMaps engine containers read (`configMapKeyRef` of an engine variable,
    /// `configMap` volumes and projected sources): their content is part of the revision, so a
    /// change to one starts a pass.
    pub engine_config_maps: Box<[Box<str>]>,
    /// The checkpoint's PersistentVolumeClaim (`spec.model.source.hub.claimName`, else
    /// `spec.model.source.volume.claimName`), when set.
    pub checkpoint_claim: Option<String>,
    /// The object's fields but `apiVersion`, `kind` and `metadata`, and the labels and
    /// annotations (but the last-applied one) as `metadata`, as one JSON object's text: a
    /// label or annotation map takes a 640-byte node however few its entries.
    pub(crate) body: Deflated,
}

impl CachedDeployment {
    /// The cached form of the object `fields` (its `apiVersion`, `kind`, `metadata`, `spec`,
    /// `status`, ...).
    fn from_fields(mut metadata: ObjectMeta, mut fields: Map<String, Value>) -> Self {
        fields.remove("apiVersion");
        fields.remove("kind");
        trim_meta(&mut metadata);
        let spec_str = |pointer: &str| {
            fields
                .get("spec")
                .and_then(|s| s.pointer(pointer))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let prompts_from = spec_str("/acceptance/promptsFrom/name");
        let engine_config_maps = fields
            .get("spec")
            .map(config_maps_named)
            .unwrap_or_default();
        let checkpoint_claim = spec_str("/model/source/hub/claimName")
            .or_else(|| spec_str("/model/source/volume/claimName"));
        let mut marks = Map::new();
        for (key, map) in [
            ("labels", metadata.labels.take()),
            ("annotations", metadata.annotations.take()),
        ] {
            if let Some(map) = map {
                marks.insert(
                    key.into(),
                    Value::Object(
                        map.into_iter()
                            .map(|(k, v)| (k, Value::String(v)))
                            .collect(),
                    ),
                );
            }
        }
        if !marks.is_empty() {
            fields.insert("metadata".into(), Value::Object(marks));
        }
        Self {
            metadata,
            prompts_from,
            engine_config_maps,
            checkpoint_claim,
            body: Deflated::of(&Value::Object(fields).to_string()),
        }
    }

    /// Whether the resource refers to the ConfigMap `name` (its prompts, or one its engines read).
    pub fn refers_to_config_map(&self, name: &str) -> bool {
        self.prompts_from.as_deref() == Some(name)
            || self.engine_config_maps.iter().any(|n| &**n == name)
    }

    /// The whole object as JSON, with `apiVersion` and `kind` of `ar`.
    pub fn to_value(&self, ar: &ApiResource) -> Result<Value, serde_json::Error> {
        let mut fields: Map<String, Value> = serde_json::from_slice(&self.body.text()?)?;
        let marks = fields.remove("metadata");
        let mut metadata = serde_json::to_value(&self.metadata)?;
        if let (Some(Value::Object(marks)), Value::Object(metadata)) = (marks, &mut metadata) {
            metadata.extend(marks);
        }
        fields.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        fields.insert("kind".into(), Value::String(ar.kind.clone()));
        fields.insert("metadata".into(), metadata);
        Ok(Value::Object(fields))
    }
}

impl<'de> Deserialize<'de> for CachedDeployment {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(flatten)]
            fields: Map<String, Value>,
        }
        let wire = Wire::deserialize(deserializer)?;
        Ok(Self::from_fields(wire.metadata, wire.fields))
    }
}

impl kube::Resource for CachedDeployment {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.kind)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.group)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.version)
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.api_version)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
