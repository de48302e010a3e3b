//! What the operator remembers of its verdicts, and how that memory is made whole again.
//!
//! `status.judgements` is the working memory, but a status can be lost (restored without it,
//! replaced by hand) or hold values this release cannot read (written by another release). Each
//! judgement is therefore also kept on the evidence ConfigMap of its run, in annotation
//! [`JUDGEMENT_ANNOTATION`], which the operator writes when it records the verdict. A pass whose
//! memory may be incomplete recalls those records before it decides anything; what stays unknown
//! is never read as a verdict (see `entitlement`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde_json::{Map, Value};

use crate::api::{labels, AcceptanceResult, AcceptanceStatus, DeepInferDeploymentStatus};

/// Annotation of an evidence ConfigMap holding the judgement the operator recorded from its run
/// (the `status.judgements` entry, as JSON).
pub const JUDGEMENT_ANNOTATION: &str = "deepinfer.io/judgement";

/// The stored status as far as it can be read, and whether all of it could. A status that does
/// not parse as a whole is read field by field (and `judgements` entry by entry); what cannot be
/// read is left out, never guessed.
pub fn read_status(stored: Option<&Value>) -> (Option<DeepInferDeploymentStatus>, bool) {
    let Some(stored) = stored else {
        return (None, true);
    };
    if let Ok(status) = serde_json::from_value::<DeepInferDeploymentStatus>(stored.clone()) {
        return (Some(status), true);
    }
    let Some(fields) = stored.as_object() else {
        return (Some(DeepInferDeploymentStatus::default()), false);
    };
    let mut out = DeepInferDeploymentStatus::default();
    for (key, value) in fields {
        if key == "judgements" {
            let entries = value.as_array().map(Vec::as_slice).unwrap_or_default();
            out.judgements = entries
                .iter()
                .filter_map(|j| serde_json::from_value(j.clone()).ok())
                .collect();
            continue;
        }
        let one = Value::Object(Map::from_iter([(key.clone(), value.clone())]));
        if let Ok(part) = serde_json::from_value::<DeepInferDeploymentStatus>(one) {
            merge_field(&mut out, part, key);
        }
    }
    (Some(out), false)
}

/// Copies the field `key` of `part` into `into`.
fn merge_field(into: &mut DeepInferDeploymentStatus, part: DeepInferDeploymentStatus, key: &str) {
    match key {
        "observedGeneration" => into.observed_generation = part.observed_generation,
        "phase" => into.phase = part.phase,
        "conditions" => into.conditions = part.conditions,
        "revision" => into.revision = part.revision,
        "checkpoint" => into.checkpoint = part.checkpoint,
        "roles" => into.roles = part.roles,
        "acceptance" => into.acceptance = part.acceptance,
        "license" => into.license = part.license,
        _ => {}
    }
}

/// Whether the pass must recall the recorded judgements before deciding: the status was not
/// read whole, a judgement's result is unknown, or a worker pod's revision has no judgement
/// (every revision with pods keeps its judgement in status, so that means a lost status).
pub fn needs_recall(known: &DeepInferDeploymentStatus, whole: bool, workers: &[Pod]) -> bool {
    if !whole {
        return true;
    }
    if known
        .judgements
        .iter()
        .chain(known.acceptance.iter())
        .any(|j| j.result == AcceptanceResult::Unknown)
    {
        return true;
    }
    workers
        .iter()
        .filter_map(|p| p.labels().get(labels::REVISION))
        .any(|rev| known.latest_judgement(rev).is_none())
}

/// The judgements recorded on evidence ConfigMaps (their metadata), newest first; records that
/// do not parse, or that judge a result this release does not know, are left out.
pub fn recalled(evidence: &[ObjectMeta]) -> Vec<AcceptanceStatus> {
    let mut found: Vec<(&ObjectMeta, AcceptanceStatus)> = evidence
        .iter()
        .filter(|m| m.deletion_timestamp.is_none())
        .filter_map(|m| {
            let text = m.annotations.as_ref()?.get(JUDGEMENT_ANNOTATION)?;
            let j: AcceptanceStatus = serde_json::from_str(text).ok()?;
            (j.result != AcceptanceResult::Unknown).then_some((m, j))
        })
        .collect();
    found.sort_by(|(a, _), (b, _)| {
        let key = |m: &ObjectMeta| (m.creation_timestamp.clone().map(|t| t.0), m.name.clone());
        key(b).cmp(&key(a))
    });
    found.into_iter().map(|(_, j)| j).collect()
}

/// Of `judgements`, those whose proof verifies for the deployment `uid`, and how many did not.
pub fn proved(
    judgements: Vec<AcceptanceStatus>,
    key: &crate::controller::proof::VerdictKey,
    uid: &str,
) -> (Vec<AcceptanceStatus>, usize) {
    let all = judgements.len();
    let kept: Vec<AcceptanceStatus> = judgements
        .into_iter()
        .filter(|j| key.verifies(uid, j))
        .collect();
    let unproved = all - kept.len();
    (kept, unproved)
}

/// `known` made whole with `recalled`: an entry whose result is unknown is replaced by the
/// record of the same run, and records of runs `known` lacks follow its entries, newest first.
pub fn merge(known: &[AcceptanceStatus], recalled: Vec<AcceptanceStatus>) -> Vec<AcceptanceStatus> {
    let key = |j: &AcceptanceStatus| {
        (
            j.revision.clone(),
            j.spec_hash.clone().unwrap_or_default(),
            j.rerun_token.clone().unwrap_or_default(),
        )
    };
    let mut used = BTreeSet::new();
    let mut out: Vec<AcceptanceStatus> = known
        .iter()
        .map(|j| {
            if j.result != AcceptanceResult::Unknown {
                return j.clone();
            }
            match recalled.iter().find(|r| key(r) == key(j)) {
                Some(r) => {
                    used.insert(key(r));
                    r.clone()
                }
                None => j.clone(),
            }
        })
        .collect();
    let present: BTreeSet<_> = out.iter().map(key).collect();
    for r in recalled {
        let k = key(&r);
        if !present.contains(&k) && !used.contains(&k) {
            out.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn judgement(revision: &str, result: &str) -> Value {
        json!({"revision": revision, "result": result, "prompts": 4, "passed": 4,
               "specHash": "h", "evidence": format!("e-{revision}")})
    }

    #[test]
    fn a_status_is_read_whole_when_it_parses() {
        let stored = json!({"phase": "Ready", "judgements": [judgement("r1", "Passed")]});
        let (status, whole) = read_status(Some(&stored));
        assert!(whole);
        assert_eq!(status.expect("status").judgements.len(), 1);
        assert_eq!(read_status(None), (None, true));
    }

    #[test]
    fn unknown_values_are_kept_as_unknown_and_the_rest_is_read() {
        let stored = json!({"phase": "Draining", "revision": "r1",
                            "judgements": [judgement("r1", "PassedWithWarnings")]});
        let (status, whole) = read_status(Some(&stored));
        assert!(whole, "open enums parse");
        let status = status.expect("status");
        assert_eq!(status.phase, Some(crate::api::Phase::Unknown));
        assert_eq!(status.judgements[0].result, AcceptanceResult::Unknown);
        assert!(needs_recall(&status, whole, &[]));
    }

    #[test]
    fn a_status_that_does_not_parse_is_read_field_by_field() {
        let stored = json!({"revision": "r1", "checkpoint": "not an object",
                            "judgements": [judgement("r1", "Passed"), {"revision": 7}]});
        let (status, whole) = read_status(Some(&stored));
        assert!(!whole);
        let status = status.expect("status");
        assert_eq!(status.revision.as_deref(), Some("r1"));
        assert_eq!(status.checkpoint, None);
        assert_eq!(status.judgements.len(), 1, "the entry that parses is kept");
        assert!(needs_recall(&status, whole, &[]));
    }

    fn worker(revision: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p",
            "labels": {labels::REVISION: revision}}}))
        .expect("pod")
    }

    #[test]
    fn a_pod_whose_revision_has_no_judgement_means_a_lost_memory() {
        let (status, whole) = read_status(Some(&json!({})));
        let status = status.expect("status");
        assert!(!needs_recall(&status, whole, &[]), "nothing to recall");
        assert!(needs_recall(&status, whole, &[worker("r1")]));
        let (status, _) = read_status(Some(&json!({"judgements": [judgement("r1", "Passed")]})));
        assert!(!needs_recall(
            &status.expect("status"),
            true,
            &[worker("r1")]
        ));
    }

    fn evidence(name: &str, created: &str, record: Option<Value>) -> ObjectMeta {
        let mut meta: ObjectMeta =
            serde_json::from_value(json!({"name": name, "creationTimestamp": created}))
                .expect("meta");
        if let Some(r) = record {
            meta.annotations = Some(std::collections::BTreeMap::from([(
                JUDGEMENT_ANNOTATION.to_string(),
                r.to_string(),
            )]));
        }
        meta
    }

    #[test]
    fn recorded_judgements_are_recalled_newest_first_and_fill_what_is_missing() {
        let metas = [
            evidence(
                "e-r1",
                "2026-01-01T00:00:00Z",
                Some(judgement("r1", "Passed")),
            ),
            evidence(
                "e-r2",
                "2026-01-02T00:00:00Z",
                Some(judgement("r2", "Failed")),
            ),
            evidence("e-none", "2026-01-03T00:00:00Z", None),
            evidence("e-bad", "2026-01-04T00:00:00Z", Some(json!("garbage"))),
        ];
        let recalled = recalled(&metas);
        assert_eq!(
            recalled
                .iter()
                .map(|j| j.revision.as_str())
                .collect::<Vec<_>>(),
            ["r2", "r1"]
        );
        let unknown: AcceptanceStatus =
            serde_json::from_value(judgement("r1", "Sideways")).expect("judgement");
        let merged = merge(&[unknown], recalled);
        assert_eq!(
            merged
                .iter()
                .map(|j| (j.revision.as_str(), j.result))
                .collect::<Vec<_>>(),
            [
                ("r1", AcceptanceResult::Passed),
                ("r2", AcceptanceResult::Failed)
            ],
            "the unknown entry is replaced in place; the missing one follows"
        );
    }
}
