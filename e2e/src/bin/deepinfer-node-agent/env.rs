//! Pure resolution of a container's environment, downward-API fields and `$(VAR)` references,
//! following the kubelet's rules.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::{Container, Pod};

/// ConfigMaps and Secrets of the pod's namespace, fetched beforehand; `None` means not found.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    pub config_maps: HashMap<String, Option<BTreeMap<String, String>>>,
    pub secrets: HashMap<String, Option<BTreeMap<String, String>>>,
}

/// Names of the ConfigMaps and Secrets a container's environment refers to.
pub fn referenced_objects(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut config_maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for from in c.env_from.iter().flatten() {
        if let Some(r) = &from.config_map_ref {
            config_maps.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_ref {
            secrets.insert(r.name.clone());
        }
    }
    for var in c.env.iter().flatten() {
        let Some(from) = &var.value_from else {
            continue;
        };
        if let Some(r) = &from.config_map_key_ref {
            config_maps.insert(r.name.clone());
        }
        if let Some(r) = &from.secret_key_ref {
            secrets.insert(r.name.clone());
        }
    }
    (config_maps, secrets)
}

/// The value of a downward-API `fieldPath` for this pod.
pub fn field_value(pod: &Pod, field_path: &str, pod_ip: &str) -> Result<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_entry = |map: Option<&BTreeMap<String, String>>, prefix: &str| {
        let key = field_path
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    let value = match field_path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".into(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        other => map_entry(meta.labels.as_ref(), "metadata.labels")
            .or_else(|| map_entry(meta.annotations.as_ref(), "metadata.annotations"))
            .ok_or_else(|| anyhow!("unsupported fieldPath {other:?}"))?,
    };
    Ok(value)
}

/// The downward-API file format of a label or annotation map: `key="value"` lines, sorted.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}\n"))
        .collect()
}

/// Expands `$(NAME)` references to defined variables; `$$` escapes a `$`; undefined references
/// stay as written (the kubelet's rule).
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(close) = after.strip_prefix('(').and_then(|a| a.find(')')) {
            let name = &after[1..=close];
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &after[close + 2..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn lookup<'a>(
    kind: &str,
    objects: &'a HashMap<String, Option<BTreeMap<String, String>>>,
    name: &str,
    optional: bool,
) -> Result<Option<&'a BTreeMap<String, String>>> {
    match objects.get(name).and_then(Option::as_ref) {
        Some(data) => Ok(Some(data)),
        None if optional => Ok(None),
        None => bail!("{kind} {name:?} not found"),
    }
}

#[derive(Default)]
struct EnvBuilder {
    vars: Vec<(String, String)>,
    defined: HashMap<String, String>,
}

impl EnvBuilder {
    /// A later definition replaces an earlier one and takes its place at the end.
    fn define(&mut self, name: String, value: String) {
        self.vars.retain(|(n, _)| *n != name);
        self.vars.push((name.clone(), value.clone()));
        self.defined.insert(name, value);
    }
}

/// The container's environment in definition order (`envFrom` first, then `env`), with
/// `$(VAR)` references in `env` values expanded against the variables defined before them.
pub fn resolve_env(
    c: &Container,
    pod: &Pod,
    pod_ip: &str,
    objects: &Objects,
) -> Result<Vec<(String, String)>> {
    let mut env = EnvBuilder::default();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            lookup(
                "ConfigMap",
                &objects.config_maps,
                &r.name,
                r.optional.unwrap_or(false),
            )?
        } else if let Some(r) = &from.secret_ref {
            lookup(
                "Secret",
                &objects.secrets,
                &r.name,
                r.optional.unwrap_or(false),
            )?
        } else {
            None
        };
        for (k, v) in data.into_iter().flatten() {
            env.define(format!("{prefix}{k}"), v.clone());
        }
    }
    for var in c.env.iter().flatten() {
        let value = match &var.value_from {
            None => expand(var.value.as_deref().unwrap_or_default(), &env.defined),
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path, pod_ip)?
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    match lookup("ConfigMap", &objects.config_maps, &r.name, optional)?
                        .and_then(|d| d.get(&r.key))
                    {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => bail!("key {:?} not found in ConfigMap {:?}", r.key, r.name),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    match lookup("Secret", &objects.secrets, &r.name, optional)?
                        .and_then(|d| d.get(&r.key))
                    {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => bail!("key {:?} not found in Secret {:?}", r.key, r.name),
                    }
                } else if let Some(r) = &from.resource_field_ref {
                    resource_value(c, &r.resource)?
                } else {
                    bail!("env {}: unsupported valueFrom", var.name)
                }
            }
        };
        env.define(var.name.clone(), value);
    }
    Ok(env.vars)
}

/// `limits.X` / `requests.X` as written in the container's resources (no divisor applied).
fn resource_value(c: &Container, resource: &str) -> Result<String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| anyhow!("unsupported resourceFieldRef {resource:?}"))?;
    let resources = c.resources.as_ref();
    let map = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => bail!("unsupported resourceFieldRef {resource:?}"),
    };
    Ok(map
        .and_then(|m| m.get(name))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "0".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                         "labels": {"app": "x", "b": "y"}, "annotations": {"a/b": "c"}},
            "spec": {"nodeName": "nvidia-0", "serviceAccountName": "runner", "containers": []}
        }))
        .unwrap()
    }

    fn objects() -> Objects {
        Objects {
            config_maps: HashMap::from([
                (
                    "cm".into(),
                    Some(BTreeMap::from([
                        ("K".into(), "cv".into()),
                        ("L".into(), "lv".into()),
                    ])),
                ),
                ("gone".into(), None),
            ]),
            secrets: HashMap::from([(
                "s".into(),
                Some(BTreeMap::from([("tok".into(), "sv".into())])),
            )]),
        }
    }

    fn container(env: serde_json::Value) -> Container {
        serde_json::from_value(
            json!({"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}),
        )
        .map(|mut c: Container| {
            let extra: Container = serde_json::from_value(env).unwrap();
            c.env = extra.env;
            c.env_from = extra.env_from;
            c
        })
        .unwrap()
    }

    #[test]
    fn fields_resolve_like_the_downward_api() {
        let p = pod();
        assert_eq!(field_value(&p, "metadata.name", "ip").unwrap(), "p");
        assert_eq!(field_value(&p, "metadata.uid", "ip").unwrap(), "u-1");
        assert_eq!(
            field_value(&p, "metadata.labels['app']", "ip").unwrap(),
            "x"
        );
        assert_eq!(
            field_value(&p, "metadata.annotations['a/b']", "ip").unwrap(),
            "c"
        );
        assert_eq!(
            field_value(&p, "metadata.labels", "ip").unwrap(),
            "app=\"x\"\nb=\"y\"\n"
        );
        assert_eq!(
            field_value(&p, "status.podIP", "10.244.0.9").unwrap(),
            "10.244.0.9"
        );
        assert_eq!(
            field_value(&p, "spec.serviceAccountName", "").unwrap(),
            "runner"
        );
        assert!(field_value(&p, "spec.bogus", "").is_err());
    }

    #[test]
    fn expansion_follows_kubelet_rules() {
        let vars = HashMap::from([("A".to_string(), "1".to_string())]);
        assert_eq!(expand("x$(A)y", &vars), "x1y");
        assert_eq!(expand("$(B)", &vars), "$(B)");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("cost $5", &vars), "cost $5");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("tail$", &vars), "tail$");
    }

    #[test]
    fn env_is_resolved_in_order() {
        let c = container(json!({"name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "REF", "value": "$(POD)-$(CM_K)-$(LATER)"},
            {"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "s", "key": "tok"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x", "optional": true}}},
            {"name": "GPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}},
            {"name": "CM_L", "value": "override"},
            {"name": "LATER", "value": "l"},
        ]}));
        let env = resolve_env(&c, &pod(), "10.244.0.2", &objects()).unwrap();
        let got: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            got,
            [
                ("CM_K", "cv"),
                ("POD", "p"),
                ("IP", "10.244.0.2"),
                ("REF", "p-cv-$(LATER)"),
                ("TOK", "sv"),
                ("GPUS", "8"),
                ("CM_L", "override"),
                ("LATER", "l"),
            ]
        );
        let (cms, secrets) = referenced_objects(&c);
        assert_eq!(cms.into_iter().collect::<Vec<_>>(), ["cm", "gone"]);
        assert_eq!(secrets.into_iter().collect::<Vec<_>>(), ["s"]);
    }

    #[test]
    fn missing_required_references_are_errors() {
        let missing_cm = container(json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x"}}}]}));
        assert!(resolve_env(&missing_cm, &pod(), "", &objects()).is_err());
        let missing_key = container(json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope"}}}]}));
        assert!(resolve_env(&missing_key, &pod(), "", &objects()).is_err());
    }
}
