//! Pure planning: which containers of a pod are executed (and with which program), which
//! volumes they need, and how those volumes are bind-mounted inside the container's private
//! mount namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::{Container, Pod, Volume};

/// Maps image names (the last path segment without tag or digest, e.g. `deepinfer-operator` for
/// `ghcr.io/x/deepinfer-operator:dev`) to locally built binaries.
#[derive(Debug, Clone, Default)]
pub struct OwnBinaries(BTreeMap<String, PathBuf>);

impl OwnBinaries {
    /// Parses `NAME=PATH` arguments.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut map = BTreeMap::new();
        for arg in args {
            let (name, path) = arg
                .split_once('=')
                .filter(|(n, p)| !n.is_empty() && !p.is_empty())
                .ok_or_else(|| anyhow!("--own-binary expects NAME=PATH, got {arg:?}"))?;
            map.insert(name.to_string(), PathBuf::from(path));
        }
        Ok(OwnBinaries(map))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &PathBuf)> {
        self.0.iter()
    }

    /// The local binary for an image that is one of the project's own, if any.
    fn for_image(&self, image: &str) -> Option<&PathBuf> {
        self.0.get(image_name(image))
    }

    /// The local binary a command word stands for: the bare name or any path ending in `/NAME`.
    fn for_command(&self, word: &str) -> Option<&PathBuf> {
        let base = word.rsplit('/').next().unwrap_or(word);
        self.0.get(base)
    }
}

/// The repository's last path segment of an image reference, without tag or digest.
pub fn image_name(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split(':').next().unwrap_or(last)
}

/// How the agent runs one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerPlan {
    /// Reported running (or completed, for init containers) without running anything.
    Simulated,
    /// Run as a local process; `argv` still holds `$(VAR)` references to expand.
    Execute { argv: Vec<String> },
}

impl ContainerPlan {
    pub fn is_executed(&self) -> bool {
        matches!(self, ContainerPlan::Execute { .. })
    }
}

/// The plan of every container of a pod, by container name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodPlan {
    pub init: Vec<(String, ContainerPlan)>,
    pub main: Vec<(String, ContainerPlan)>,
}

impl PodPlan {
    pub fn executes_any(&self) -> bool {
        self.init
            .iter()
            .chain(&self.main)
            .any(|(_, p)| p.is_executed())
    }
}

/// Decides, for each container, whether it is executed.
///
/// Executed are: containers of one of the project's own images (a command word naming the
/// binary is replaced with the local build), and containers of any other image whose command
/// starts with a path inside an emptyDir that an executed init container also mounts, which
/// is how the acceptance runner is injected into the engine image.
pub fn plan_pod(pod: &Pod, own: &OwnBinaries) -> PodPlan {
    let Some(spec) = &pod.spec else {
        return PodPlan::default();
    };
    let init: Vec<(String, ContainerPlan)> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), plan_own_image(c, own)))
        .collect();
    // emptyDir volumes an executed init container can have populated.
    let empty_dirs: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name.as_str())
        .collect();
    let populated: BTreeSet<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .zip(&init)
        .filter(|(_, (_, p))| p.is_executed())
        .flat_map(|(c, _)| c.volume_mounts.iter().flatten())
        .map(|m| m.name.as_str())
        .filter(|n| empty_dirs.contains(n))
        .collect();
    let main = spec
        .containers
        .iter()
        .map(|c| {
            let plan = match plan_own_image(c, own) {
                ContainerPlan::Simulated if runs_from_volume(c, &populated) && !unpullable(c) => {
                    ContainerPlan::Execute {
                        argv: command_line(c),
                    }
                }
                plan => plan,
            };
            (c.name.clone(), plan)
        })
        .collect();
    PodPlan { init, main }
}

fn command_line(c: &Container) -> Vec<String> {
    c.command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .cloned()
        .collect()
}

/// Whether the container's image cannot be pulled (see [`faults::unpullable_image`]): it never
/// runs, and is reported waiting in `ImagePullBackOff`.
pub fn unpullable(c: &Container) -> bool {
    c.image
        .as_deref()
        .is_some_and(deepinfer_e2e::faults::unpullable_image)
}

fn plan_own_image(c: &Container, own: &OwnBinaries) -> ContainerPlan {
    if unpullable(c) {
        return ContainerPlan::Simulated;
    }
    let Some(image_binary) = c.image.as_deref().and_then(|i| own.for_image(i)) else {
        return ContainerPlan::Simulated;
    };
    let command = c.command.as_deref().unwrap_or_default();
    let args = c.args.as_deref().unwrap_or_default();
    let mut argv: Vec<String> = if command.is_empty() {
        // The image's entrypoint is the binary itself; tolerate args that repeat its name.
        let skip = args.first().and_then(|a| own.for_command(a)).is_some();
        std::iter::once(image_binary.display().to_string())
            .chain(args.iter().skip(usize::from(skip)).cloned())
            .collect()
    } else {
        command.iter().chain(args).cloned().collect()
    };
    if let Some(local) = own.for_command(&argv[0]) {
        argv[0] = local.display().to_string();
    }
    ContainerPlan::Execute { argv }
}

fn runs_from_volume(c: &Container, populated: &BTreeSet<&str>) -> bool {
    let Some(program) = c.command.as_ref().and_then(|cmd| cmd.first()) else {
        return false;
    };
    c.volume_mounts.iter().flatten().any(|m| {
        populated.contains(m.name.as_str())
            && Path::new(program).starts_with(&m.mount_path)
            && Path::new(program) != Path::new(&m.mount_path)
    })
}

/// One file of a materialised ConfigMap, Secret, token or downward-API volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// `items == None` projects every key under its own name.
    ConfigMap {
        name: String,
        items: Option<Vec<(String, String)>>,
        optional: bool,
    },
    Secret {
        name: String,
        items: Option<Vec<(String, String)>>,
        optional: bool,
    },
    /// A bound service-account token of the pod's service account, by TokenRequest.
    Token {
        audience: Option<String>,
        expiration_seconds: i64,
        path: String,
    },
    /// `(path, fieldPath)` pairs.
    DownwardApi(Vec<(String, String)>),
}

/// Where a volume's content comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    EmptyDir,
    HostPath {
        path: String,
        create: HostPathCreate,
    },
    Claim(String),
    Files(Vec<FileSource>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPathCreate {
    Nothing,
    Directory,
    File,
}

fn items(
    items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
) -> Option<Vec<(String, String)>> {
    items.map(|items| {
        items
            .iter()
            .map(|i| (i.key.clone(), i.path.clone()))
            .collect()
    })
}

/// Translates a pod volume into the source the agent materialises; unsupported kinds are errors.
pub fn volume_source(v: &Volume) -> Result<VolumeSource> {
    if v.empty_dir.is_some() {
        return Ok(VolumeSource::EmptyDir);
    }
    if let Some(h) = &v.host_path {
        let create = match h.type_.as_deref() {
            Some("DirectoryOrCreate") => HostPathCreate::Directory,
            Some("FileOrCreate") => HostPathCreate::File,
            _ => HostPathCreate::Nothing,
        };
        return Ok(VolumeSource::HostPath {
            path: h.path.clone(),
            create,
        });
    }
    if let Some(c) = &v.persistent_volume_claim {
        return Ok(VolumeSource::Claim(c.claim_name.clone()));
    }
    if let Some(cm) = &v.config_map {
        return Ok(VolumeSource::Files(vec![FileSource::ConfigMap {
            name: cm.name.clone(),
            items: items(cm.items.as_ref()),
            optional: cm.optional.unwrap_or(false),
        }]));
    }
    if let Some(s) = &v.secret {
        return Ok(VolumeSource::Files(vec![FileSource::Secret {
            name: s.secret_name.clone().unwrap_or_default(),
            items: items(s.items.as_ref()),
            optional: s.optional.unwrap_or(false),
        }]));
    }
    if let Some(d) = &v.downward_api {
        return Ok(VolumeSource::Files(vec![downward_files(d.items.as_ref())?]));
    }
    if let Some(p) = &v.projected {
        let mut files = Vec::new();
        for s in p.sources.iter().flatten() {
            if let Some(cm) = &s.config_map {
                files.push(FileSource::ConfigMap {
                    name: cm.name.clone(),
                    items: items(cm.items.as_ref()),
                    optional: cm.optional.unwrap_or(false),
                });
            } else if let Some(sec) = &s.secret {
                files.push(FileSource::Secret {
                    name: sec.name.clone(),
                    items: items(sec.items.as_ref()),
                    optional: sec.optional.unwrap_or(false),
                });
            } else if let Some(t) = &s.service_account_token {
                files.push(FileSource::Token {
                    audience: t.audience.clone(),
                    expiration_seconds: t.expiration_seconds.unwrap_or(3600),
                    path: t.path.clone(),
                });
            } else if let Some(d) = &s.downward_api {
                files.push(downward_files(d.items.as_ref())?);
            } else {
                bail!("volume {}: unsupported projected source", v.name);
            }
        }
        return Ok(VolumeSource::Files(files));
    }
    bail!("volume {}: unsupported volume type", v.name)
}

fn downward_files(
    items: Option<&Vec<k8s_openapi::api::core::v1::DownwardAPIVolumeFile>>,
) -> Result<FileSource> {
    let mut files = Vec::new();
    for item in items.into_iter().flatten() {
        let field = item.field_ref.as_ref().ok_or_else(|| {
            anyhow!(
                "downward API file {}: only fieldRef is supported",
                item.path
            )
        })?;
        files.push((item.path.clone(), field.field_path.clone()));
    }
    Ok(FileSource::DownwardApi(files))
}

/// A bind mount inside the container's mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// The binds for a container's volume mounts, given where each volume lives on the host.
pub fn plan_binds(c: &Container, volumes: &BTreeMap<String, PathBuf>) -> Result<Vec<Bind>> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let base = volumes
                .get(&m.name)
                .ok_or_else(|| anyhow!("volume mount {}: no volume {}", m.mount_path, m.name))?;
            let source = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) if sub.split('/').any(|part| part == "..") || sub.starts_with('/') => {
                    bail!("volume mount {}: invalid subPath {sub:?}", m.mount_path)
                }
                Some(sub) => base.join(sub),
                None => base.clone(),
            };
            Ok(Bind {
                source,
                target: m.mount_path.clone(),
                read_only: m.read_only.unwrap_or(false),
            })
        })
        .collect()
}

/// Names of the volumes the executed containers of a pod mount.
pub fn volumes_in_use<'a>(pod: &'a Pod, plan: &PodPlan) -> BTreeSet<&'a str> {
    let Some(spec) = &pod.spec else {
        return BTreeSet::new();
    };
    let executed: BTreeSet<&str> = plan
        .init
        .iter()
        .chain(&plan.main)
        .filter(|(_, p)| p.is_executed())
        .map(|(n, _)| n.as_str())
        .collect();
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| executed.contains(c.name.as_str()))
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .map(|m| m.name.as_str())
        .collect()
}

/// Quotes a word for `/bin/sh`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A `/bin/sh` script that performs the binds (each source is a directory or a file, as
/// `source_is_dir` says), changes to `workdir` and then runs its positional arguments and
/// exits with their status.
///
/// The shell stays as the first process of the container's PID namespace, where no signal
/// without a handler reaches it from outside: the container's program runs as its child, so a
/// SIGTERM to the container's process group reaches the program as it would a container's
/// main process under a runtime's init, and when the program ends the shell ends, which ends
/// every other process of the container.
///
/// Mount points are created on the host file system when missing (they stay empty there);
/// the mounts themselves live only in the container's private mount namespace.
pub fn mount_script(binds: &[(Bind, bool)], workdir: Option<&str>) -> String {
    let mut script = String::from("set -e\n");
    for (bind, source_is_dir) in binds {
        let target = quote(&bind.target);
        if *source_is_dir {
            script.push_str(&format!("mkdir -p {target}\n"));
        } else {
            let parent = Path::new(&bind.target)
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "/".into());
            script.push_str(&format!(
                "mkdir -p {}\n[ -e {target} ] || : > {target}\n",
                quote(&parent)
            ));
        }
        script.push_str(&format!(
            "mount --bind {} {target}\n",
            quote(&bind.source.display().to_string())
        ));
        if bind.read_only {
            script.push_str(&format!("mount -o remount,bind,ro {target}\n"));
        }
    }
    if let Some(dir) = workdir.filter(|d| !d.is_empty()) {
        script.push_str(&format!("mkdir -p {0}\ncd {0}\n", quote(dir)));
    }
    script.push_str("\"$@\"\nexit \"$?\"\n");
    script
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn own() -> OwnBinaries {
        OwnBinaries::parse(&["deepinfer-operator=/build/deepinfer-operator".to_string()]).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn argv(plan: &ContainerPlan) -> Vec<&str> {
        match plan {
            ContainerPlan::Execute { argv } => argv.iter().map(String::as_str).collect(),
            ContainerPlan::Simulated => panic!("not executed"),
        }
    }

    #[test]
    fn image_names_ignore_registry_tag_and_digest() {
        assert_eq!(image_name("deepinfer-operator:dev"), "deepinfer-operator");
        assert_eq!(
            image_name("ghcr.io/x/deepinfer-operator:dev"),
            "deepinfer-operator"
        );
        assert_eq!(
            image_name("localhost:5000/deepinfer-operator"),
            "deepinfer-operator"
        );
        assert_eq!(
            image_name("reg.io/deepinfer-operator@sha256:abc"),
            "deepinfer-operator"
        );
        assert_eq!(
            image_name("deepinfer-operator:1@sha256:abc"),
            "deepinfer-operator"
        );
        assert_eq!(image_name("nginx"), "nginx");
    }

    #[test]
    fn own_binary_argument_must_be_name_and_path() {
        assert!(OwnBinaries::parse(&["x".into()]).is_err());
        assert!(OwnBinaries::parse(&["=y".into()]).is_err());
        assert!(OwnBinaries::parse(&["x=".into()]).is_err());
    }

    #[test]
    fn own_image_commands_map_to_the_local_binary() {
        let p = pod(json!({"containers": [
            {"name": "a", "image": "deepinfer-operator:dev", "command": ["deepinfer-operator", "--version"]},
            {"name": "b", "image": "ghcr.io/x/deepinfer-operator@sha256:00", "command": ["/usr/local/bin/deepinfer-operator"], "args": ["verify"]},
            {"name": "c", "image": "deepinfer-operator", "args": ["accept", "--x"]},
            {"name": "d", "image": "deepinfer-operator", "args": ["deepinfer-operator", "accept"]},
            {"name": "e", "image": "deepinfer-operator", "command": ["sh", "-c", "true"]},
            {"name": "f", "image": "deepinfer:1.0", "command": ["deepinfer-operator"]},
        ]}));
        let plan = plan_pod(&p, &own());
        let m = &plan.main;
        assert_eq!(argv(&m[0].1), ["/build/deepinfer-operator", "--version"]);
        assert_eq!(argv(&m[1].1), ["/build/deepinfer-operator", "verify"]);
        assert_eq!(
            argv(&m[2].1),
            ["/build/deepinfer-operator", "accept", "--x"]
        );
        assert_eq!(argv(&m[3].1), ["/build/deepinfer-operator", "accept"]);
        assert_eq!(argv(&m[4].1), ["sh", "-c", "true"]);
        // Another image cannot contain the binary unless it was injected into a volume.
        assert_eq!(m[5].1, ContainerPlan::Simulated);
        assert!(plan.executes_any());
    }

    #[test]
    fn injected_runner_in_another_image_is_executed() {
        let p = pod(json!({
        "volumes": [{"name": "runner", "emptyDir": {}}, {"name": "other", "emptyDir": {}}],
        "initContainers": [{"name": "inject", "image": "deepinfer-operator:dev",
            "command": ["deepinfer-operator", "install-runner", "/runner"],
            "volumeMounts": [{"name": "runner", "mountPath": "/runner"}]}],
        "containers": [
            {"name": "engine", "image": "deepinfer:1.0", "command": ["/runner/deepinfer-operator", "accept"],
             "volumeMounts": [{"name": "runner", "mountPath": "/runner"}]},
            {"name": "other", "image": "deepinfer:1.0", "command": ["/other/x"],
             "volumeMounts": [{"name": "other", "mountPath": "/other"}]},
            {"name": "worker", "image": "deepinfer:1.0"},
        ]}));
        let plan = plan_pod(&p, &own());
        assert_eq!(
            argv(&plan.init[0].1),
            ["/build/deepinfer-operator", "install-runner", "/runner"]
        );
        // The runner's path is kept: it resolves inside the container's mount namespace.
        assert_eq!(
            argv(&plan.main[0].1),
            ["/runner/deepinfer-operator", "accept"]
        );
        assert_eq!(plan.main[1].1, ContainerPlan::Simulated);
        assert_eq!(plan.main[2].1, ContainerPlan::Simulated);
        let used = volumes_in_use(&p, &plan);
        assert_eq!(used.into_iter().collect::<Vec<_>>(), ["runner"]);
    }

    #[test]
    fn worker_pods_are_simulated() {
        let p = pod(
            json!({"containers": [{"name": "w", "image": "deepinfer:1.0", "command": ["/bin/engine"]}]}),
        );
        assert!(!plan_pod(&p, &own()).executes_any());
    }

    #[test]
    fn volumes_translate_to_sources() {
        let p = pod(json!({"containers": [], "volumes": [
            {"name": "a", "emptyDir": {}},
            {"name": "b", "hostPath": {"path": "/data", "type": "DirectoryOrCreate"}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "ckpt"}},
            {"name": "d", "configMap": {"name": "cm", "items": [{"key": "k", "path": "sub/f"}]}},
            {"name": "e", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 7200}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "f", "nfs": {"server": "x", "path": "/"}},
        ]}));
        let vols = p.spec.unwrap().volumes.unwrap();
        let sources: Vec<_> = vols.iter().map(volume_source).collect();
        assert_eq!(sources[0].as_ref().unwrap(), &VolumeSource::EmptyDir);
        assert_eq!(
            sources[1].as_ref().unwrap(),
            &VolumeSource::HostPath {
                path: "/data".into(),
                create: HostPathCreate::Directory
            }
        );
        assert_eq!(
            sources[2].as_ref().unwrap(),
            &VolumeSource::Claim("ckpt".into())
        );
        assert_eq!(
            sources[3].as_ref().unwrap(),
            &VolumeSource::Files(vec![FileSource::ConfigMap {
                name: "cm".into(),
                items: Some(vec![("k".into(), "sub/f".into())]),
                optional: false
            }])
        );
        let VolumeSource::Files(files) = sources[4].as_ref().unwrap() else {
            panic!()
        };
        assert_eq!(
            files[0],
            FileSource::Token {
                audience: None,
                expiration_seconds: 7200,
                path: "token".into()
            }
        );
        assert_eq!(
            files[2],
            FileSource::DownwardApi(vec![("namespace".into(), "metadata.namespace".into())])
        );
        assert!(sources[5].is_err());
    }

    #[test]
    fn binds_follow_mounts_and_sub_paths() {
        let c: Container = serde_json::from_value(json!({"name": "c", "volumeMounts": [
            {"name": "a", "mountPath": "/data"},
            {"name": "a", "mountPath": "/etc/x.conf", "subPath": "conf/x.conf", "readOnly": true},
        ]}))
        .unwrap();
        let vols = BTreeMap::from([("a".to_string(), PathBuf::from("/pods/1/a"))]);
        let binds = plan_binds(&c, &vols).unwrap();
        assert_eq!(
            binds[0],
            Bind {
                source: "/pods/1/a".into(),
                target: "/data".into(),
                read_only: false
            }
        );
        assert_eq!(
            binds[1],
            Bind {
                source: "/pods/1/a/conf/x.conf".into(),
                target: "/etc/x.conf".into(),
                read_only: true
            }
        );
        let bad: Container = serde_json::from_value(
            json!({"name": "c", "volumeMounts": [{"name": "a", "mountPath": "/d", "subPath": "../x"}]}),
        )
        .unwrap();
        assert!(plan_binds(&bad, &vols).is_err());
        let missing: Container = serde_json::from_value(
            json!({"name": "c", "volumeMounts": [{"name": "z", "mountPath": "/d"}]}),
        )
        .unwrap();
        assert!(plan_binds(&missing, &vols).is_err());
    }

    #[test]
    fn mount_script_binds_then_runs_the_command() {
        let binds = vec![
            (
                Bind {
                    source: "/s/dir".into(),
                    target: "/data".into(),
                    read_only: true,
                },
                true,
            ),
            (
                Bind {
                    source: "/s/it's".into(),
                    target: "/dev/termination-log".into(),
                    read_only: false,
                },
                false,
            ),
        ];
        let script = mount_script(&binds, Some("/data"));
        assert_eq!(
            script,
            "set -e\n\
             mkdir -p '/data'\nmount --bind '/s/dir' '/data'\nmount -o remount,bind,ro '/data'\n\
             mkdir -p '/dev'\n[ -e '/dev/termination-log' ] || : > '/dev/termination-log'\n\
             mount --bind '/s/it'\\''s' '/dev/termination-log'\n\
             mkdir -p '/data'\ncd '/data'\n\"$@\"\nexit \"$?\"\n"
        );
    }
}
