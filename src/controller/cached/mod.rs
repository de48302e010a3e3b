//! The shapes the controller's caches keep of its own resources, of every kind it owns and of
//! checkpoint claims. Each is decoded straight from the API server's lists and watch events
//! into only what a pass reads, so a cached object costs a fraction of the API type it stands
//! for (a `Pod` value is 2.4 KB before any of its strings, a `Job` 2.8 KB and each of its
//! containers 2.3 KB; a spec as a tree of JSON values takes about ten times its text; a label
//! map takes a 640-byte node however few its entries). The metadata of an owned object keeps
//! only what the passes read, without an `ObjectMeta` once stored ([`Slim`], [`Marks`]). A pass
//! turns what it reads back into the API type ([`Cached::to_api`],
//! [`CachedDeployment::to_value`]).

mod deployment;
mod kinds;
mod meta;
mod pod;

pub use deployment::*;
pub use kinds::*;
pub use meta::*;
pub use pod::*;

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    use serde_json::Value;

    use crate::api::{labels, ACCEPTED_POD_CONDITION};
    use crate::controller::build::{
        APPLIED_HASH_ANNOTATION, ASCEND_910_ANNOTATION, JUDGES_ANNOTATION,
    };

    fn object(spec: Value) -> Value {
        serde_json::json!({
            "apiVersion": "deepinfer.io/v1alpha1",
            "kind": "DeepInferDeployment",
            "metadata": {
                "name": "flash", "namespace": "team", "uid": "u-1", "generation": 3,
                "labels": {"team": "inference"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                    "deepinfer.io/license-accepted": "mit",
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": spec,
            "status": {"phase": "Ready", "observedGeneration": 3},
        })
    }

    #[test]
    fn an_owned_object_keeps_only_the_labels_annotations_and_pod_conditions_a_pass_reads() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "flash-accept-0-x", "namespace": "team", "uid": "p-1",
                "generateName": "flash-accept-0-",
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "labels": {
                    labels::DEPLOYMENT: "flash", labels::COMPONENT: "acceptance",
                    JOB_NAME_LABEL: "flash-accept-0",
                    "batch.kubernetes.io/job-name": "flash-accept-0",
                    "controller-uid": "j-1", "team": "inference",
                },
                "annotations": {
                    APPLIED_HASH_ANNOTATION: "h1", ASCEND_910_ANNOTATION: "{}",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                },
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "flash-accept-0", "uid": "j-1"}],
            },
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": ACCEPTED_POD_CONDITION, "status": "True"},
                ],
                "containerStatuses": [{"name": "engine", "ready": true, "restartCount": 0, "image": "i", "imageID": "i",
                    "state": {"running": {}}, "lastState": {}}],
            },
        }))
        .expect("decoded");
        assert_eq!(pod.label(KeptLabel::Deployment), Some("flash"));
        let back = pod.to_api();
        let keys = |m: &Option<BTreeMap<String, String>>| {
            m.iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&back.metadata.labels),
            [labels::COMPONENT, labels::DEPLOYMENT, JOB_NAME_LABEL]
        );
        assert_eq!(
            keys(&back.metadata.annotations),
            [ASCEND_910_ANNOTATION, APPLIED_HASH_ANNOTATION]
        );
        assert_eq!(back.metadata.finalizers, None);
        assert_eq!(back.metadata.generate_name, None);
        assert_eq!(back.metadata.uid.as_deref(), Some("p-1"));
        assert_eq!(back.metadata.owner_references.iter().flatten().count(), 1);
        let status = back.status.expect("status");
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, ["PodScheduled", "Ready", ACCEPTED_POD_CONDITION]);
        let engine = &status.container_statuses.expect("containers")[0];
        assert!(engine.state.as_ref().is_some_and(|s| s.running.is_some()));
        assert_eq!(engine.last_state, None, "an empty state is no state");
    }

    #[test]
    fn a_stored_object_gives_back_the_metadata_it_was_decoded_with() {
        let device = format!(
            "{{\"pod_name\":\"ränk-0\",\"devices\":\"{}\"}}",
            "0,".repeat(200)
        );
        let owners = serde_json::json!([
            {"apiVersion": "deepinfer.io/v1alpha1", "kind": "DeepInferDeployment", "name": "flash",
             "uid": "u-1", "controller": true, "blockOwnerDeletion": true},
            {"apiVersion": "example.com/v1", "kind": "Other", "name": "x", "uid": "u-2"},
        ]);
        let pod: Incoming<CachedPod> = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "flash-serve-0-1", "namespace": "team", "uid": "p-1",
                "resourceVersion": "4711", "generation": 2,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T00:05:00Z",
                "labels": {labels::DEPLOYMENT: "flash", labels::REVISION: "abc", labels::RANK: "1"},
                "annotations": {ASCEND_910_ANNOTATION: device, APPLIED_HASH_ANNOTATION: "h"},
                "ownerReferences": owners,
            },
            "spec": {"nodeName": "n-1"},
        }))
        .expect("decoded");
        let kept = pod.shape().clone();
        assert!(
            kept.slim().wire.is_none(),
            "a stored object holds no decoded copy"
        );
        assert_eq!(
            kube::Resource::meta(&pod).name.as_deref(),
            Some("flash-serve-0-1"),
            "the object on the watch carries its decoded metadata"
        );
        let meta = kept.to_api().metadata;
        assert_eq!(meta.name.as_deref(), Some("flash-serve-0-1"));
        assert_eq!(meta.namespace.as_deref(), Some("team"));
        assert_eq!(meta.uid.as_deref(), Some("p-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("4711"));
        assert_eq!(meta.generation, Some(2));
        assert_eq!(
            serde_json::to_value((&meta.creation_timestamp, &meta.deletion_timestamp))
                .expect("json"),
            serde_json::json!(["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"])
        );
        assert_eq!(
            serde_json::to_value(&meta.owner_references).expect("json"),
            owners
        );
        let annotations = meta.annotations.expect("annotations");
        assert_eq!(annotations.get(ASCEND_910_ANNOTATION), Some(&device));
        assert_eq!(meta.labels.expect("labels").len(), 3);
        let slim = kept.slim();
        assert_eq!(
            (slim.key(), slim.name(), slim.namespace()),
            ("team/flash-serve-0-1", "flash-serve-0-1", Some("team"))
        );
        assert!(slim.owned_by("u-2") && !slim.owned_by("flash"));
        assert_eq!(kept.label(KeptLabel::Rank), Some("1"));
        assert_eq!(kept.label(KeptLabel::Role), None);
    }

    #[test]
    fn a_stored_pod_gives_back_the_status_a_pass_reads() {
        let status = serde_json::json!({
            "phase": "Pending", "reason": "Evicted", "message": "the node was drained",
            "podIP": "10.0.0.7", "hostIP": "192.168.1.2", "startTime": "2026-01-01T00:00:03Z",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                 "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"},
                {"type": "DisruptionTarget", "status": "Pending", "reason": "EvictionByEvictionAPI"},
                {"type": ACCEPTED_POD_CONDITION, "status": "Unknown", "message": "judging"},
            ],
            "initContainerStatuses": [{"name": "fetch", "image": "", "imageID": "",
                "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                    "message": "killed", "startedAt": "2026-01-01T00:00:04Z",
                    "finishedAt": "2026-01-01T00:00:05Z"}}}],
            "containerStatuses": [{"name": "engine", "image": "", "imageID": "",
                "ready": true, "restartCount": 0,
                "started": true, "state": {"running": {"startedAt": "2026-01-01T00:00:06Z"}}}],
            "resourceClaimStatuses": [{"name": "devices", "resourceClaimName": "flash-serve-0-1-devices-x7k2q"}],
        });
        let pod: Incoming<CachedPod> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flash-serve-0-1", "namespace": "team"},
            "spec": {"nodeName": "n-1"},
            "status": status,
        }))
        .expect("decoded");
        let kept = pod.shape();
        assert_eq!(
            serde_json::to_value(kept.to_api().status).expect("json"),
            status,
            "every field a pass reads comes back as it was decoded"
        );
    }

    #[test]
    fn a_stored_job_keeps_its_containers_names_and_its_run_key_and_no_arguments() {
        let names = crate::controller::build::AcceptanceNames::new("flash", "r1", "");
        let job: Incoming<CachedJob> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": names.job(0), "namespace": "team",
                "annotations": {JUDGES_ANNOTATION: names.key}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "engine", "image": "e", "args": ["--serve", "--port", "8000"]},
                {"name": crate::controller::build::JUDGE_CONTAINER, "image": "j",
                 "args": ["judge", "--revision", "r1", crate::controller::build::EVIDENCE_FLAG, "elsewhere", "--owner-name", "flash"]},
            ]}}},
        }))
        .expect("decoded");
        let back = job.shape().to_api();
        let containers = &back
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pods")
            .containers;
        let kept: Vec<_> = containers
            .iter()
            .map(|c| (c.name.as_str(), c.args.clone()))
            .collect();
        assert_eq!(
            kept,
            [
                ("engine", None),
                (crate::controller::build::JUDGE_CONTAINER, None)
            ]
        );
        assert_eq!(
            crate::controller::build::evidence_of_job("flash", &back),
            Some(names.evidence_configmap),
            "the evidence is named by the run's key, whatever the arguments say"
        );
    }

    #[test]
    fn a_serving_pod_keeps_its_node_and_status_in_one_allocation_of_under_256_bytes() {
        let status = serde_json::json!({
            "phase": "Running", "podIP": "10.244.1.188", "hostIP": "127.0.0.1",
            "startTime": "2026-12-06T20:09:40Z",
            "conditions": [
                {"type": ACCEPTED_POD_CONDITION, "status": "True", "reason": "AcceptancePassed",
                 "message": "revision wvqvv5bcfg6o4cn3ly5rwbvkovqzldal67exefd3if4cdi5kdq4a passed acceptance",
                 "lastTransitionTime": "2026-12-06T20:09:41Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T20:09:40Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-06T20:09:41Z"},
            ],
            "containerStatuses": [{"name": "engine", "image": "", "imageID": "", "ready": true,
                "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": "2026-12-06T20:09:40Z"}}}],
        });
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bench-00001-worker-0-0", "namespace": "bench"},
            "spec": {"nodeName": "bench-nvidia-12"},
            "status": status,
        }))
        .expect("decoded");
        assert!(pod.run.0.len() < 256, "{} bytes", pod.run.0.len());
        let back = pod.to_api();
        assert_eq!(
            back.spec.and_then(|s| s.node_name).as_deref(),
            Some("bench-nvidia-12")
        );
        assert_eq!(serde_json::to_value(back.status).expect("json"), status);
        let bare: CachedPod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}})).expect("pod");
        assert!(
            bare.run.0.is_empty(),
            "no allocation without spec or status"
        );
        assert_eq!((bare.to_api().spec, bare.to_api().status), (None, None));
    }

    #[test]
    fn a_cached_pod_with_its_shared_counts_fits_in_112_bytes() {
        // The cache holds each object in an `Arc` (two counts of 8 bytes): 112 bytes is one of
        // jemalloc's size classes, the next is 128.
        assert!(std::mem::size_of::<CachedPod>() + 16 <= 112);
        let pod: CachedPod = serde_json::from_value(serde_json::json!({"metadata": {
            "name": "p", "labels": {labels::REVISION: "r1", "other": "x"},
            "annotations": {APPLIED_HASH_ANNOTATION: "h1", "note": "y"}}}))
        .expect("pod");
        let meta = pod.to_api().metadata;
        assert_eq!(meta.generation, None);
        assert_eq!(
            (meta.labels, meta.annotations),
            (
                Some(BTreeMap::from([(labels::REVISION.into(), "r1".into())])),
                Some(BTreeMap::from([(
                    APPLIED_HASH_ANNOTATION.into(),
                    "h1".into()
                )]))
            ),
            "labels and annotations kept in one allocation come back apart"
        );
    }

    #[test]
    fn packed_texts_read_back_as_written_with_one_byte_of_length_below_254() {
        let long = "ä".repeat(200);
        let texts = [
            Some(""),
            None,
            Some("Running"),
            Some(&"x".repeat(253)),
            Some(&"y".repeat(254)),
            Some(long.as_str()),
            None,
        ];
        let packed = Texts::of(texts);
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(packed.get(i), *text, "text {i}");
        }
        assert_eq!(packed.get(texts.len()), None);
        // 1 + 1 + (1 + 7) + (1 + 253) + (1 + 4 + 254) + (1 + 4 + 400) + 1
        assert_eq!(packed.0.len(), 929);
        assert_eq!(Texts::of([Some("n-1")]).0.len(), 4);
        assert_eq!(Texts::of([None, None]), Texts::default());
    }

    #[test]
    fn a_metadata_only_object_gives_back_its_kind_with_the_metadata_a_pass_reads() {
        let budget: CachedMeta<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "flash-worker", "namespace": "team",
                    "labels": {labels::DEPLOYMENT: "flash", "extra": "x"},
                    "annotations": {APPLIED_HASH_ANNOTATION: "h2", "note": "y"}},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}},
            }))
            .expect("decoded");
        assert_eq!(budget.label(KeptLabel::Deployment), Some("flash"));
        let back = budget.to_api();
        assert_eq!(back.spec, None);
        assert_eq!(crate::controller::build::applied_hash(&back), Some("h2"));
        assert_eq!(back.metadata.labels.expect("labels").len(), 1);
        assert_eq!(back.metadata.annotations.expect("annotations").len(), 1);
        assert_eq!(
            <Incoming<CachedMeta<k8s_openapi::api::policy::v1::PodDisruptionBudget>> as kube::Resource>::url_path(&(), Some("team")),
            "/apis/policy/v1/namespaces/team/poddisruptionbudgets"
        );
    }

    #[test]
    fn a_cached_claim_keeps_its_name_and_phase_and_none_of_its_annotations() {
        let claim: Incoming<CachedClaim> = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "weights", "namespace": "team",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                "finalizers": ["kubernetes.io/pvc-protection"]},
            "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": "pv-1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Ti"}},
        }))
        .expect("decoded");
        assert_eq!(kube::Resource::meta(&claim).finalizers, None);
        let claim = claim.into_shape();
        assert_eq!(claim.phase(), Some("Bound"));
        assert_eq!(claim.slim().name(), "weights");
        assert_eq!(claim.metadata.marks, Marks::default());
        let pending: CachedClaim =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "w"}}))
                .expect("decoded");
        assert_eq!(pending.phase(), None);
    }

    #[test]
    fn a_cached_deployment_gives_back_the_object_without_managed_fields_or_the_applied_copy() {
        let ar = crate::api::api_resource();
        let spec = serde_json::json!({"acceptance": {"promptsFrom": {"name": "prompts", "key": "k"}}, "replicas": {"worker": 2}});
        let full = object(spec);
        let cached: CachedDeployment = serde_json::from_value(full.clone()).expect("decoded");
        assert_eq!(cached.prompts_from.as_deref(), Some("prompts"));
        assert_eq!(cached.checkpoint_claim, None);
        assert!(cached.refers_to_config_map("prompts"));
        assert!(!cached.refers_to_config_map("other"));
        // The ConfigMaps its engines read: a change to one starts a pass.
        let engines: CachedDeployment = serde_json::from_value(object(serde_json::json!({
            "runtime": {"env": [{"name": "L", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "l"}}}]},
            "roles": [{"name": "worker", "pod": {"volumes": [
                {"name": "v", "configMap": {"name": "vol"}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj"}}]}}]}}],
        })))
        .expect("decoded");
        for name in ["conf", "vol", "proj"] {
            assert!(engines.refers_to_config_map(name), "{name}");
        }
        assert!(!engines.refers_to_config_map("prompts"));
        let mut expected = full;
        let meta = expected["metadata"].as_object_mut().expect("meta");
        meta.remove("managedFields");
        meta["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("kubectl.kubernetes.io/last-applied-configuration");
        assert_eq!(cached.to_value(&ar).expect("value"), expected);
        let body = String::from_utf8(cached.body.text().expect("inflated")).expect("text");
        assert!(
            !body.contains("managedFields") && !body.contains("last-applied"),
            "{body}"
        );
        // The labels and annotations are kept in the compressed text, not as maps.
        assert_eq!(
            (&cached.metadata.labels, &cached.metadata.annotations),
            (&None, &None)
        );
        assert!(body.contains("license-accepted") && body.contains("inference"));
    }

    #[test]
    fn a_deployment_that_does_not_match_the_schema_is_cached_as_written() {
        let ar = crate::api::api_resource();
        let full =
            object(serde_json::json!({"replicas": "many", "acceptance": {"promptsFrom": 7}}));
        let cached: CachedDeployment = serde_json::from_value(full.clone()).expect("decoded");
        assert_eq!(cached.prompts_from, None);
        let back = cached.to_value(&ar).expect("value");
        assert_eq!(back["spec"], full["spec"]);
        assert!(serde_json::from_value::<crate::api::DeepInferDeployment>(back).is_err());
    }

    #[test]
    fn a_cached_deployment_names_its_checkpoint_claim_from_either_source() {
        let claim = |source: Value| {
            let cached: CachedDeployment =
                serde_json::from_value(object(serde_json::json!({"model": {"source": source}})))
                    .expect("decoded");
            cached.checkpoint_claim
        };
        assert_eq!(
            claim(serde_json::json!({"hub": {"claimName": "weights", "revision": "r"}})).as_deref(),
            Some("weights")
        );
        assert_eq!(
            claim(serde_json::json!({"volume": {"claimName": "ckpt", "path": "/m"}})).as_deref(),
            Some("ckpt")
        );
        assert_eq!(claim(serde_json::json!({"volume": {"claimName": 3}})), None);
    }

    #[test]
    fn a_cached_configmap_keeps_a_hash_of_its_data_so_an_edit_that_kept_the_applied_hash_is_seen() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let written = serde_json::json!({
            "metadata": {"name": "t", "namespace": "team", "uid": "c-1",
                         "annotations": {APPLIED_HASH_ANNOTATION: "h1"}},
            "data": {"rank_table.json": "{\"status\":\"completed\"}"}
        });
        let desired: ConfigMap = serde_json::from_value(written.clone()).expect("ConfigMap");
        let cached: CachedMeta<ConfigMap> = serde_json::from_value(written).expect("cached");
        let seen = cached.to_api();
        assert!(seen.data.is_none(), "the content itself is not kept");
        assert!(!crate::controller::apply::content_drifted(&desired, &seen));
        let edited: CachedMeta<ConfigMap> = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "t", "namespace": "team", "uid": "c-1",
                         "annotations": {APPLIED_HASH_ANNOTATION: "h1"}},
            "data": {"rank_table.json": "{\"status\":\"completed\",\"server_list\":[]}"}
        }))
        .expect("cached");
        assert!(crate::controller::apply::content_drifted(
            &desired,
            &edited.to_api()
        ));
        // A Service has no data: nothing to compare.
        let service: CachedMeta<k8s_openapi::api::core::v1::Service> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}})).expect("cached");
        assert!(service.to_api().metadata.annotations.is_none());
    }
}
