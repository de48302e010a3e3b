//! The Helm chart and the kustomize config, rendered by the real `helm` and `kubectl`: lint,
//! least-privilege RBAC without wildcards in both install modes, an operator pod that meets Pod
//! Security `restricted` with requests and limits, a values schema that refuses bad values, and
//! CRD copies that match `crds/`.
//!
//! Needs the bed's tools (`make provision` puts them under `~/.cache/deepinfer-operator/`); fails
//! loudly without them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;
use serde_json::{json, Value};

const CRD_FILE: &str = "deepinfer.io_deepinferdeployments.yaml";
const ROLE_CRD_FILE: &str = "deepinfer.io_deepinferroles.yaml";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("charts/deepinfer-operator")
}

/// A tool of the test bed: `.testbed/bin/<name>`, else the provisioned cache (each tool in a
/// directory of its own, keyed by version).
fn tool(name: &str) -> PathBuf {
    let bed = std::env::var_os("DEEPINFER_TESTBED")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".testbed"));
    let in_bed = bed.join("bin").join(name);
    if in_bed.exists() {
        return in_bed;
    }
    let cache = std::env::var_os("DEEPINFER_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/deepinfer-operator"))
        })
        .expect("HOME or DEEPINFER_CACHE is set");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no `{name}` binary in {} or {}/*/; run `make provision`",
            bed.join("bin").display(),
            cache.display()
        )
    })
}

/// Runs a tool; returns (success, stdout, stderr).
fn run(tool_name: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(tool(tool_name))
        .args(args)
        // Keep helm away from the user's repositories and plugins.
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("deepinfer-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("deepinfer-helm-config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("deepinfer-helm-data"),
        )
        .output()
        .unwrap_or_else(|e| panic!("running {tool_name}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template` of the chart with `--set` values; panics when it fails.
fn template(sets: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "rel",
        chart.to_str().unwrap(),
        "--namespace",
        "ops",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (ok, out, err) = run("helm", &args);
    assert!(ok, "helm template {sets:?} failed: {err}");
    docs(&out)
}

/// `helm template` that must fail; returns its error output.
fn template_err(sets: &[&str]) -> String {
    let chart = chart();
    let mut args = vec!["template", "rel", chart.to_str().unwrap()];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (ok, out, err) = run("helm", &args);
    assert!(!ok, "helm template {sets:?} should fail, rendered:\n{out}");
    err
}

fn kustomize(dir: &str) -> Vec<Value> {
    let path = root().join(dir);
    let (ok, out, err) = run("kubectl", &["kustomize", path.to_str().unwrap()]);
    assert!(ok, "kubectl kustomize {dir} failed: {err}");
    docs(&out)
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

fn of_kind<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objs, kind);
    assert_eq!(found.len(), 1, "exactly one {kind}: {found:?}");
    found[0]
}

/// Whether `object` is one of the metrics endpoint's ClusterRoles or its binding
/// (`metrics.secure`), which every install mode renders.
fn is_metrics_access(object: &Value) -> bool {
    object["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.ends_with("-metrics-auth") || n.ends_with("-metrics-reader"))
}

/// A namespaced install: no ClusterRole or ClusterRoleBinding but the metrics endpoint's, which
/// grant exactly the reviews to the operator's ServiceAccount in `ops`.
fn assert_no_cluster_rights_but_the_metrics_reviews(objs: &[Value]) {
    assert!(
        cluster_grants(objs, "ClusterRole").is_empty(),
        "no ClusterRole but the metrics endpoint's"
    );
    assert!(
        cluster_grants(objs, "ClusterRoleBinding").is_empty(),
        "no ClusterRoleBinding but the metrics endpoint's"
    );
    assert_metrics_access_rbac(
        objs,
        "ops",
        &one(objs, "ServiceAccount")["metadata"]["name"],
    );
}

/// The ClusterRoles or ClusterRoleBindings (`kind`) that grant the operator more than the metrics
/// endpoint's reviews.
fn cluster_grants<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    of_kind(objs, kind)
        .into_iter()
        .filter(|o| !is_metrics_access(o))
        .collect()
}

/// The metrics endpoint's access rights: a ClusterRole of exactly `create` on tokenreviews and
/// subjectaccessreviews bound to the operator's ServiceAccount `sa` in `namespace`, and the
/// unbound ClusterRole granting `get` on `/metrics` that a scraper is bound to.
fn assert_metrics_access_rbac(objs: &[Value], namespace: &str, sa: &Value) {
    let roles: Vec<&Value> = of_kind(objs, "ClusterRole")
        .into_iter()
        .filter(|o| is_metrics_access(o))
        .collect();
    assert_eq!(
        roles.len(),
        2,
        "the metrics-auth and metrics-reader ClusterRoles: {roles:?}"
    );
    let auth = roles
        .iter()
        .find(|r| {
            r["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-metrics-auth")
        })
        .expect("the metrics-auth ClusterRole");
    assert_eq!(
        flat_rules(auth),
        [
            (
                "authentication.k8s.io".into(),
                "tokenreviews".into(),
                vec!["create".into()]
            ),
            (
                "authorization.k8s.io".into(),
                "subjectaccessreviews".into(),
                vec!["create".into()]
            ),
        ]
    );
    let reader = roles
        .iter()
        .find(|r| {
            r["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-metrics-reader")
        })
        .expect("the metrics-reader ClusterRole");
    assert_eq!(
        reader["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let bindings: Vec<&Value> = of_kind(objs, "ClusterRoleBinding")
        .into_iter()
        .filter(|o| is_metrics_access(o))
        .collect();
    assert_eq!(
        bindings.len(),
        1,
        "only metrics-auth is bound: {bindings:?}"
    );
    assert_eq!(bindings[0]["roleRef"]["name"], auth["metadata"]["name"]);
    assert_eq!(
        bindings[0]["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa, "namespace": namespace}])
    );
}

/// Roles and ClusterRoles other than the leader-election and verdict-key Roles.
fn watch_roles<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    of_kind(objs, kind)
        .into_iter()
        .filter(|r| {
            !r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-leader-election") || n.ends_with("-verdict-key"))
        })
        .collect()
}

/// The verdict-key Role and RoleBinding: in `namespace`, `get` of the one Secret named
/// `deepinfer-operator-verdict-key` and `create` of Secrets (create cannot be limited to a
/// name), bound to `service_account` there, and the operator told that name.
fn assert_verdict_key_rbac(objs: &[Value], namespace: &str, service_account: &Value) {
    let roles: Vec<_> = of_kind(objs, "Role")
        .into_iter()
        .filter(|r| {
            r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-verdict-key"))
        })
        .collect();
    assert_eq!(roles.len(), 1, "one verdict-key Role");
    let role = roles[0];
    assert_eq!(role["metadata"]["namespace"], namespace);
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": [""], "resources": ["secrets"],
             "resourceNames": ["deepinfer-operator-verdict-key"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}
        ])
    );
    let binding = of_kind(objs, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == role["metadata"]["name"])
        .expect("a RoleBinding of the verdict-key Role");
    assert_eq!(binding["metadata"]["namespace"], namespace);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}])
    );
    let deploy = one(objs, "Deployment");
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--verdict-key-secret=deepinfer-operator-verdict-key"),
        "{args}"
    );
}

/// The leader-election Role and RoleBinding: in `namespace`, exactly get/create/update on
/// leases, bound to `service_account` there.
fn assert_leader_election_rbac(objs: &[Value], namespace: &str, service_account: &Value) {
    let roles: Vec<_> = of_kind(objs, "Role")
        .into_iter()
        .filter(|r| r["metadata"]["namespace"] == namespace)
        .filter(|r| {
            r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-leader-election"))
        })
        .collect();
    assert_eq!(roles.len(), 1, "one leader-election Role in {namespace}");
    let role = roles[0];
    assert_eq!(
        flat_rules(role),
        vec![(
            "coordination.k8s.io".to_string(),
            "leases".to_string(),
            vec![
                "create".to_string(),
                "get".to_string(),
                "update".to_string()
            ]
        )]
    );
    let binding = of_kind(objs, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == role["metadata"]["name"])
        .expect("a RoleBinding of the leader-election Role");
    assert_eq!(binding["metadata"]["namespace"], namespace);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}])
    );
    assert_verdict_key_rbac(objs, namespace, service_account);
}

/// One row of `config/rbac/needs.yaml`: a verb the operator holds on a resource, and the code
/// that uses it (`uses`, a text of `file`).
#[derive(serde::Deserialize)]
struct Need {
    group: String,
    resource: String,
    verb: String,
    file: String,
    uses: String,
    why: String,
}

fn needs() -> Vec<Need> {
    let path = root().join("config/rbac/needs.yaml");
    let text = std::fs::read_to_string(&path).expect("config/rbac/needs.yaml");
    serde_yaml::from_str(&text).expect("config/rbac/needs.yaml is a list of needs")
}

/// The RBAC the operator needs, as shipped: (apiGroup, resource, verbs), from the need table
/// kept beside the rules (`config/rbac/needs.yaml`).
fn expected_rules() -> Vec<(String, String, Vec<String>)> {
    let mut by: std::collections::BTreeMap<(String, String), Vec<String>> = Default::default();
    for n in needs() {
        by.entry((n.group, n.resource)).or_default().push(n.verb);
    }
    let mut out: Vec<_> = by
        .into_iter()
        .map(|((g, r), mut v)| {
            v.sort();
            (g, r, v)
        })
        .collect();
    out.sort();
    out
}

/// Need, not only consistency: every verb the rules hold has a row naming the code that sends
/// it, that text is still in that file, and no verb is listed twice. A use removed from the code
/// fails here until its verb leaves the table and the rules.
#[test]
fn every_verb_the_operator_holds_is_used_by_its_code() {
    let rows = needs();
    assert!(rows.len() > 20, "{} rows", rows.len());
    let mut seen = std::collections::BTreeSet::new();
    for n in &rows {
        let key = (n.group.clone(), n.resource.clone(), n.verb.clone());
        assert!(seen.insert(key.clone()), "listed twice: {key:?}");
        assert!(
            ["get", "list", "watch", "create", "patch", "delete"].contains(&n.verb.as_str()),
            "{key:?}: update, deletecollection and wildcards are never needed"
        );
        assert!(!n.why.trim().is_empty(), "{key:?} says why");
        let source = std::fs::read_to_string(root().join(&n.file))
            .unwrap_or_else(|e| panic!("{key:?}: {}: {e}", n.file));
        assert!(
            source.contains(&n.uses),
            "{key:?}: {} no longer contains {:?}; if the operator stopped sending this request, \
             drop the verb from config/rbac/needs.yaml, config/rbac/role.yaml and the chart's rules",
            n.file,
            n.uses
        );
    }
    // ConfigMaps are written by patch only (the judge's Role grants get/patch on its evidence).
    assert!(!rows
        .iter()
        .any(|n| n.resource == "configmaps" && n.verb == "update"));
    // Secrets: a metadata-only GET by name, never a list or a watch of their content.
    let secrets: Vec<&str> = rows
        .iter()
        .filter(|n| n.resource == "secrets")
        .map(|n| n.verb.as_str())
        .collect();
    assert_eq!(secrets, ["get"]);
}

/// The rules of a Role/ClusterRole flattened to (apiGroup, resource, sorted verbs); asserts that
/// no field holds a wildcard and that no rule names resourceNames or nonResourceURLs.
fn flat_rules(role: &Value) -> Vec<(String, String, Vec<String>)> {
    let name = &role["metadata"]["name"];
    let mut out = Vec::new();
    for rule in role["rules"].as_array().expect("rules") {
        for field in ["apiGroups", "resources", "verbs"] {
            let values = rule[field]
                .as_array()
                .unwrap_or_else(|| panic!("{} {name}: rule without {field}: {rule}", role["kind"]));
            assert!(!values.is_empty(), "{name}: empty {field} in {rule}");
            for v in values {
                let s = v.as_str().expect("strings");
                assert!(
                    !s.contains('*'),
                    "{} {name}: wildcard in {field} of {rule}",
                    role["kind"]
                );
            }
        }
        assert!(rule.get("nonResourceURLs").is_none(), "{name}: {rule}");
        let mut verbs: Vec<String> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        verbs.sort();
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                out.push((
                    g.as_str().unwrap().to_string(),
                    r.as_str().unwrap().to_string(),
                    verbs.clone(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Asserts that a pod template meets Pod Security `restricted` (each control checked on its
/// own), plus a read-only root filesystem, and that every container sets requests and limits.
fn assert_restricted(pod: &Value, what: &str) {
    let spec = &pod["spec"];
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_ne!(spec[host], true, "{what}: {host}");
    }
    let psc = &spec["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true, "{what}: pod runAsNonRoot");
    assert_eq!(psc["runAsUser"], 65532, "{what}: pod runAsUser");
    assert_eq!(
        psc["seccompProfile"]["type"], "RuntimeDefault",
        "{what}: pod seccompProfile"
    );
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        assert!(volume.get("hostPath").is_none(), "{what}: hostPath volume");
    }
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .collect();
    assert!(!containers.is_empty(), "{what}: no containers");
    for c in containers {
        let name = &c["name"];
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true, "{what}/{name}: runAsNonRoot");
        assert_ne!(sc["runAsUser"], 0, "{what}/{name}: runAsUser 0");
        assert_ne!(sc["privileged"], true, "{what}/{name}: privileged");
        assert_eq!(
            sc["allowPrivilegeEscalation"], false,
            "{what}/{name}: allowPrivilegeEscalation"
        );
        assert_eq!(
            sc["readOnlyRootFilesystem"], true,
            "{what}/{name}: readOnlyRootFilesystem"
        );
        assert_eq!(
            str_list(&sc["capabilities"]["drop"]),
            ["ALL"],
            "{what}/{name}: capabilities.drop"
        );
        assert!(
            str_list(&sc["capabilities"]["add"])
                .iter()
                .all(|c| *c == "NET_BIND_SERVICE"),
            "{what}/{name}: capabilities.add"
        );
        let seccomp = sc["seccompProfile"]["type"].as_str().unwrap_or("");
        assert!(
            seccomp == "RuntimeDefault"
                || (seccomp.is_empty() && psc["seccompProfile"]["type"] == "RuntimeDefault"),
            "{what}/{name}: seccompProfile"
        );
        for port in c["ports"].as_array().into_iter().flatten() {
            assert!(port.get("hostPort").is_none(), "{what}/{name}: hostPort");
        }
        for (kind, keys) in [
            ("requests", &["cpu", "memory"][..]),
            ("limits", &["cpu", "memory"][..]),
        ] {
            for key in keys {
                assert!(
                    c["resources"][kind][*key].is_string()
                        || c["resources"][kind][*key].is_number(),
                    "{what}/{name}: resources.{kind}.{key} unset"
                );
            }
        }
    }
}

/// The operator container's liveness and readiness probes ask `/healthz` and `/readyz` on the
/// metrics port over HTTPS (no token needed).
fn assert_probes_speak_https(c: &Value) {
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "metrics", "scheme": "HTTPS"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "metrics", "scheme": "HTTPS"})
    );
}

fn operator_container(deploy: &Value) -> &Value {
    &deploy["spec"]["template"]["spec"]["containers"][0]
}

fn args(container: &Value) -> Vec<&str> {
    str_list(&container["args"])
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn chart_lints_clean() {
    let chart = chart();
    let (ok, out, err) = run("helm", &["lint", "--strict", chart.to_str().unwrap()]);
    assert!(ok, "helm lint --strict failed:\n{out}{err}");
    let (ok, out, err) = run(
        "helm",
        &[
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "--set",
            "watchNamespace=team-a,acceptedLicenses={mit},metrics.serviceMonitor.enabled=true",
        ],
    );
    assert!(ok, "helm lint --strict (namespaced) failed:\n{out}{err}");
}

#[test]
fn chart_and_config_ship_the_generated_crds() {
    for file in [CRD_FILE, ROLE_CRD_FILE] {
        let generated = std::fs::read_to_string(root().join("crds").join(file)).expect("crds/");
        for copy in ["charts/deepinfer-operator/crds", "config/crd/bases"] {
            let path = root().join(copy).join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{} missing ({e}); run `make crds`", path.display()));
            assert!(
                text == generated,
                "{} differs from crds/{file}; run `make crds` and commit the result",
                path.display()
            );
        }
    }
}

#[test]
fn cluster_wide_mode_is_an_opt_in_binding_a_cluster_role_with_exact_rules() {
    let objs = template(&["clusterWide=true", "acceptedLicenses={mit,apache-2.0}"]);
    assert!(
        watch_roles(&objs, "Role").is_empty(),
        "no namespaced watch Role"
    );
    assert_leader_election_rbac(
        &objs,
        "ops",
        &one(&objs, "ServiceAccount")["metadata"]["name"],
    );
    let grants = cluster_grants(&objs, "ClusterRole");
    assert_eq!(grants.len(), 1, "one watch ClusterRole: {grants:?}");
    let role = grants[0];
    assert_eq!(flat_rules(role), expected_rules());
    let sa = one(&objs, "ServiceAccount");
    assert_binds_to_service_account(&objs, role, sa);
    let deploy = one(&objs, "Deployment");
    assert_eq!(
        deploy["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
    let a = args(operator_container(deploy));
    assert!(
        !a.iter().any(|a| a.starts_with("--namespace")),
        "all namespaces: {a:?}"
    );
    assert!(a.contains(&"--accepted-licenses=mit,apache-2.0"), "{a:?}");
}

/// The one ClusterRoleBinding (beside the metrics endpoint's) binds `role` to the operator's ServiceAccount `sa` in the release
/// namespace.
fn assert_binds_to_service_account(objs: &[Value], role: &Value, sa: &Value) {
    let bindings = cluster_grants(objs, "ClusterRoleBinding");
    assert_eq!(bindings.len(), 1, "{bindings:?}");
    let binding = bindings[0];
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "ops"}])
    );
}

/// Recording each acceptance rank's scale-up domain is an opt-in: the operator gets
/// `--record-node-domains` and a ClusterRole of exactly `get` on nodes, bound to its
/// ServiceAccount; its watch rules stay a Role in the watched namespace. By default neither.
#[test]
fn recording_node_domains_adds_only_get_on_nodes_cluster_wide() {
    let objs = template(&["acceptedLicenses={mit}", "recordNodeDomains=true"]);
    let grants = cluster_grants(&objs, "ClusterRole");
    assert_eq!(grants.len(), 1, "{grants:?}");
    let role = grants[0];
    assert_eq!(role["metadata"]["name"], "rel-deepinfer-operator-nodes");
    assert_eq!(
        flat_rules(role),
        [("".to_string(), "nodes".to_string(), vec!["get".to_string()])]
    );
    let sa = one(&objs, "ServiceAccount");
    assert_binds_to_service_account(&objs, role, sa);
    let roles = watch_roles(&objs, "Role");
    assert_eq!(roles.len(), 1, "one watch Role: {roles:?}");
    assert_eq!(flat_rules(roles[0]), expected_rules());
    let a = args(operator_container(one(&objs, "Deployment")));
    assert!(a.contains(&"--record-node-domains"), "{a:?}");
    let default = template(&["acceptedLicenses={mit}"]);
    let a = args(operator_container(one(&default, "Deployment")));
    assert!(!a.contains(&"--record-node-domains"), "{a:?}");
}

/// The default install watches the release namespace under a Role there: no ClusterRole but the
/// metrics endpoint's reviews.
#[test]
fn the_default_install_watches_the_release_namespace_under_a_role() {
    let objs = template(&["acceptedLicenses={mit}"]);
    assert_no_cluster_rights_but_the_metrics_reviews(&objs);
    let roles = watch_roles(&objs, "Role");
    assert_eq!(roles.len(), 1, "one watch Role: {roles:?}");
    assert_eq!(roles[0]["metadata"]["namespace"], "ops");
    assert_eq!(flat_rules(roles[0]), expected_rules());
    let a = args(operator_container(one(&objs, "Deployment")));
    assert!(a.contains(&"--namespace=ops"), "{a:?}");
    assert!(
        a.contains(&"--allowed-hub-endpoints=https://huggingface.co"),
        "{a:?}"
    );
    let err = template_err(&["clusterWide=true", "watchNamespace=team-a"]);
    assert!(err.contains("leave watchNamespace empty"), "{err}");
    let mirror =
        template(&["hub.allowedEndpoints={https://mirror.internal,https://huggingface.co}"]);
    let a = args(operator_container(one(&mirror, "Deployment")));
    assert!(
        a.contains(&"--allowed-hub-endpoints=https://mirror.internal,https://huggingface.co"),
        "{a:?}"
    );
}

#[test]
fn single_namespace_mode_uses_a_role_in_the_watched_namespace_only() {
    let objs = template(&["watchNamespace=team-a", "acceptedLicenses={mit}"]);
    assert_no_cluster_rights_but_the_metrics_reviews(&objs);
    let roles = watch_roles(&objs, "Role");
    assert_eq!(roles.len(), 1, "one watch Role: {roles:?}");
    let role = roles[0];
    assert_eq!(role["metadata"]["namespace"], "team-a");
    assert_eq!(flat_rules(role), expected_rules());
    let binding = of_kind(&objs, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == role["metadata"]["name"])
        .expect("a RoleBinding of the watch Role");
    assert_eq!(binding["metadata"]["namespace"], "team-a");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
    let a = args(operator_container(one(&objs, "Deployment")));
    assert!(a.contains(&"--namespace=team-a"), "{a:?}");
    // The operator itself still lives in the release namespace.
    for kind in ["Deployment", "ServiceAccount", "Service"] {
        assert_eq!(one(&objs, kind)["metadata"]["namespace"], "ops", "{kind}");
    }
}

/// A list of namespaces: one Role + RoleBinding in each listed namespace, bound to the operator's
/// ServiceAccount in the release namespace, and no ClusterRole; the operator is told the list.
#[test]
fn listed_namespaces_get_a_role_each_and_no_cluster_role() {
    let objs = template(&["namespaces={team-b,team-a}", "acceptedLicenses={mit}"]);
    assert_no_cluster_rights_but_the_metrics_reviews(&objs);
    let sa = &one(&objs, "ServiceAccount")["metadata"]["name"];
    assert_leader_election_rbac(&objs, "ops", sa);
    let roles = watch_roles(&objs, "Role");
    let mut in_ns: Vec<&str> = roles
        .iter()
        .map(|r| r["metadata"]["namespace"].as_str().expect("namespaced"))
        .collect();
    in_ns.sort();
    assert_eq!(
        in_ns,
        ["team-a", "team-b"],
        "one watch Role per listed namespace"
    );
    for role in roles {
        let ns = &role["metadata"]["namespace"];
        assert_eq!(flat_rules(role), expected_rules(), "the rules in {ns}");
        let bindings: Vec<_> = watch_roles(&objs, "RoleBinding")
            .into_iter()
            .filter(|b| &b["metadata"]["namespace"] == ns)
            .collect();
        assert_eq!(bindings.len(), 1, "one RoleBinding in {ns}");
        assert_eq!(bindings[0]["roleRef"]["kind"], "Role");
        assert_eq!(bindings[0]["roleRef"]["name"], role["metadata"]["name"]);
        assert_eq!(
            bindings[0]["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "ops"}])
        );
    }
    let a = args(operator_container(one(&objs, "Deployment")));
    assert!(a.contains(&"--namespaces=team-b,team-a"), "{a:?}");
    assert!(!a.iter().any(|a| a.starts_with("--namespace=")), "{a:?}");
    for kind in ["Deployment", "ServiceAccount", "Service"] {
        assert_eq!(one(&objs, kind)["metadata"]["namespace"], "ops", "{kind}");
    }
}

/// The three watch modes exclude each other: two of them set is refused, naming both values.
#[test]
fn contradicting_watch_modes_are_refused_naming_both_values() {
    for (sets, names) in [
        (
            ["namespaces={team-a}", "watchNamespace=team-b"],
            ["namespaces", "watchNamespace"],
        ),
        (
            ["namespaces={team-a}", "clusterWide=true"],
            ["namespaces", "clusterWide"],
        ),
        (
            ["watchNamespace=team-a", "clusterWide=true"],
            ["watchNamespace", "clusterWide"],
        ),
    ] {
        let err = template_err(&sets);
        for name in names {
            assert!(
                err.contains(name),
                "{sets:?}: the error names {name}: {err}"
            );
        }
    }
}

#[test]
fn operator_pod_is_restricted_bounded_and_probed_on_the_metrics_port() {
    let objs = template(&["metrics.port=9443"]);
    let deploy = one(&objs, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(
        deploy["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}),
        "leader-elected replicas hand over through the Lease"
    );
    let pod = &deploy["spec"]["template"];
    assert_restricted(pod, "chart Deployment");
    let c = operator_container(deploy);
    assert_eq!(c["image"], "ghcr.io/deepinfer/deepinfer-operator:0.1.0");
    let a = args(c);
    assert_eq!(a[0], "run");
    for expected in [
        "--operator-image=ghcr.io/deepinfer/deepinfer-operator:0.1.0",
        "--metrics-address=0.0.0.0:9443",
        "--max-devices-nvidia=8",
        "--max-devices-ascend=16",
        "--gang-scheduling=auto",
        "--partial-group-timeout=120s",
        "--json-logs",
        "--leader-elect",
        "--leader-election-id=rel-deepinfer-operator",
    ] {
        assert!(a.contains(&expected), "{expected} in {a:?}");
    }
    assert!(
        !a.iter().any(|a| a.starts_with("--accepted-licenses")),
        "no allow-list by default: {a:?}"
    );
    assert_eq!(
        c["ports"],
        json!([{"name": "metrics", "containerPort": 9443, "protocol": "TCP"}])
    );
    assert!(a.contains(&"--metrics-secure=true"), "{a:?}");
    assert_probes_speak_https(c);
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let e = env_value(c, name).unwrap_or_else(|| panic!("env {name}"));
        assert_eq!(e["valueFrom"]["fieldRef"]["fieldPath"], field, "{name}");
    }
    let svc = one(&objs, "Service");
    assert_eq!(svc["spec"]["ports"][0]["port"], 9443);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    assert_eq!(
        svc["spec"]["selector"], deploy["spec"]["selector"]["matchLabels"],
        "the metrics Service selects the operator pod"
    );
    assert!(
        of_kind(&objs, "ServiceMonitor").is_empty(),
        "ServiceMonitor is opt-in"
    );
}

/// `/metrics` is HTTPS with token review by default: the operator told so, the probes speaking
/// HTTPS, the ServiceMonitor scraping with Prometheus' token, a certificate Secret mounted when
/// named. `metrics.secure=false` is plain HTTP with no cluster-wide rights at all.
#[test]
fn metrics_are_https_with_token_review_by_default_and_plain_http_is_an_option() {
    let objs = template(&["metrics.serviceMonitor.enabled=true"]);
    let monitor = one(&objs, "ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https", "{endpoint}");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(endpoint["tlsConfig"], json!({"insecureSkipVerify": true}));
    assert_eq!(endpoint["honorLabels"], true);
    assert_metrics_access_rbac(
        &objs,
        "ops",
        &one(&objs, "ServiceAccount")["metadata"]["name"],
    );
    let c = operator_container(one(&objs, "Deployment"));
    assert!(
        !args(c).iter().any(|a| a.starts_with("--metrics-cert-dir")),
        "self-signed by default"
    );

    let named = template(&["metrics.certSecret=operator-metrics-tls"]);
    let deploy = one(&named, "Deployment");
    let c = operator_container(deploy);
    assert!(
        args(c).contains(&"--metrics-cert-dir=/etc/deepinfer/metrics-tls"),
        "{:?}",
        args(c)
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "metrics-tls", "mountPath": "/etc/deepinfer/metrics-tls", "readOnly": true}])
    );
    assert_eq!(
        deploy["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "metrics-tls", "secret": {"secretName": "operator-metrics-tls"}}])
    );
    assert_restricted(
        &deploy["spec"]["template"],
        "chart Deployment with a certificate",
    );

    let plain = template(&[
        "metrics.secure=false",
        "metrics.serviceMonitor.enabled=true",
    ]);
    let c = operator_container(one(&plain, "Deployment"));
    assert!(args(c).contains(&"--metrics-secure=false"), "{:?}", args(c));
    assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTP");
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTP");
    assert!(of_kind(&plain, "ClusterRole").is_empty(), "no ClusterRole");
    assert!(
        of_kind(&plain, "ClusterRoleBinding").is_empty(),
        "no ClusterRoleBinding"
    );
    let endpoint = &one(&plain, "ServiceMonitor")["spec"]["endpoints"][0];
    assert!(endpoint.get("scheme").is_none(), "{endpoint}");
    assert!(endpoint.get("bearerTokenFile").is_none(), "{endpoint}");
}

#[test]
fn values_select_image_logs_devices_and_scheduling() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let objs = template(&[
        "image.repository=registry.example.com/ops/deepinfer-operator",
        &format!("image.digest={digest}"),
        "logFormat=text",
        "maxDevices.nvidia=4",
        "nodeSelector.kubernetes\\.io/os=linux",
        "podAnnotations.team=ml",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
    ]);
    let deploy = one(&objs, "Deployment");
    let c = operator_container(deploy);
    let image = format!("registry.example.com/ops/deepinfer-operator@{digest}");
    assert_eq!(c["image"], image.as_str());
    let a = args(c);
    assert!(
        a.contains(&format!("--operator-image={image}").as_str()),
        "{a:?}"
    );
    assert!(a.contains(&"--max-devices-nvidia=4"), "{a:?}");
    assert!(!a.contains(&"--json-logs"), "{a:?}");
    let pod = &deploy["spec"]["template"];
    assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["metadata"]["annotations"]["team"], "ml");
    let sm = one(&objs, "ServiceMonitor");
    assert_eq!(sm["metadata"]["labels"]["release"], "prom");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    // The per-deployment series keep the resource's namespace (not `exported_namespace`).
    assert_eq!(sm["spec"]["endpoints"][0]["honorLabels"], true);
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"],
        one(&objs, "Service")["spec"]["selector"]
    );
}

/// Each value of `values` (`key`, flag, default) becomes `--flag=<value>`: the default when
/// unset, the value when set (`set`, as `key=value`); `refused` (`key=value`) fails the schema.
fn assert_values_become_flags(values: &[(&str, &str, &str)], set: &[&str], refused: &str) {
    let flags = |sets: &[&str]| -> Vec<String> {
        args(operator_container(one(&template(sets), "Deployment")))
            .into_iter()
            .map(str::to_string)
            .collect()
    };
    let defaults = flags(&[]);
    let overridden = flags(set);
    for ((key, flag, default), given) in values.iter().zip(set) {
        assert!(
            defaults.contains(&format!("--{flag}={default}")),
            "{key}: {defaults:?}"
        );
        let value = given.split_once('=').map_or("", |(_, v)| v);
        assert!(
            overridden.contains(&format!("--{flag}={value}")),
            "{key}: {overridden:?}"
        );
    }
    let err = template_err(&[refused]);
    let key = refused.split_once('=').map_or(refused, |(k, _)| k);
    let last = key.rsplit('.').next().unwrap_or(key);
    assert!(err.contains(last), "{err}");
}

/// The fetch Jobs' outbound proxy is three values passed as flags (absent by default, the
/// operator giving the Jobs no proxy); a value that is not a URL is refused by the schema.
#[test]
fn the_hub_proxy_is_values_passed_as_flags() {
    let hub_flags = |sets: &[&str]| -> Vec<String> {
        args(operator_container(one(&template(sets), "Deployment")))
            .into_iter()
            .filter(|a| a.starts_with("--hub-"))
            .map(str::to_string)
            .collect()
    };
    assert!(hub_flags(&[]).is_empty(), "{:?}", hub_flags(&[]));
    assert_eq!(
        hub_flags(&[
            "hub.proxy.httpsProxy=http://proxy.corp:3128",
            "hub.proxy.httpProxy=http://proxy.corp:3128",
            "hub.proxy.noProxy=mirror.internal\\,10.0.0.0/8",
        ]),
        [
            "--hub-https-proxy=http://proxy.corp:3128",
            "--hub-http-proxy=http://proxy.corp:3128",
            "--hub-no-proxy=mirror.internal,10.0.0.0/8",
        ]
    );
    let err = template_err(&["hub.proxy.httpsProxy=proxy.corp:3128"]);
    assert!(err.contains("httpsProxy"), "{err}");
}

#[test]
fn job_deadlines_are_values_passed_as_flags() {
    assert_values_become_flags(
        &[
            (
                "jobDeadlines.fetchSeconds",
                "fetch-deadline-seconds",
                "86400",
            ),
            (
                "jobDeadlines.verifySeconds",
                "verify-deadline-seconds",
                "3600",
            ),
        ],
        &[
            "jobDeadlines.fetchSeconds=7200",
            "jobDeadlines.verifySeconds=600",
        ],
        "jobDeadlines.verifySeconds=0",
    );
}

#[test]
fn evidence_and_finished_job_retention_are_values_passed_as_flags() {
    assert_values_become_flags(
        &[
            ("retention.keepEvidence", "keep-evidence", "3"),
            (
                "retention.finishedJobTtlSeconds",
                "finished-job-ttl-seconds",
                "86400",
            ),
        ],
        &[
            "retention.keepEvidence=5",
            "retention.finishedJobTtlSeconds=600",
        ],
        "retention.keepEvidence=0",
    );
}

#[test]
fn leader_election_off_runs_one_replica_recreated_without_lease_rights() {
    let objs = template(&["leaderElection.enabled=false"]);
    let deploy = one(&objs, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(deploy["spec"]["strategy"], json!({"type": "Recreate"}));
    let a = args(operator_container(deploy));
    assert!(!a.iter().any(|a| a.starts_with("--leader-elect")), "{a:?}");
    let lease_rights = of_kind(&objs, "Role")
        .into_iter()
        .flat_map(flat_rules)
        .any(|(_, resource, _)| resource == "leases");
    assert!(!lease_rights, "no Lease rights");
    let err = template_err(&["leaderElection.enabled=false", "replicas=2"]);
    assert!(
        err.contains("replicas above 1 need leaderElection.enabled=true"),
        "{err}"
    );
    let objs = template(&["replicas=3"]);
    assert_eq!(one(&objs, "Deployment")["spec"]["replicas"], 3);
}

#[test]
fn prometheus_rule_is_opt_in_and_ships_the_generated_alerts() {
    assert!(
        of_kind(&template(&[]), "PrometheusRule").is_empty(),
        "opt-in"
    );
    let objs = template(&[
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.labels.release=prom",
    ]);
    let rule = one(&objs, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "ops");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let file = std::fs::read_to_string(
        root().join(deepinfer_operator::metrics::reference::PROMETHEUS_RULES_PATH),
    )
    .expect("the generated rule file");
    let shipped: Value = serde_yaml::from_str(&file).expect("rule file is YAML");
    assert_eq!(
        rule["spec"], shipped,
        "the PrometheusRule carries the rule file as is"
    );
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.contains(&"DeepInferOperatorNoLeader"), "{alerts:?}");
    assert!(
        file.contains("{{ $labels.error }}"),
        "Prometheus templates pass through Helm untouched"
    );
    assert_eq!(
        rule["spec"]["groups"][0]["rules"][2]["annotations"]["summary"],
        "deepinfer-operator reconciles keep failing ({{ $labels.error }})"
    );
}

#[test]
fn values_schema_refuses_bad_values() {
    for (set, says) in [
        ("metrics.port=abc", "port"),
        ("metrics.port=70000", "port"),
        ("bogus=1", "bogus"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("watchNamespace=Team_A", "watchNamespace"),
        ("logFormat=xml", "logFormat"),
        ("maxDevices.nvidia=0", "nvidia"),
        ("acceptedLicenses={mit\\,apache}", "acceptedLicenses"),
        ("resources.limits.memory=lots", "memory"),
        ("image.digest=latest", "digest"),
        ("replicas=0", "replicas"),
        ("metrics.prometheusRule.enabled=sometimes", "enabled"),
        ("leaderElection.enabled=maybe", "enabled"),
        ("clusterWide=sometimes", "clusterWide"),
        ("namespaces={Team_A}", "namespaces"),
        ("namespaces={team-a\\,team-b}", "namespaces"),
        (
            "hub.allowedEndpoints={ftp://hub.example.com}",
            "allowedEndpoints",
        ),
    ] {
        let err = template_err(&[set]);
        assert!(err.contains(says), "--set {set}: error names {says}: {err}");
    }
}

#[test]
fn kustomize_default_ships_the_same_rules_and_a_restricted_operator() {
    let objs = kustomize("config/default");
    let ns = one(&objs, "Namespace");
    assert_eq!(ns["metadata"]["name"], "deepinfer-system");
    let crds: Vec<&Value> = of_kind(&objs, "CustomResourceDefinition")
        .into_iter()
        .map(|c| &c["metadata"]["name"])
        .collect();
    assert_eq!(
        crds,
        [
            "deepinferdeployments.deepinfer.io",
            "deepinferroles.deepinfer.io"
        ],
        "the DeepInferDeployment and DeepInferRole CRDs"
    );
    assert!(
        cluster_grants(&objs, "ClusterRole").is_empty()
            && cluster_grants(&objs, "ClusterRoleBinding").is_empty(),
        "config/default holds no cluster-wide rights but the metrics endpoint's reviews"
    );
    assert_metrics_access_rbac(&objs, "deepinfer-system", &json!("deepinfer-operator"));
    let roles = watch_roles(&objs, "Role");
    assert_eq!(roles.len(), 1, "one watch Role: {roles:?}");
    let role = roles[0];
    assert_eq!(role["metadata"]["namespace"], "deepinfer-system");
    assert_eq!(
        flat_rules(role),
        expected_rules(),
        "config/rbac matches the chart"
    );
    let binding = of_kind(&objs, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == role["metadata"]["name"])
        .expect("a RoleBinding of the watch Role");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["metadata"]["namespace"], "deepinfer-system");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "deepinfer-operator", "namespace": "deepinfer-system"}])
    );
    assert_leader_election_rbac(&objs, "deepinfer-system", &json!("deepinfer-operator"));
    let deploy = one(&objs, "Deployment");
    assert_eq!(deploy["metadata"]["namespace"], "deepinfer-system");
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(deploy["spec"]["strategy"]["type"], "RollingUpdate");
    let a = args(operator_container(deploy));
    assert!(a.contains(&"--leader-elect"), "{a:?}");
    assert_restricted(&deploy["spec"]["template"], "config/default Deployment");
    let c = operator_container(deploy);
    assert_eq!(
        env_value(c, "DEEPINFER_NAMESPACE").expect("watched namespace env")["valueFrom"]
            ["fieldRef"]["fieldPath"],
        "metadata.namespace",
        "it watches its own namespace, where its Role is"
    );
    assert_eq!(c["image"], "ghcr.io/deepinfer/deepinfer-operator:0.1.0");
    assert_eq!(
        env_value(c, "DEEPINFER_OPERATOR_IMAGE").expect("operator image env")["value"],
        "ghcr.io/deepinfer/deepinfer-operator:0.1.0",
        "the operator's Jobs use its own image"
    );
    assert!(a.contains(&"--metrics-secure"), "{a:?}");
    assert_probes_speak_https(c);
    let svc = one(&objs, "Service");
    assert_eq!(
        svc["spec"]["selector"],
        deploy["spec"]["selector"]["matchLabels"]
    );
}

#[test]
fn kustomize_samples_list_every_sample() {
    let objs = kustomize("config/samples");
    let listed: Vec<&str> = objs
        .iter()
        .filter(|o| o["kind"] == "DeepInferDeployment")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    let on_disk = std::fs::read_dir(root().join("config/samples"))
        .expect("config/samples")
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path())
                .map(|t| t.contains("kind: DeepInferDeployment"))
                .unwrap_or(false)
        })
        .count();
    assert_eq!(
        listed.len(),
        on_disk,
        "config/samples/kustomization.yaml lists {listed:?}"
    );
    assert_eq!(of_kind(&objs, "PersistentVolumeClaim").len(), 1);
}

/// The `deepinfer_*` series names an expression queries.
fn series_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("deepinfer_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        out.push(name);
    }
    out
}

#[test]
fn the_dashboard_queries_only_series_the_operator_serves_and_documents() {
    let path = root().join("charts/deepinfer-operator/files/grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is valid JSON");
    // What /metrics serves, as docs/metrics.md lists it (that file is checked current).
    let reference = deepinfer_operator::metrics::reference::metrics_reference();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut ids = std::collections::BTreeSet::new();
    let mut queried = std::collections::BTreeSet::new();
    let templating = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    let queries = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap_or_default().to_string())
        .chain(
            templating
                .iter()
                .filter_map(|v| v["query"].as_str().map(String::from)),
        );
    for expr in queries {
        for series in series_in(&expr) {
            assert!(
                reference.contains(&format!("`{series}`")),
                "{series} (in {expr:?}) is not a series docs/metrics.md lists"
            );
            queried.insert(series);
        }
    }
    for p in panels {
        assert!(
            ids.insert(p["id"].as_i64().expect("panel id")),
            "panel ids are unique"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
    }
    // On-call's questions: which deployment is not Ready, and its groups and verdict.
    for needed in [
        "deepinfer_deployment_ready",
        "deepinfer_deployment_groups",
        "deepinfer_deployment_acceptance",
    ] {
        assert!(queried.contains(needed), "the dashboard shows {needed}");
    }
}

#[test]
fn the_chart_ships_the_dashboard_for_grafanas_sidecar_when_asked() {
    assert!(
        of_kind(&template(&[]), "ConfigMap").is_empty(),
        "no dashboard unless asked"
    );
    let objs = template(&["metrics.grafanaDashboard.enabled=true"]);
    let cm = one(&objs, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped = cm["data"]["deepinfer-operator.json"]
        .as_str()
        .expect("the dashboard key");
    let file = std::fs::read_to_string(
        root().join("charts/deepinfer-operator/files/grafana-dashboard.json"),
    )
    .expect("the dashboard");
    assert_eq!(
        shipped.trim(),
        file.trim(),
        "the ConfigMap holds the file as it is"
    );
}

/// Every rule of `role` as (apiGroup, resource, verb) triples; `resourceNames` do not change
/// which triples a rule grants.
fn rule_triples(role: &Value) -> std::collections::BTreeSet<(String, String, String)> {
    let mut out = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for g in str_list(&rule["apiGroups"]) {
            for r in str_list(&rule["resources"]) {
                for v in str_list(&rule["verbs"]) {
                    out.insert((g.to_owned(), r.to_owned(), v.to_owned()));
                }
            }
        }
    }
    out
}

/// The `| API group | resources | verbs | why |` tables of the chart README's RBAC section, in
/// order, each as (apiGroup, resource, verb) triples: `core` is the empty group, backticks and a
/// parenthesised `resourceNames` note are dropped, several resources or verbs are comma-separated.
fn readme_rbac_tables() -> Vec<std::collections::BTreeSet<(String, String, String)>> {
    let readme = std::fs::read_to_string(chart().join("README.md")).expect("the chart README");
    let section = readme
        .split("\n## RBAC\n")
        .nth(1)
        .expect("an RBAC section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let mut tables = Vec::new();
    let mut current: Option<std::collections::BTreeSet<_>> = None;
    for line in section.lines() {
        if line.starts_with("| API group |") {
            current = Some(Default::default());
            continue;
        }
        let Some(table) = current.as_mut() else {
            continue;
        };
        if line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            tables.extend(current.take());
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let clean = |cell: &str| -> Vec<String> {
            let cell = cell.split(" (").next().unwrap_or_default();
            cell.split(',')
                .map(|p| p.trim().trim_matches('`').to_owned())
                .filter(|p| !p.is_empty())
                .collect()
        };
        let group = match cells[0].trim_matches('`') {
            "core" => String::new(),
            other => other.to_owned(),
        };
        for resource in clean(cells[1]) {
            for verb in clean(cells[2]) {
                table.insert((group.clone(), resource.clone(), verb));
            }
        }
    }
    tables.extend(current);
    tables
}

/// The chart README's RBAC tables say exactly what the chart grants: the watch rules, the
/// leader-election Role, the verdict-key Role, the metrics endpoint's ClusterRole and the
/// node-domain ClusterRole, in that order, rendered with every option that adds rights on.
#[test]
fn the_chart_readme_rbac_tables_are_what_the_chart_grants() {
    let objs = template(&["acceptedLicenses={mit}", "recordNodeDomains=true"]);
    let named = |kind: &str, suffix: &str| {
        of_kind(&objs, kind)
            .into_iter()
            .find(|r| r["metadata"]["name"] == format!("rel-deepinfer-operator{suffix}"))
            .unwrap_or_else(|| panic!("{kind} rel-deepinfer-operator{suffix}"))
    };
    let granted = [
        ("the watch Role", rule_triples(named("Role", ""))),
        (
            "the leader-election Role",
            rule_triples(named("Role", "-leader-election")),
        ),
        (
            "the verdict-key Role",
            rule_triples(named("Role", "-verdict-key")),
        ),
        (
            "the metrics-auth ClusterRole",
            rule_triples(named("ClusterRole", "-metrics-auth")),
        ),
        (
            "the nodes ClusterRole",
            rule_triples(named("ClusterRole", "-nodes")),
        ),
    ];
    let tables = readme_rbac_tables();
    assert_eq!(
        tables.len(),
        granted.len(),
        "one README table per role the chart renders: {tables:#?}"
    );
    for ((what, rules), table) in granted.iter().zip(&tables) {
        let missing: Vec<_> = rules.difference(table).collect();
        let extra: Vec<_> = table.difference(rules).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "the README's table for {what} differs from the chart: granted but not in the table {missing:?}, in the table but not granted {extra:?}"
        );
    }
}
