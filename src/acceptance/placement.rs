//! Where each rank of an acceptance run ran: its pod, node, scale-up domain and devices. The
//! operator records it, not the judge: the run's pods are placed by the scheduler after their
//! Jobs are created, and the judge sees only its own pod. When the operator records the verdict
//! it writes this record, built from the run's pods as its cache holds them (and the nodes'
//! domain labels, when it may read nodes), into the evidence ConfigMap's annotation
//! [`PLACEMENT_ANNOTATION`], once. Nothing the engine or the judge writes goes into it: the
//! judge's evidence write keeps the ConfigMap's annotations as they are, and a `placement` key in
//! `manifest.json` is never read.

use serde::{Deserialize, Serialize};

/// Annotation of the evidence ConfigMap holding the run's placement (compact JSON).
pub const PLACEMENT_ANNOTATION: &str = "deepinfer.io/placement";

/// Most ranks one record lists (an annotation holds at most 256 KiB with its siblings); the
/// others are counted in [`Placement::omitted_ranks`].
pub const PLACEMENT_RANK_LIMIT: usize = 512;

/// The run's placement: one row per rank of every group of the run, the judged role first.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Node label whose value names the scale-up domain (`spec.accelerator.scaleUpDomainKey`).
    pub domain_key: String,
    /// Why no rank's domain was read, when none was (the operator may not read nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains_not_read: Option<String>,
    /// One row per rank's pod, role by role (judged role first), rank order.
    pub ranks: Vec<RankPlacement>,
    /// Ranks left out beyond [`PLACEMENT_RANK_LIMIT`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_ranks: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Where one rank's pod ran.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RankPlacement {
    /// The role of the rank's group.
    pub role: String,
    /// The rank in its group.
    pub rank: i32,
    /// The pod of the rank's Job; `None` when the run had none for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The node the scheduler bound the pod to (`spec.nodeName`); `None` when never bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The node's value of the scale-up-domain label; `None` when not read or not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The devices the pod was given.
    pub devices: RankDevices,
}

/// The devices of one rank's pod.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RankDevices {
    /// What was requested: the extended resource (`nvidia.com/gpu`, `huawei.com/Ascend910`) or
    /// `class <DeviceClass>` with Dynamic Resource Allocation.
    pub resource: String,
    /// How many (the pod's request, equal to its limit).
    pub count: i32,
    /// Ascend: the NPU ids the device plugin allocated (its allocation annotation on the pod),
    /// in device-id order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// With Dynamic Resource Allocation: the pod's ResourceClaims as `<claim in the pod>=<the
    /// ResourceClaim's name>` (the template's name while the claim is not yet made).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<String>,
    /// Why the ids are missing (Ascend: no or an unreadable allocation annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Placement {
    /// Reads the record from the annotation's value; `Err` names what is wrong.
    pub fn parse(value: &str) -> Result<Self, String> {
        serde_json::from_str(value).map_err(|e| {
            format!("annotation {PLACEMENT_ANNOTATION} is not a placement record: {e}")
        })
    }

    /// The annotation's value (compact JSON).
    pub fn annotation_value(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The distinct nodes the ranks ran on, in order.
    pub fn nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = self.ranks.iter().filter_map(|r| r.node.clone()).collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// Each rank's domain from `domain_of` (the node's value of [`Placement::domain_key`]).
    pub fn with_domains(mut self, domain_of: impl Fn(&str) -> Option<String>) -> Self {
        for rank in &mut self.ranks {
            rank.domain = rank.node.as_deref().and_then(&domain_of);
        }
        self.domains_not_read = None;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_domains_follow_each_ranks_node() {
        let rank = |rank, node: Option<&str>| RankPlacement {
            role: "decode".into(),
            rank,
            pod: Some(format!("p-{rank}")),
            node: node.map(str::to_string),
            domain: None,
            devices: RankDevices {
                resource: "nvidia.com/gpu".into(),
                count: 8,
                ..RankDevices::default()
            },
        };
        let record = Placement {
            domain_key: "nvidia.com/gpu.clique".into(),
            domains_not_read: Some("not read".into()),
            ranks: vec![rank(0, Some("n-2")), rank(1, Some("n-1")), rank(2, None)],
            omitted_ranks: 0,
        };
        assert_eq!(record.nodes(), ["n-1", "n-2"]);
        let filled = record.with_domains(|node| (node == "n-2").then(|| "clique-b".to_string()));
        let domains: Vec<Option<&str>> = filled.ranks.iter().map(|r| r.domain.as_deref()).collect();
        assert_eq!(domains, [Some("clique-b"), None, None]);
        assert_eq!(filled.domains_not_read, None);
        let back = Placement::parse(&filled.annotation_value()).expect("reads back");
        assert_eq!(back, filled);
        let err = Placement::parse("{}").unwrap_err();
        assert!(err.contains(PLACEMENT_ANNOTATION), "{err}");
    }
}
