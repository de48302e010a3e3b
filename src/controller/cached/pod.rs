//! The cached `Pod`: the fields a pass reads, packed.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Pod, PodCondition, PodResourceClaim,
    PodResourceClaimStatus, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;

use super::meta::*;

/// A pod as the cache keeps it: its metadata (cut down, see [`Marks`]) and, in one allocation
/// ([`PodRun`]), its node and device claims and of its status the phase, reason, message,
/// addresses, start, the conditions a pass reads and each container's name, readiness, restarts
/// and states. No pass reads the rest of a pod.
#[derive(Clone, Debug, Default)]
pub struct CachedPod {
    pub(crate) metadata: Slim,
    pub(crate) run: PodRun,
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Slim,
            #[serde(default)]
            spec: Option<PlacementWire>,
            #[serde(default)]
            status: Option<RunWire>,
        }
        let wire = Wire::deserialize(deserializer)?;
        Ok(Self {
            metadata: wire.metadata,
            run: PodRun::pack(wire.spec.as_ref(), wire.status.as_ref()),
        })
    }
}

/// What a cached pod keeps of a pod's spec, as decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PlacementWire {
    pub(crate) node_name: Option<String>,
    pub(crate) resource_claims: Option<Vec<PodResourceClaim>>,
}

/// What a cached pod keeps of a pod's status, as decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunWire {
    pub(crate) phase: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) message: Option<String>,
    #[serde(rename = "podIP")]
    pub(crate) pod_ip: Option<String>,
    #[serde(rename = "hostIP")]
    pub(crate) host_ip: Option<String>,
    pub(crate) start_time: Option<Time>,
    pub(crate) conditions: Option<Vec<PodCondition>>,
    pub(crate) init_container_statuses: Option<Vec<ContainerWire>>,
    pub(crate) container_statuses: Option<Vec<ContainerWire>>,
    pub(crate) resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
}

/// What a cached pod keeps of a container's status, as decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContainerWire {
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) ready: bool,
    #[serde(default)]
    pub(crate) restart_count: i32,
    pub(crate) started: Option<bool>,
    pub(crate) state: Option<ContainerState>,
    pub(crate) last_state: Option<ContainerState>,
}

/// The statuses a condition has in the API, kept as an index rather than as text.
pub(crate) const CONDITION_STATUSES: &[&str] = &["True", "False", "Unknown"];

/// Writes the fields of a packed record one after the other; [`Fields`] reads them back in the
/// same order.
#[derive(Default)]
pub(crate) struct Packer(Vec<u8>);

impl Packer {
    fn text(&mut self, text: Option<&str>) {
        push_text(&mut self.0, text);
    }

    fn byte(&mut self, byte: u8) {
        self.0.push(byte);
    }

    fn stamp(&mut self, time: Option<&Time>) {
        self.0.extend_from_slice(&Stamp::of(time).0.to_le_bytes());
    }

    fn int(&mut self, value: i32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    /// `Some(true)`, `Some(false)` or `None` in one byte.
    fn flag(&mut self, value: Option<bool>) {
        self.byte(value.map_or(ABSENT, u8::from));
    }

    /// A value of a type rare where it is kept, as JSON text.
    fn json<T: serde::Serialize>(&mut self, value: Option<&T>) {
        let text = value.and_then(|v| serde_json::to_string(v).ok());
        self.text(text.as_deref());
    }

    /// How many of `items` follow ([`ABSENT`]: none at all, `None`; at most 253 are kept), and
    /// those items.
    fn items<T>(
        &mut self,
        items: Option<impl ExactSizeIterator<Item = T>>,
        mut each: impl FnMut(&mut Self, T),
    ) {
        let Some(items) = items else {
            self.byte(ABSENT);
            return;
        };
        let count = u8::try_from(items.len()).map_or(LONG - 1, |n| n.min(LONG - 1));
        self.byte(count);
        for item in items.take(usize::from(count)) {
            each(self, item);
        }
    }
}

/// Reads what a [`Packer`] wrote, field by field; past the end every field reads as absent.
pub(crate) struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn text(&mut self) -> Option<&'a str> {
        let (text, rest) = next_text(self.0)?;
        self.0 = rest;
        text
    }

    fn owned(&mut self) -> Option<String> {
        self.text().map(str::to_string)
    }

    fn byte(&mut self) -> Option<u8> {
        let (&byte, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(byte)
    }

    fn time(&mut self) -> Option<Time> {
        let (bytes, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Stamp(i64::from_le_bytes(*bytes)).time()
    }

    fn int(&mut self) -> i32 {
        let Some((bytes, rest)) = self.0.split_first_chunk::<4>() else {
            return 0;
        };
        self.0 = rest;
        i32::from_le_bytes(*bytes)
    }

    fn flag(&mut self) -> Option<bool> {
        self.byte().filter(|&b| b != ABSENT).map(|b| b != 0)
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Option<T> {
        serde_json::from_str(self.text()?).ok()
    }

    /// The items [`Packer::items`] wrote, each read by `each`.
    fn items<T>(&mut self, mut each: impl FnMut(&mut Self) -> T) -> Option<Vec<T>> {
        let count = self.byte().filter(|&n| n != ABSENT)?;
        Some((0..count).map(|_| each(self)).collect())
    }
}

/// A cached pod's node, device claims and status in one allocation, as [`PodRun::pack`] writes
/// them and [`PodRun::unpack`] reads them: texts with a byte of length, times in 8 bytes, a
/// condition's type and status as indexes (only the conditions of [`KEPT_POD_CONDITIONS`]), a
/// container's state as the one member the API sets (a running one as its start). What is rare on
/// the pods a cache holds (device claims, a waiting or terminated container) is kept as JSON
/// text. Separate fields would take a dozen allocations a pod.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodRun(pub(crate) Box<[u8]>);

/// The first byte of a [`PodRun`]: which of the spec and status follow.
pub(crate) const HAS_SPEC: u8 = 1;
pub(crate) const HAS_STATUS: u8 = 2;

/// A container state in a [`PodRun`]: the member that follows.
pub(crate) const RUNNING: u8 = 1;
pub(crate) const TERMINATED: u8 = 2;
pub(crate) const WAITING: u8 = 3;

impl PodRun {
    fn pack(spec: Option<&PlacementWire>, status: Option<&RunWire>) -> Self {
        let mut p = Packer::default();
        let has = u8::from(spec.is_some()) * HAS_SPEC + u8::from(status.is_some()) * HAS_STATUS;
        if has == 0 {
            return Self::default();
        }
        p.byte(has);
        if let Some(spec) = spec {
            p.text(spec.node_name.as_deref());
            p.json(spec.resource_claims.as_ref());
        }
        if let Some(s) = status {
            for text in [&s.phase, &s.reason, &s.message, &s.pod_ip, &s.host_ip] {
                p.text(text.as_deref());
            }
            p.stamp(s.start_time.as_ref());
            let kept: Option<Vec<(u8, &PodCondition)>> = s.conditions.as_ref().map(|all| {
                all.iter()
                    .filter_map(|c| {
                        let type_ = KEPT_POD_CONDITIONS.iter().position(|&t| t == c.type_)?;
                        Some((u8::try_from(type_).ok()?, c))
                    })
                    .collect()
            });
            p.items(kept.map(Vec::into_iter), |p, (type_, c)| {
                p.byte(type_);
                let status = CONDITION_STATUSES.iter().position(|&s| s == c.status);
                p.byte(status.and_then(|s| u8::try_from(s).ok()).unwrap_or(ABSENT));
                p.stamp(c.last_transition_time.as_ref());
                p.text(c.reason.as_deref());
                p.text(c.message.as_deref());
                if status.is_none() {
                    p.text(Some(&c.status));
                }
            });
            for containers in [&s.init_container_statuses, &s.container_statuses] {
                p.items(containers.as_ref().map(|c| c.iter()), |p, c| {
                    p.text(Some(&c.name));
                    p.byte(u8::from(c.ready));
                    p.int(c.restart_count);
                    p.flag(c.started);
                    for state in [&c.state, &c.last_state] {
                        match state {
                            // Of a state with more than one member set (the API sets one), the
                            // terminated one is kept, else the waiting one.
                            Some(ContainerState {
                                terminated: Some(t),
                                ..
                            }) => {
                                p.byte(TERMINATED);
                                p.json(Some(t));
                            }
                            Some(ContainerState {
                                waiting: Some(w), ..
                            }) => {
                                p.byte(WAITING);
                                p.json(Some(w));
                            }
                            Some(ContainerState {
                                running: Some(r), ..
                            }) => {
                                p.byte(RUNNING);
                                p.stamp(r.started_at.as_ref());
                            }
                            // `lastState: {}` of a container never restarted: no state.
                            _ => p.byte(ABSENT),
                        }
                    }
                });
            }
            p.json(s.resource_claim_statuses.as_ref());
        }
        Self(p.0.into_boxed_slice())
    }

    fn unpack(&self) -> (Option<PodSpec>, Option<PodStatus>) {
        let mut f = Fields(&self.0);
        let has = f.byte().unwrap_or(0);
        let spec = (has & HAS_SPEC != 0).then(|| PodSpec {
            node_name: f.owned(),
            resource_claims: f.json(),
            ..PodSpec::default()
        });
        let status = (has & HAS_STATUS != 0).then(|| {
            let [phase, reason, message, pod_ip, host_ip] = [(); 5].map(|()| f.owned());
            let start_time = f.time();
            let conditions = f.items(|f| {
                let type_ = f
                    .byte()
                    .and_then(|t| KEPT_POD_CONDITIONS.get(usize::from(t)));
                let status = f
                    .byte()
                    .and_then(|s| CONDITION_STATUSES.get(usize::from(s)));
                let last_transition_time = f.time();
                let (reason, message) = (f.owned(), f.owned());
                PodCondition {
                    type_: type_.map(|t| t.to_string()).unwrap_or_default(),
                    status: match status {
                        Some(s) => s.to_string(),
                        None => f.owned().unwrap_or_default(),
                    },
                    reason,
                    message,
                    last_transition_time,
                    ..PodCondition::default()
                }
            });
            let mut containers = || {
                f.items(|f| {
                    let (name, ready, restart_count, started) =
                        (f.owned(), f.byte(), f.int(), f.flag());
                    let [state, last_state] = [(); 2].map(|()| match f.byte() {
                        Some(RUNNING) => Some(ContainerState {
                            running: Some(ContainerStateRunning {
                                started_at: f.time(),
                            }),
                            ..ContainerState::default()
                        }),
                        Some(TERMINATED) => Some(ContainerState {
                            terminated: f.json(),
                            ..ContainerState::default()
                        }),
                        Some(WAITING) => Some(ContainerState {
                            waiting: f.json(),
                            ..ContainerState::default()
                        }),
                        _ => None,
                    });
                    ContainerStatus {
                        name: name.unwrap_or_default(),
                        ready: ready == Some(1),
                        restart_count,
                        started,
                        state,
                        last_state,
                        ..ContainerStatus::default()
                    }
                })
            };
            let init_container_statuses = containers();
            let container_statuses = containers();
            PodStatus {
                phase,
                reason,
                message,
                pod_ip,
                host_ip,
                start_time,
                conditions,
                init_container_statuses,
                container_statuses,
                resource_claim_statuses: f.json(),
                ..PodStatus::default()
            }
        });
        (spec, status)
    }
}

impl Cached for CachedPod {
    type Api = Pod;

    fn to_api(&self) -> Pod {
        let (spec, status) = self.run.unpack();
        Pod {
            metadata: self.metadata.full(),
            spec,
            status,
        }
    }
}
