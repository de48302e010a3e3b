//! Which resources refer to a ConfigMap or a PersistentVolumeClaim, kept as the resources'
//! store takes them: an event of such an object finds the resources it concerns by its name,
//! at a cost that does not grow with the number of resources cached.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use super::cached::CachedDeployment;
use super::merged::Index;

/// A kind of object a resource refers to by name, within its namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Referred {
    /// A ConfigMap: `spec.acceptance.promptsFrom`, or one its engines read.
    ConfigMap,
    /// The checkpoint's PersistentVolumeClaim.
    Claim,
}

/// (kind, namespace, name) of a referred object.
type Target = (Referred, Box<str>, Box<str>);

#[derive(Default)]
struct Inner {
    /// The resources (by name) that refer to each object.
    referrers: HashMap<Target, BTreeSet<Box<str>>>,
    /// The objects each resource (namespace, name) refers to, to forget them when it changes.
    referred: HashMap<(Box<str>, Box<str>), Vec<Target>>,
}

/// The index, shared by the store's feeder (which writes it) and the watches (which read it).
#[derive(Clone, Default)]
pub struct Referrers(Arc<RwLock<Inner>>);

impl Referrers {
    /// The names of the resources of `namespace` that refer to the object `kind`/`name`.
    pub fn of(&self, kind: Referred, namespace: &str, name: &str) -> Vec<String> {
        let inner = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let target: Target = (kind, namespace.into(), name.into());
        inner
            .referrers
            .get(&target)
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }

    fn forget(inner: &mut Inner, key: &(Box<str>, Box<str>)) {
        for target in inner.referred.remove(key).unwrap_or_default() {
            if let Some(names) = inner.referrers.get_mut(&target) {
                names.remove(&key.1);
                if names.is_empty() {
                    inner.referrers.remove(&target);
                }
            }
        }
    }
}

/// The objects `d` refers to.
fn targets(d: &CachedDeployment, namespace: &str) -> Vec<Target> {
    let config_maps = d
        .prompts_from
        .iter()
        .map(String::as_str)
        .chain(d.engine_config_maps.iter().map(|n| &**n))
        .map(|name| (Referred::ConfigMap, namespace.into(), name.into()));
    let claims = d
        .checkpoint_claim
        .iter()
        .map(|name| (Referred::Claim, namespace.into(), name.as_str().into()));
    let mut all: Vec<Target> = config_maps.chain(claims).collect();
    all.sort();
    all.dedup();
    all
}

fn key_of(d: &CachedDeployment) -> Option<(Box<str>, Box<str>)> {
    Some((
        d.metadata.namespace.as_deref()?.into(),
        d.metadata.name.as_deref()?.into(),
    ))
}

impl Index<CachedDeployment> for Referrers {
    fn applied(&mut self, d: &CachedDeployment) {
        let Some(key) = key_of(d) else { return };
        let targets = targets(d, &key.0);
        let mut inner = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Self::forget(&mut inner, &key);
        for target in &targets {
            inner
                .referrers
                .entry(target.clone())
                .or_default()
                .insert(key.1.clone());
        }
        if !targets.is_empty() {
            inner.referred.insert(key, targets);
        }
    }

    fn deleted(&mut self, d: &CachedDeployment) {
        let Some(key) = key_of(d) else { return };
        let mut inner = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Self::forget(&mut inner, &key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn did(ns: &str, name: &str, prompts: Option<&str>, claim: &str) -> CachedDeployment {
        let mut spec = serde_json::json!({
            "acceptance": {"prompts": []},
            "model": {"source": {"volume": {"claimName": claim, "path": "m"}}},
        });
        if let Some(cm) = prompts {
            spec["acceptance"]["promptsFrom"] = serde_json::json!({"name": cm, "key": "k"});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }))
        .expect("decoded")
    }

    #[test]
    fn an_object_maps_to_the_resources_of_its_namespace_that_name_it_as_they_change() {
        let mut index = Referrers::default();
        let reader = index.clone();
        index.applied(&did("a", "one", Some("prompts"), "ckpt"));
        index.applied(&did("a", "two", Some("other"), "ckpt"));
        index.applied(&did("a", "three", None, "other-claim"));
        index.applied(&did("b", "four", Some("prompts"), "ckpt"));
        assert_eq!(reader.of(Referred::ConfigMap, "a", "prompts"), ["one"]);
        assert_eq!(reader.of(Referred::ConfigMap, "b", "prompts"), ["four"]);
        assert_eq!(reader.of(Referred::Claim, "a", "ckpt"), ["one", "two"]);
        assert!(
            reader.of(Referred::ConfigMap, "a", "ckpt").is_empty(),
            "kinds apart"
        );
        assert!(reader.of(Referred::ConfigMap, "a", "unrelated").is_empty());

        // A changed resource refers to what it names now, and only that.
        index.applied(&did("a", "one", Some("other"), "ckpt"));
        assert!(reader.of(Referred::ConfigMap, "a", "prompts").is_empty());
        assert_eq!(reader.of(Referred::ConfigMap, "a", "other"), ["one", "two"]);
        // A deleted one refers to nothing.
        index.deleted(&did("a", "two", Some("other"), "ckpt"));
        assert_eq!(reader.of(Referred::ConfigMap, "a", "other"), ["one"]);
        assert_eq!(reader.of(Referred::Claim, "a", "ckpt"), ["one"]);
        index.deleted(&did("a", "one", Some("other"), "ckpt"));
        let inner = reader.0.read().expect("lock");
        assert_eq!(inner.referred.len(), 2, "nothing kept of deleted resources");
        assert_eq!(inner.referrers.len(), 3);
    }
}
