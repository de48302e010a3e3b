//! What a pass writes. A gate's plan (see [`crate::controller::gates`]) is a list of [`Act`]s;
//! the executor ([`crate::controller::executor`]) carries them out in order and stops at the
//! first that fails, so
//! that an act that depends on an earlier one (a group's pods on its PodGroup) never runs
//! without it. Housekeeping acts (a finished Job's TTL, old evidence, warnings) are best effort:
//! their failure is logged and the rest goes on.
//!
//! Every object kind the operator writes is one variant of [`Object`] (what it wants) and of
//! [`Held`] (what its cache holds, for an apply that compares or a delete with the observed UID
//! as precondition); the pure helpers [`converge`] and [`delete_named`] turn desired and cached
//! objects of one kind into acts.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::Reason;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};

use crate::api::{DeepInferRole, DeepInferRoleStatus};
use crate::controller::apply;
use crate::controller::error::Error;
use crate::controller::gates::licence::entitlement::Mark;

/// A kind of object the operator writes (see [`Object`]).
pub trait Kind: Resource + Sized {
    /// `desired`, to be applied over `existing` (the cached copy, if held).
    fn applied(desired: Self, existing: Option<&Self>) -> Applied<'_>;
    /// The object, to be created.
    fn object(self) -> Object;
    /// The cached object, to be deleted.
    fn held(&self) -> Held<'_>;
}

macro_rules! kinds {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// An object the operator wants, of one of the kinds it writes (boxed: a Pod is large).
        #[derive(Clone, Debug)]
        pub enum Object {
            $(#[doc = stringify!($ty)] $variant(Box<$ty>)),*
        }

        /// An object as the cache holds it.
        #[derive(Clone, Copy, Debug)]
        pub enum Held<'a> {
            $(#[doc = stringify!($ty)] $variant(&'a $ty)),*
        }

        /// A desired object and its cached copy of the same kind, if the cache holds one.
        #[derive(Clone, Debug)]
        pub enum Applied<'a> {
            $(#[doc = stringify!($ty)] $variant(Box<$ty>, Option<&'a $ty>)),*
        }

        $(impl Kind for $ty {
            fn applied(desired: Self, existing: Option<&Self>) -> Applied<'_> {
                Applied::$variant(Box::new(desired), existing)
            }
            fn object(self) -> Object {
                Object::$variant(Box::new(self))
            }
            fn held(&self) -> Held<'_> {
                Held::$variant(self)
            }
        })*

        impl Object {
            /// Kind and name, for logs and tests.
            pub fn describe(&self) -> String {
                match self {
                    $(Object::$variant(o) => format!("{} {}", stringify!($variant), o.name_any())),*
                }
            }

            /// Creates the object once ([`apply::create_once`]).
            pub(crate) async fn create(&self, client: &Client, ns: &str) -> Result<bool, Error> {
                match self {
                    $(Object::$variant(o) => {
                        apply::create_once(&Api::<$ty>::namespaced(client.clone(), ns), o.as_ref()).await
                    })*
                }
            }

            /// Reads the object first, then writes only what is missing ([`apply::ensure`]).
            pub(crate) async fn ensure(&self, client: &Client, ns: &str) -> Result<bool, Error> {
                match self {
                    $(Object::$variant(o) => {
                        apply::ensure(&Api::<$ty>::namespaced(client.clone(), ns), o.as_ref()).await
                    })*
                }
            }
        }

        impl Applied<'_> {
            /// Kind and name, for logs and tests.
            pub fn describe(&self) -> String {
                match self {
                    $(Applied::$variant(o, _) => format!("{} {}", stringify!($variant), o.name_any())),*
                }
            }

            /// Applies it over its cached copy ([`apply::apply_if_changed`]).
            pub(crate) async fn apply(&self, client: &Client, ns: &str) -> Result<bool, Error> {
                match self {
                    $(Applied::$variant(desired, existing) => {
                        let api = Api::<$ty>::namespaced(client.clone(), ns);
                        apply::apply_if_changed(&api, desired.as_ref(), *existing).await
                    })*
                }
            }
        }

        impl Held<'_> {
            /// Kind and name, for logs and tests.
            pub fn describe(&self) -> String {
                match self {
                    $(Held::$variant(o) => format!("{} {}", stringify!($variant), o.name_any())),*
                }
            }

            /// Deletes it, its UID as precondition ([`apply::delete_observed`]).
            pub(crate) async fn delete(&self, client: &Client, ns: &str) -> Result<(), Error> {
                match self {
                    $(Held::$variant(o) => {
                        apply::delete_observed(&Api::<$ty>::namespaced(client.clone(), ns), *o).await
                    })*
                }
            }
        }
    };
}

kinds! {
    Pod(Pod),
    Service(Service),
    ConfigMap(ConfigMap),
    Job(Job),
    PodGroup(PodGroup),
    Budget(PodDisruptionBudget),
    Revision(ControllerRevision),
    ServiceAccount(ServiceAccount),
    Role(Role),
    RoleBinding(RoleBinding),
    ClaimTemplate(ResourceClaimTemplate),
    ScaledRole(DeepInferRole),
}

/// One write a plan asks for.
#[derive(Clone, Debug)]
pub enum Act<'a> {
    /// Create without force (Jobs, evidence, claim templates): an object of that name that
    /// another owner controls is a [`Error::NameConflict`], never changed.
    Create(Object),
    /// Server-side apply, skipped when the cached copy already carries the applied hash.
    Apply(Applied<'a>),
    /// An object no watch caches that an earlier pass most likely made: read first, and written
    /// only when absent or not as applied ([`apply::ensure`]).
    Ensure(Object),
    /// Delete the cached object, its UID as precondition.
    Delete(Held<'a>),
    /// Set a worker pod's `deepinfer.io/accepted` condition.
    Mark(Mark),
    /// Annotate an evidence ConfigMap: a judgement kept beside its evidence, where each rank of
    /// the run ran ([`crate::acceptance::placement::PLACEMENT_ANNOTATION`]).
    Annotate {
        /// The evidence ConfigMap.
        configmap: String,
        /// Annotations by key.
        annotations: BTreeMap<&'static str, String>,
    },
    /// Write a DeepInferRole's status (server-side apply of the status subresource).
    RoleStatus {
        /// The DeepInferRole.
        name: String,
        /// Its status.
        status: DeepInferRoleStatus,
    },
    /// Housekeeping: give a finished Job its `ttlSecondsAfterFinished`.
    Expire {
        /// The Job.
        job: String,
        /// Seconds.
        ttl: i32,
    },
    /// Housekeeping: the pods of the Jobs `done` (uids) leave the pod cache, and the pods of
    /// the Jobs `read` are cached again as their events come (no API request).
    UncachePods {
        /// Jobs whose pods no pass reads again.
        done: Vec<String>,
        /// The deployment's other Jobs.
        read: Vec<String>,
    },
    /// Housekeeping: delete an evidence ConfigMap beyond those kept (as read, its UID as
    /// precondition).
    DeleteEvidence(&'a ObjectMeta),
    /// Housekeeping: a Warning event on the deployment.
    Warn {
        /// Event reason.
        reason: Reason,
        /// Event action.
        action: &'static str,
        /// Event note.
        note: String,
    },
}

impl<'a> Act<'a> {
    /// Apply `desired` over its cached copy.
    pub fn apply<K: Kind>(desired: K, existing: Option<&'a K>) -> Self {
        Act::Apply(K::applied(desired, existing))
    }

    /// Create `desired` once.
    pub fn create<K: Kind>(desired: K) -> Self {
        Act::Create(desired.object())
    }

    /// Bring about `desired`, uncached and most likely there: read first ([`Act::Ensure`]).
    pub fn ensure<K: Kind>(desired: K) -> Self {
        Act::Ensure(desired.object())
    }

    /// Delete the cached `observed`.
    pub fn delete<K: Kind>(observed: &'a K) -> Self {
        Act::Delete(observed.held())
    }

    /// Whether a failure of this act is only logged.
    pub fn is_housekeeping(&self) -> bool {
        matches!(
            self,
            Act::Expire { .. }
                | Act::UncachePods { .. }
                | Act::DeleteEvidence(..)
                | Act::Warn { .. }
        )
    }

    /// The acts that may go out together with this one when they come one after another in a
    /// plan: creates, applies and deletes of one kind, and `accepted` marks (each of another
    /// object). `None`: it goes out alone.
    pub fn batch(&self) -> Option<String> {
        match self {
            Act::Create(_) | Act::Apply(_) | Act::Ensure(_) | Act::Delete(_) => {
                let described = self.describe();
                let mut words = described.split(' ');
                Some(format!("{} {}", words.next()?, words.next()?))
            }
            Act::Mark(_) => Some("mark".into()),
            _ => None,
        }
    }

    /// What the act does, in a few words (logs and tests).
    pub fn describe(&self) -> String {
        match self {
            Act::Create(o) => format!("create {}", o.describe()),
            Act::Ensure(o) => format!("ensure {}", o.describe()),
            Act::Apply(a) => format!("apply {}", a.describe()),
            Act::Delete(h) => format!("delete {}", h.describe()),
            Act::Mark(m) => format!("mark Pod {} accepted={}", m.pod, m.accepted),
            Act::Annotate {
                configmap,
                annotations,
            } => {
                let keys: Vec<&str> = annotations.keys().copied().collect();
                format!("annotate ConfigMap {configmap} {}", keys.join(" "))
            }
            Act::RoleStatus { name, status } => format!(
                "write status of DeepInferRole {name}: {} serving",
                status.replicas
            ),
            Act::Expire { job, ttl } => format!("expire Job {job} after {ttl} s"),
            Act::UncachePods { done, read } => format!(
                "leave the pods of {} Jobs out of the cache, cache those of {}",
                done.len(),
                read.len()
            ),
            Act::DeleteEvidence(meta) => format!(
                "delete ConfigMap {} (evidence beyond those kept)",
                meta.name.as_deref().unwrap_or_default()
            ),
            Act::Warn { reason, .. } => format!("warn {reason}"),
        }
    }
}

/// Acts that bring one kind's cached objects (`existing`, those the stage manages) to `desired`:
/// each desired one applied over its cached copy, each cached one no longer desired deleted
/// (once: not again while its delete is under way).
pub fn converge<'a, K: Kind>(desired: Vec<K>, existing: &[&'a K]) -> Vec<Act<'a>> {
    let by_name: BTreeMap<String, &'a K> = existing.iter().map(|o| (o.name_any(), *o)).collect();
    let wanted: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
    let deletes: Vec<&'a K> = existing
        .iter()
        .copied()
        .filter(|o| o.meta().deletion_timestamp.is_none() && !wanted.contains(&o.name_any()))
        .collect();
    let mut acts: Vec<Act<'a>> = desired
        .into_iter()
        .map(|d| {
            let held = by_name.get(&d.name_any()).copied();
            Act::apply(d, held)
        })
        .collect();
    acts.extend(deletes.into_iter().map(Act::delete));
    acts
}

/// Deletes of the cached objects named `names`. A name the cache does not hold is gone already
/// (or was never made), and one being deleted waits on its finalizers: neither is sent again.
pub fn delete_named<'a, K: Kind>(existing: &'a [K], names: &[String]) -> Vec<Act<'a>> {
    deletable(existing, |name| names.iter().any(|n| n == name))
        .into_iter()
        .map(Act::delete)
        .collect()
}

/// The `existing` objects whose name is `chosen`, but for those already being deleted (their
/// delete waits on a finalizer; sending it again writes nothing new).
fn deletable<K: Resource>(existing: &[K], chosen: impl Fn(&str) -> bool) -> Vec<&K> {
    existing
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none() && chosen(&o.name_any()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn group(name: &str, deleting: bool) -> PodGroup {
        PodGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: deleting
                    .then(|| Time(k8s_openapi::jiff::Timestamp::from_second(1).expect("time"))),
                ..ObjectMeta::default()
            },
            ..PodGroup::default()
        }
    }

    fn described(acts: &[Act<'_>]) -> Vec<String> {
        acts.iter().map(Act::describe).collect()
    }

    #[test]
    fn acts_of_one_kind_and_verb_go_out_together_and_the_rest_alone() {
        let pod = |name: &str| k8s_openapi::api::core::v1::Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        let stale = group("stale", false);
        let acts = [
            Act::apply(group("g", false), None),
            Act::apply(pod("rank-0"), None),
            Act::apply(pod("rank-1"), None),
            Act::create(pod("other")),
            Act::delete(&stale),
            Act::Warn {
                reason: crate::api::Reason::GroupReplaced,
                action: "DeleteGroup",
                note: "n".into(),
            },
        ];
        let batches: Vec<Option<String>> = acts.iter().map(Act::batch).collect();
        assert_eq!(
            batches,
            [
                Some("apply PodGroup".to_string()),
                Some("apply Pod".to_string()),
                Some("apply Pod".to_string()),
                Some("create Pod".to_string()),
                Some("delete PodGroup".to_string()),
                None,
            ]
        );
    }

    #[test]
    fn converging_applies_what_is_desired_over_its_cached_copy_and_deletes_the_rest_once() {
        let existing = [
            group("kept", false),
            group("stale", false),
            group("deleting", true),
        ];
        let cached: Vec<&PodGroup> = existing.iter().collect();
        let acts = converge(vec![group("kept", false), group("new", false)], &cached);
        assert_eq!(
            described(&acts),
            [
                "apply PodGroup kept",
                "apply PodGroup new",
                "delete PodGroup stale"
            ]
        );
        let held: Vec<bool> = acts
            .iter()
            .filter_map(|a| match a {
                Act::Apply(Applied::PodGroup(_, held)) => Some(held.is_some()),
                _ => None,
            })
            .collect();
        assert_eq!(
            held,
            [true, false],
            "the cached copy goes with its desired object"
        );
    }

    #[test]
    fn objects_deleted_by_name_are_only_those_the_cache_holds_and_not_already_being_deleted() {
        let existing = [
            group("run-0", false),
            group("run-1", true),
            group("other", false),
        ];
        let names = ["run-0", "run-1", "run-2"].map(String::from);
        // run-1's delete is underway, run-2 is gone (a delete would meet 404), other is not named.
        assert_eq!(
            described(&delete_named(&existing, &names)),
            ["delete PodGroup run-0"]
        );
    }

    #[test]
    fn only_expiry_uncaching_pruning_and_warnings_are_housekeeping() {
        let pg = group("g", false);
        assert!(!Act::delete(&pg).is_housekeeping());
        assert!(!Act::create(group("g", false)).is_housekeeping());
        assert!(Act::Expire {
            job: "j".into(),
            ttl: 1
        }
        .is_housekeeping());
        assert!(Act::UncachePods {
            done: vec!["j".into()],
            read: Vec::new()
        }
        .is_housekeeping());
        assert!(Act::Warn {
            reason: Reason::GroupReplaced,
            action: "A",
            note: String::new()
        }
        .is_housekeeping());
    }
}
