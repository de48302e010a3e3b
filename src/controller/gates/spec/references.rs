//! Objects a deployment names that the operator hands on to a workload, and where a token may go.
//!
//! The operator acts for whoever may edit a `DeepInferDeployment`, and that user need not be able
//! to read Secrets or ConfigMaps. So it hands on only what opted in:
//! - the hub token Secret (`spec.model.source.hub.tokenSecretName`), which the fetch Job sends as
//!   a Bearer header to the hub endpoint, only when labelled [`HUB_TOKEN_LABEL`]`: "true"` and not
//!   a ServiceAccount token Secret; and the endpoint only when it is on the operator's allow-list
//!   (`--allowed-hub-endpoints`), whether or not a token goes with it;
//! - a Secret or ConfigMap that engine containers read (`runtime.env[].valueFrom`,
//!   `runtime.roles[].env[].valueFrom`, `secret`, `configMap` and `projected` volumes of
//!   `pod.volumes`, and the prompts of `acceptance.promptsFrom`, which the engine image gets),
//!   only when labelled [`ENGINE_READABLE_LABEL`]`: "true"`; a projected
//!   `serviceAccountToken` source is refused outright (it would hand the engine image an API token
//!   of the pod's ServiceAccount, which the spec names).
//!
//! Only metadata is read (labels and annotations); nothing here calls the API.

use std::collections::BTreeMap;

use http::Uri;
use k8s_openapi::api::core::v1::{EnvVar, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{DeepInferDeploymentSpec, Reason};
use crate::controller::status::Gate;

/// Label a Secret carries, with value `"true"`, to be usable as a hub token.
pub const HUB_TOKEN_LABEL: &str = "deepinfer.io/hub-token";
/// Label a Secret or ConfigMap carries, with value `"true"`, to be readable by engine containers.
pub const ENGINE_READABLE_LABEL: &str = "deepinfer.io/engine-readable";
/// Annotation every Secret of type `kubernetes.io/service-account-token` must carry (the API
/// server refuses one without it): it marks such a Secret in a metadata-only read.
pub const SERVICE_ACCOUNT_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// The field of the prompts ConfigMap: a missing one is the acceptance gate's
/// `MissingDependency`, not a refusal here.
const PROMPTS_FROM_FIELD: &str = "spec.acceptance.promptsFrom";
/// Default of `--allowed-hub-endpoints`: the public hub.
pub const DEFAULT_HUB_ENDPOINT: &str = crate::checkpoint::fetch::DEFAULT_ENDPOINT;

/// The kind of a referenced object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
}

impl Kind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Secret => "Secret",
            Self::ConfigMap => "ConfigMap",
        }
    }
}

/// One object of the deployment's namespace named by a field of the spec.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    /// Secret or ConfigMap.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// The field of the spec that names it, e.g. `spec.runtime.env[HF_HOME].valueFrom`.
    pub field: String,
}

/// The Secrets and ConfigMaps serving engines read (the prompts ConfigMap is the judge's input,
/// part of the acceptance spec hash instead), as (kind, name, uid, resourceVersion) from what
/// observe found, sorted: part of the revision, so that content changed after a run is judged
/// again before a pod started later reads it.
pub fn served_content(
    spec: &DeepInferDeploymentSpec,
    seen: &Seen,
) -> Vec<(String, String, String, String)> {
    let mut out: Vec<(String, String, String, String)> = engine_references(spec)
        .into_iter()
        .filter(|r| r.field != PROMPTS_FROM_FIELD)
        .filter_map(|r| {
            let meta = seen.get(&(r.kind, r.name.clone()))?.as_ref()?;
            Some((
                r.kind.as_str().to_string(),
                r.name,
                meta.uid.clone().unwrap_or_default(),
                meta.resource_version.clone().unwrap_or_default(),
            ))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What observe found of each referenced object, by kind and name: its metadata, or `None` when
/// it does not exist.
pub type Seen = BTreeMap<(Kind, String), Option<ObjectMeta>>;

/// The hub token Secret the spec names, if any.
pub fn hub_token_reference(spec: &DeepInferDeploymentSpec) -> Option<Reference> {
    let hub = spec.model.source.hub.as_ref()?;
    hub.token_secret_name.as_ref().map(|name| Reference {
        kind: Kind::Secret,
        name: name.clone(),
        field: "spec.model.source.hub.tokenSecretName".into(),
    })
}

/// Every Secret and ConfigMap engine containers would read, with the field naming it (a name
/// named by several fields appears once per field).
pub fn engine_references(spec: &DeepInferDeploymentSpec) -> Vec<Reference> {
    let mut refs = Vec::new();
    if let Some(from) = &spec.acceptance.prompts_from {
        refs.push(Reference {
            kind: Kind::ConfigMap,
            name: from.name.clone(),
            field: PROMPTS_FROM_FIELD.into(),
        });
    }
    env_references(&spec.runtime.env, "spec.runtime.env", &mut refs);
    for (i, role) in spec.runtime.roles.iter().enumerate() {
        env_references(
            &role.env,
            &format!("spec.runtime.roles[{i}].env"),
            &mut refs,
        );
    }
    if let Some(volumes) = spec.pod.as_ref().and_then(|p| p.volumes.as_ref()) {
        volume_references(volumes, "spec.pod.volumes", &mut refs);
    }
    for (i, role) in spec.roles.iter().enumerate() {
        if let Some(volumes) = role.pod.as_ref().and_then(|p| p.volumes.as_ref()) {
            volume_references(volumes, &format!("spec.roles[{i}].pod.volumes"), &mut refs);
        }
    }
    refs
}

fn env_references(env: &[EnvVar], at: &str, refs: &mut Vec<Reference>) {
    for var in env {
        let Some(from) = &var.value_from else {
            continue;
        };
        let field = format!("{at}[{}].valueFrom", var.name);
        if let Some(s) = &from.secret_key_ref {
            refs.push(Reference {
                kind: Kind::Secret,
                name: s.name.clone(),
                field: format!("{field}.secretKeyRef"),
            });
        }
        if let Some(c) = &from.config_map_key_ref {
            refs.push(Reference {
                kind: Kind::ConfigMap,
                name: c.name.clone(),
                field: format!("{field}.configMapKeyRef"),
            });
        }
    }
}

fn volume_references(volumes: &[Volume], at: &str, refs: &mut Vec<Reference>) {
    for v in volumes {
        let field = format!("{at}[{}]", v.name);
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            refs.push(Reference {
                kind: Kind::Secret,
                name,
                field: format!("{field}.secret"),
            });
        }
        if let Some(c) = &v.config_map {
            refs.push(Reference {
                kind: Kind::ConfigMap,
                name: c.name.clone(),
                field: format!("{field}.configMap"),
            });
        }
        let sources = v.projected.as_ref().and_then(|p| p.sources.as_ref());
        for (j, source) in sources.into_iter().flatten().enumerate() {
            if let Some(s) = &source.secret {
                refs.push(Reference {
                    kind: Kind::Secret,
                    name: s.name.clone(),
                    field: format!("{field}.projected.sources[{j}].secret"),
                });
            }
            if let Some(c) = &source.config_map {
                refs.push(Reference {
                    kind: Kind::ConfigMap,
                    name: c.name.clone(),
                    field: format!("{field}.projected.sources[{j}].configMap"),
                });
            }
        }
    }
}

/// Fields of the spec that would hand engine containers an API token: projected
/// `serviceAccountToken` sources of `pod.volumes`.
fn token_projections(spec: &DeepInferDeploymentSpec) -> Vec<String> {
    let mut at = vec![("spec.pod.volumes".to_string(), spec.pod.as_ref())];
    for (i, role) in spec.roles.iter().enumerate() {
        at.push((format!("spec.roles[{i}].pod.volumes"), role.pod.as_ref()));
    }
    let mut fields = Vec::new();
    for (prefix, pod) in at {
        for v in pod.and_then(|p| p.volumes.as_ref()).into_iter().flatten() {
            let sources = v.projected.as_ref().and_then(|p| p.sources.as_ref());
            for (j, source) in sources.into_iter().flatten().enumerate() {
                if source.service_account_token.is_some() {
                    fields.push(format!(
                        "{prefix}[{}].projected.sources[{j}].serviceAccountToken",
                        v.name
                    ));
                }
            }
        }
    }
    fields
}

fn labelled(meta: &ObjectMeta, label: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(label))
        .is_some_and(|v| v == "true")
}

fn service_account_token(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(SERVICE_ACCOUNT_ANNOTATION))
}

/// The spec gate's refusal when engine containers would read an object that did not opt in (or
/// be handed an API token), else `None`.
pub fn engine_gate(ns: &str, spec: &DeepInferDeploymentSpec, seen: &Seen) -> Option<Gate> {
    if let Some(field) = token_projections(spec).into_iter().next() {
        return Some(Gate::Failed(
            Reason::ReferenceNotAllowed,
            format!(
                "{field}: a projected serviceAccountToken would hand the engine image an API token of the pod's ServiceAccount; remove it (engine pods get no API token)"
            ),
        ));
    }
    let refused: Vec<String> = engine_references(spec)
        .into_iter()
        .filter_map(|r| {
            let meta = seen.get(&(r.kind, r.name.clone())).cloned().flatten();
            let why = match meta {
                None if r.field == PROMPTS_FROM_FIELD => return None,
                None => "does not exist".to_string(),
                Some(m) if r.kind == Kind::Secret && service_account_token(&m) => {
                    "is a ServiceAccount token Secret, which is never handed to an engine".into()
                }
                Some(m) if !labelled(&m, ENGINE_READABLE_LABEL) => {
                    format!("is not labelled {ENGINE_READABLE_LABEL}=true")
                }
                Some(_) => return None,
            };
            Some(format!(
                "{} {ns}/{} ({}) {why}",
                r.kind.as_str(),
                r.name,
                r.field
            ))
        })
        .collect();
    let first = refused.first()?;
    let more = match refused.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Some(Gate::Failed(
        Reason::ReferenceNotAllowed,
        crate::controller::text::truncate(
            &format!(
                "{first}{more}: engine containers read only Secrets and ConfigMaps that opted in; whoever may read it labels it `kubectl label -n {ns} <kind> <name> {ENGINE_READABLE_LABEL}=true`, or remove the reference — the operator checks again every 15 s"
            ),
            2000,
        ),
    ))
}

/// The checkpoint gate's refusal when the hub endpoint is not allowed or the token Secret did
/// not opt in, else `None`. `allowed` is `--allowed-hub-endpoints`.
pub fn hub_gate(
    ns: &str,
    spec: &DeepInferDeploymentSpec,
    allowed: &[String],
    seen: &Seen,
) -> Option<Gate> {
    let hub = spec.model.source.hub.as_ref()?;
    let endpoint = hub.endpoint.as_deref().unwrap_or(DEFAULT_HUB_ENDPOINT);
    if !endpoint_allowed(endpoint, allowed) {
        let list = if allowed.is_empty() {
            "none".to_string()
        } else {
            allowed.join(", ")
        };
        return Some(Gate::Failed(
            Reason::HubEndpointNotAllowed,
            crate::controller::text::truncate(
                &format!(
                    "spec.model.source.hub.endpoint {endpoint:?} is not on the operator's allow-list of hub endpoints (--allowed-hub-endpoints: {list}); the fetch Job would download from it and send it the hub token; use an allowed endpoint, or ask the cluster admin to add it (Helm value hub.allowedEndpoints)"
                ),
                2000,
            ),
        ));
    }
    let token = hub_token_reference(spec)?;
    let meta = seen
        .get(&(Kind::Secret, token.name.clone()))
        .cloned()
        .flatten();
    let Some(meta) = meta else {
        return Some(Gate::Failed(
            Reason::MissingDependency,
            format!(
                "Secret {ns}/{} ({}) does not exist; create it with the token under key `token` and the label {HUB_TOKEN_LABEL}=true — the operator checks again every 15 s",
                token.name, token.field
            ),
        ));
    };
    let why = if service_account_token(&meta) {
        "is a ServiceAccount token Secret, which is never sent to a hub".to_string()
    } else if !labelled(&meta, HUB_TOKEN_LABEL) {
        format!("is not labelled {HUB_TOKEN_LABEL}=true")
    } else {
        return None;
    };
    Some(Gate::Failed(
        Reason::TokenSecretNotAllowed,
        format!(
            "Secret {ns}/{} ({}) {why}: the fetch Job sends its `token` key to {endpoint}, so only a Secret made for that may be named; whoever may read it labels it `kubectl label -n {ns} secret {} {HUB_TOKEN_LABEL}=true` — the operator checks again every 15 s",
            token.name, token.field, token.name
        ),
    ))
}

/// `endpoint` in a form two spellings of one endpoint share: lower-case scheme and host, no
/// default port, no trailing `/`; `None` when it is not an http(s) URL without query.
pub fn normalized_endpoint(endpoint: &str) -> Option<String> {
    let uri: Uri = endpoint.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    if !matches!(scheme.as_str(), "http" | "https") || uri.query().is_some() {
        return None;
    }
    let authority = uri.authority()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority.host().to_ascii_lowercase();
    let port = match (scheme.as_str(), authority.port_u16()) {
        ("https", Some(443)) | ("http", Some(80)) | (_, None) => String::new(),
        (_, Some(p)) => format!(":{p}"),
    };
    let path = uri.path().trim_end_matches('/');
    Some(format!("{scheme}://{host}{port}{path}"))
}

/// Whether `endpoint` is one of `allowed` (compared as [`normalized_endpoint`]s).
pub fn endpoint_allowed(endpoint: &str, allowed: &[String]) -> bool {
    let Some(endpoint) = normalized_endpoint(endpoint) else {
        return false;
    };
    allowed
        .iter()
        .filter_map(|a| normalized_endpoint(a))
        .any(|a| a == endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DeepInferDeployment;

    fn spec(extra: serde_json::Value) -> DeepInferDeploymentSpec {
        let sample: DeepInferDeployment = serde_yaml::from_str(include_str!(
            "../../../../config/samples/nvidia-colocated.yaml"
        ))
        .expect("sample");
        let mut base = serde_json::to_value(&sample.spec).expect("json");
        base["model"]["source"] = serde_json::json!({"hub": {
            "revision": "3f1c2a9d8e7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d", "claimName": "ckpt"}});
        merge(&mut base, extra);
        serde_json::from_value(base).expect("spec")
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    fn meta(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Option<ObjectMeta> {
        let map = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        Some(ObjectMeta {
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        })
    }

    fn reason(gate: Option<Gate>) -> Option<Reason> {
        match gate? {
            Gate::Failed(r, _) => Some(r),
            _ => None,
        }
    }

    #[test]
    fn endpoints_compare_in_one_spelling_and_only_allowed_ones_pass() {
        let allowed = vec!["https://HuggingFace.co/".to_string()];
        assert!(endpoint_allowed("https://huggingface.co", &allowed));
        assert!(endpoint_allowed("https://huggingface.co:443/", &allowed));
        assert!(!endpoint_allowed("http://huggingface.co", &allowed));
        assert!(!endpoint_allowed(
            "https://huggingface.co.evil.example",
            &allowed
        ));
        assert!(!endpoint_allowed("https://user@huggingface.co", &allowed));
        assert!(!endpoint_allowed("https://huggingface.co/?x=1", &allowed));
        assert!(!endpoint_allowed("not a url", &allowed));
        assert!(!endpoint_allowed("https://huggingface.co", &[]));
        let mirror = vec!["https://mirror.internal:8443/hf".to_string()];
        assert!(endpoint_allowed(
            "https://mirror.internal:8443/hf/",
            &mirror
        ));
        assert!(!endpoint_allowed("https://mirror.internal:8443", &mirror));
    }

    #[test]
    fn the_hub_endpoint_must_be_allowed_even_without_a_token() {
        let default = vec![DEFAULT_HUB_ENDPOINT.to_string()];
        let public = spec(serde_json::json!({}));
        assert_eq!(
            reason(hub_gate("team", &public, &default, &Seen::new())),
            None
        );
        let other = spec(serde_json::json!({"model": {"source": {"hub": {
            "endpoint": "https://attacker.example"}}}}));
        assert_eq!(
            reason(hub_gate("team", &other, &default, &Seen::new())),
            Some(Reason::HubEndpointNotAllowed)
        );
        // An allow-list without the public hub refuses the default endpoint too.
        let mirror = vec!["https://mirror.internal".to_string()];
        assert_eq!(
            reason(hub_gate("team", &public, &mirror, &Seen::new())),
            Some(Reason::HubEndpointNotAllowed)
        );
    }

    #[test]
    fn a_token_secret_is_used_only_when_it_opted_in_and_is_no_service_account_token() {
        let allowed = vec![DEFAULT_HUB_ENDPOINT.to_string()];
        let s = spec(serde_json::json!({"model": {"source": {"hub": {"tokenSecretName": "tok"}}}}));
        let key = (Kind::Secret, "tok".to_string());
        let with = |m: Option<ObjectMeta>| Seen::from([(key.clone(), m)]);
        assert_eq!(
            reason(hub_gate("team", &s, &allowed, &with(None))),
            Some(Reason::MissingDependency)
        );
        assert_eq!(
            reason(hub_gate("team", &s, &allowed, &with(meta(&[], &[])))),
            Some(Reason::TokenSecretNotAllowed)
        );
        assert_eq!(
            reason(hub_gate(
                "team",
                &s,
                &allowed,
                &with(meta(&[(HUB_TOKEN_LABEL, "yes")], &[]))
            )),
            Some(Reason::TokenSecretNotAllowed)
        );
        let sa = meta(
            &[(HUB_TOKEN_LABEL, "true")],
            &[(SERVICE_ACCOUNT_ANNOTATION, "default")],
        );
        assert_eq!(
            reason(hub_gate("team", &s, &allowed, &with(sa))),
            Some(Reason::TokenSecretNotAllowed)
        );
        // The engine's label is not the hub's.
        let engine = meta(&[(ENGINE_READABLE_LABEL, "true")], &[]);
        assert_eq!(
            reason(hub_gate("team", &s, &allowed, &with(engine))),
            Some(Reason::TokenSecretNotAllowed)
        );
        let ok = meta(&[(HUB_TOKEN_LABEL, "true")], &[]);
        assert_eq!(reason(hub_gate("team", &s, &allowed, &with(ok))), None);
    }

    #[test]
    fn engine_containers_read_only_objects_that_opted_in() {
        let s = spec(serde_json::json!({
            "runtime": {"env": [
                {"name": "PLAIN", "value": "x"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
              "roles": [{"role": "worker", "env": [
                {"name": "CONF", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}}]}]},
            "pod": {"volumes": [
                {"name": "v1", "secret": {"secretName": "s2"}},
                {"name": "v2", "projected": {"sources": [{"configMap": {"name": "c2"}}]}}]}
        }));
        let refs = engine_references(&s);
        let names: Vec<(Kind, &str)> = refs.iter().map(|r| (r.kind, r.name.as_str())).collect();
        assert_eq!(
            names,
            [
                (Kind::Secret, "s1"),
                (Kind::ConfigMap, "c1"),
                (Kind::Secret, "s2"),
                (Kind::ConfigMap, "c2")
            ]
        );
        let opted = meta(&[(ENGINE_READABLE_LABEL, "true")], &[]);
        let mut seen: Seen = refs
            .iter()
            .map(|r| ((r.kind, r.name.clone()), opted.clone()))
            .collect();
        assert_eq!(reason(engine_gate("team", &s, &seen)), None);
        seen.insert((Kind::ConfigMap, "c2".into()), meta(&[], &[]));
        let Some(Gate::Failed(r, message)) = engine_gate("team", &s, &seen) else {
            panic!("refused")
        };
        assert_eq!(r, Reason::ReferenceNotAllowed);
        assert!(
            message.contains(
                "ConfigMap team/c2 (spec.pod.volumes[v2].projected.sources[0].configMap)"
            ),
            "{message}"
        );
        seen.insert((Kind::ConfigMap, "c2".into()), opted.clone());
        seen.insert(
            (Kind::Secret, "s1".into()),
            meta(
                &[(ENGINE_READABLE_LABEL, "true")],
                &[(SERVICE_ACCOUNT_ANNOTATION, "x")],
            ),
        );
        assert_eq!(
            reason(engine_gate("team", &s, &seen)),
            Some(Reason::ReferenceNotAllowed)
        );
        seen.remove(&(Kind::Secret, "s1".to_string()));
        assert_eq!(
            reason(engine_gate("team", &s, &seen)),
            Some(Reason::ReferenceNotAllowed),
            "a missing object is refused too"
        );
    }

    #[test]
    fn the_prompts_configmap_reaches_the_engine_only_once_it_opted_in() {
        let s = spec(serde_json::json!({"acceptance": {
            "promptsFrom": {"name": "team-config", "key": "prompts.yaml"}}}));
        let key = (Kind::ConfigMap, "team-config".to_string());
        // Missing: the acceptance gate says MissingDependency; nothing to refuse here.
        let missing = Seen::from([(key.clone(), None)]);
        assert_eq!(reason(engine_gate("team", &s, &missing)), None);
        let plain = Seen::from([(key.clone(), meta(&[], &[]))]);
        assert_eq!(
            reason(engine_gate("team", &s, &plain)),
            Some(Reason::ReferenceNotAllowed)
        );
        let opted = Seen::from([(key, meta(&[(ENGINE_READABLE_LABEL, "true")], &[]))]);
        assert_eq!(reason(engine_gate("team", &s, &opted)), None);
    }

    #[test]
    fn a_projected_service_account_token_is_refused() {
        let s = spec(
            serde_json::json!({"roles": [{"name": "worker", "replicas": 1, "pod": {
            "volumes": [{"name": "t", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}}]}}]}}]}),
        );
        let Some(Gate::Failed(r, message)) = engine_gate("team", &s, &Seen::new()) else {
            panic!("refused")
        };
        assert_eq!(r, Reason::ReferenceNotAllowed);
        assert!(
            message.contains("spec.roles[0].pod.volumes[t]"),
            "{message}"
        );
    }
}
