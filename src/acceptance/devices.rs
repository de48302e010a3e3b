//! Device inventory for the manifest: `nvidia-smi` or `npu-smi` when present, else the
//! visible-devices environment.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Environment variables that name the devices a container sees.
pub const VISIBLE_DEVICES_ENV: [&str; 4] = [
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
];
/// Most bytes of `npu-smi info` output kept.
const MAX_TOOL_OUTPUT: usize = 16 * 1024;
const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// One accelerator as `nvidia-smi` reports it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Index on the node.
    pub index: String,
    /// Product name.
    pub name: String,
    /// Stable device id.
    pub uuid: String,
    /// Total memory as reported (e.g. `143771 MiB`).
    pub memory_total: String,
}

/// What the engine side could learn about its devices.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInventory {
    /// `nvidia-smi`, `npu-smi`, `env` or `none`.
    pub source: String,
    /// Devices listed by `nvidia-smi`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// Raw `npu-smi info` output (its table has no stable machine format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npu_smi: Option<String>,
    /// Visible-devices variables that are set.
    #[serde(default)]
    pub visible_devices: BTreeMap<String, String>,
}

impl DeviceInventory {
    /// How many devices the container saw: `nvidia-smi`'s rows, else the first visible-devices
    /// variable's comma-separated entries; `None` when neither names them one by one (`npu-smi`'s
    /// table, `all`, nothing at all).
    pub fn count_seen(&self) -> Option<usize> {
        if !self.devices.is_empty() {
            return Some(self.devices.len());
        }
        if self.source != "env" {
            return None;
        }
        let listed = VISIBLE_DEVICES_ENV
            .iter()
            .find_map(|k| self.visible_devices.get(*k))?;
        let entries: Vec<&str> = listed
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        let named = !entries.is_empty()
            && entries
                .iter()
                .all(|e| !matches!(e.to_ascii_lowercase().as_str(), "all" | "none" | "void"));
        named.then_some(entries.len())
    }
}

/// Parses `nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader`.
pub fn parse_nvidia_smi(csv: &str) -> Vec<Device> {
    csv.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            match fields.as_slice() {
                [index, name, uuid, memory] => Some(Device {
                    index: index.to_string(),
                    name: name.to_string(),
                    uuid: uuid.to_string(),
                    memory_total: memory.to_string(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// Builds the inventory from tool output (if any) and the environment.
pub fn inventory_from(
    nvidia_smi: Option<&str>,
    npu_smi: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> DeviceInventory {
    let visible_devices: BTreeMap<String, String> = VISIBLE_DEVICES_ENV
        .iter()
        .filter_map(|k| env(k).map(|v| (k.to_string(), v)))
        .collect();
    let devices = nvidia_smi.map(parse_nvidia_smi).unwrap_or_default();
    let (source, npu_smi) = if !devices.is_empty() {
        ("nvidia-smi", None)
    } else if let Some(raw) = npu_smi.filter(|s| !s.trim().is_empty()) {
        ("npu-smi", Some(cap(raw)))
    } else if !visible_devices.is_empty() {
        ("env", None)
    } else {
        ("none", None)
    };
    DeviceInventory {
        source: source.into(),
        devices,
        npu_smi,
        visible_devices,
    }
}

fn cap(raw: &str) -> String {
    if raw.len() <= MAX_TOOL_OUTPUT {
        return raw.to_string();
    }
    let mut end = MAX_TOOL_OUTPUT;
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[truncated: {} of {} bytes kept]",
        &raw[..end],
        end,
        raw.len()
    )
}

/// Queries the tools present on this machine, then the environment.
pub async fn inventory() -> DeviceInventory {
    let nvidia = tool_output(
        "nvidia-smi",
        &[
            "--query-gpu=index,name,uuid,memory.total",
            "--format=csv,noheader",
        ],
    )
    .await;
    let npu = if nvidia.is_some() {
        None
    } else {
        tool_output("npu-smi", &["info"]).await
    };
    inventory_from(nvidia.as_deref(), npu.as_deref(), |k| std::env::var(k).ok())
}

/// Stdout of a successful run of `program`, or `None` when it is absent, fails or hangs.
async fn tool_output(program: &str, args: &[&str]) -> Option<String> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(TOOL_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_seen_are_counted_only_when_named_one_by_one() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let listed = inventory_from(None, None, env(&[("ASCEND_VISIBLE_DEVICES", "0,1,2,3")]));
        assert_eq!(listed.count_seen(), Some(4));
        let all = inventory_from(None, None, env(&[("NVIDIA_VISIBLE_DEVICES", "all")]));
        assert_eq!(all.count_seen(), None);
        let smi = inventory_from(
            Some("0, NVIDIA H200, GPU-a, 143771 MiB\n1, NVIDIA H200, GPU-b, 143771 MiB\n"),
            None,
            env(&[("NVIDIA_VISIBLE_DEVICES", "all")]),
        );
        assert_eq!(smi.count_seen(), Some(2));
        let npu = inventory_from(None, Some("+---+ table"), env(&[]));
        assert_eq!(npu.count_seen(), None);
        assert_eq!(inventory_from(None, None, env(&[])).count_seen(), None);
    }

    #[test]
    fn nvidia_smi_rows_become_devices() {
        let csv = "0, NVIDIA H200, GPU-1b2c, 143771 MiB\n1, NVIDIA H200, GPU-3d4e, 143771 MiB\n\n";
        let inv = inventory_from(Some(csv), None, |_| Some("0,1".into()));
        assert_eq!(inv.source, "nvidia-smi");
        assert_eq!(inv.devices.len(), 2);
        assert_eq!(inv.devices[1].uuid, "GPU-3d4e");
        assert_eq!(inv.visible_devices.len(), 4);
    }

    #[test]
    fn falls_back_to_npu_smi_then_env_then_none() {
        assert_eq!(
            inventory_from(None, Some("+---+ NPU 910B +"), |_| None).source,
            "npu-smi"
        );
        let env = inventory_from(None, None, |k| {
            (k == "ASCEND_VISIBLE_DEVICES").then(|| "0-7".into())
        });
        assert_eq!(env.source, "env");
        assert_eq!(env.visible_devices["ASCEND_VISIBLE_DEVICES"], "0-7");
        assert_eq!(inventory_from(Some(""), None, |_| None).source, "none");
    }
}
