//! One acceptance run of the target: what identifies it, what the gate reads and finds.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{
    AcceptanceSpec, AcceptanceStatus, Component, DeepInferDeploymentStatus,
    RERUN_ACCEPTANCE_ANNOTATION,
};
use crate::controller::act::Act;
use crate::controller::build::{self, AcceptanceNames};
use crate::controller::gates::acceptance::decide::{self as judge};
use crate::controller::gates::jobs::{job_state, JobState};
use crate::controller::gates::Settings;
use crate::controller::observe::{Observed, Read};
use crate::controller::status::Gate;
use crate::controller::validated::ValidatedDeployment;

/// What identifies one acceptance run of a revision: the rerun token, the prompts as resolved
/// (from `promptsFrom`) and the hash of what is judged, and the names derived from them.
#[derive(Clone, Debug)]
pub struct Run {
    /// The rerun annotation's value.
    pub token: String,
    /// Hash of the acceptance spec as judged (prompts resolved).
    pub spec_hash: String,
    /// The acceptance spec with its prompts resolved, or why they cannot be.
    pub resolved: Result<AcceptanceSpec, String>,
    /// The run's object names.
    pub names: AcceptanceNames,
}

impl Run {
    /// The run of `revision` that `did` asks for, as observed.
    pub fn of(did: &ValidatedDeployment, revision: &str, observed: &Observed) -> Self {
        let token = did
            .annotations()
            .get(RERUN_ACCEPTANCE_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        // The prompts (resolved from promptsFrom) and expectations are part of what was judged:
        // a change re-runs acceptance (the revision's pods keep serving on its last pass until
        // the new verdict).
        let resolved = judge::resolve(
            &did.spec.acceptance,
            &did.namespace,
            observed.prompts.as_ref(),
        );
        let spec_hash = judge::judged_spec_hash(&did.spec.acceptance, resolved.as_ref().ok());
        let names =
            AcceptanceNames::new(&did.name_any(), revision, &format!("{token}/{spec_hash}"));
        Self {
            token,
            spec_hash,
            resolved,
            names,
        }
    }

    /// The leader Job (rank 0 of the judged group), where the verdict is read.
    pub(super) fn leader(&self, did: &ValidatedDeployment) -> Option<String> {
        self.names.groups(&did.spec).first().map(|g| g.job(0))
    }
}

/// The target's candidate group of `spec.acceptance.mode: serving`, while the target has no pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Candidate {
    /// No candidate: offline acceptance, or the run does not go ahead yet.
    #[default]
    None,
    /// The run is under way: one group of the target is made (it takes no traffic until a pass)
    /// and judged through its endpoint; with `maxSurge` 0, or while it waits for devices that
    /// serving groups hold, it takes the place of one serving group within `maxUnavailable`.
    Judged,
    /// The target's judgement failed: its groups go and the serving revisions are kept whole.
    Refused,
}

/// What the acceptance stage found.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// The gate.
    pub gate: Gate,
    /// The judgement that decides the gate, when there is one (for `status.acceptance`).
    pub status: Option<AcceptanceStatus>,
    /// A judgement made in this pass, to record once its acts are done.
    pub recorded: Option<AcceptanceStatus>,
    /// How long the judged run took (seconds), with `recorded`.
    pub seconds: f64,
    /// Roles whose group of the run waits for devices.
    pub needs_room: Vec<String>,
    /// The target's candidate group, in `spec.acceptance.mode: serving`.
    pub candidate: Candidate,
    /// The run's leader Job while its verdict is not in status at the start of the pass (it
    /// keeps no TTL until then).
    pub unjudged: Option<String>,
    /// Reads the plan waits for (the pass does them and plans again).
    pub needs: Vec<Read>,
}

impl Found {
    pub(super) fn gate(gate: Gate) -> Self {
        Self {
            gate,
            ..Self::default()
        }
    }
}

/// What the acceptance stage reads.
pub struct Input<'a> {
    /// The deployment.
    pub did: &'a ValidatedDeployment,
    /// The target revision.
    pub revision: &'a str,
    /// Its run.
    pub run: &'a Run,
    /// The judgements known.
    pub known: &'a DeepInferDeploymentStatus,
    /// Operator settings.
    pub settings: Settings<'a>,
    /// The pass's time.
    pub now: Timestamp,
}

/// This deployment's acceptance Jobs that have not finished.
pub(super) fn running_jobs(observed: &Observed) -> impl Iterator<Item = &Job> {
    observed.jobs.iter().filter(|j| {
        Component::of(j.labels()) == Some(Component::Acceptance)
            && matches!(
                job_state(observed, &j.name_any(), build::JUDGE_CONTAINER),
                JobState::Running
            )
    })
}

/// Deletes of the acceptance Jobs still running (`spec.suspend`, a licence closed with
/// `--license-withdrawal=stop`), and how many.
pub fn stop_running(observed: &Observed) -> (Vec<Act<'_>>, usize) {
    let acts: Vec<Act<'_>> = running_jobs(observed)
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .map(Act::delete)
        .collect();
    let n = acts.len();
    (acts, n)
}
