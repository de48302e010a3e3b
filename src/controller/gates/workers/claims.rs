//! The claim templates stage: with a DeviceClass, the ResourceClaimTemplates engine pods (and
//! PodGroups) claim their devices from exist before any such pod, and the deployment's
//! templates that neither the spec nor any of its pods, Jobs or PodGroups still name go.

use std::collections::BTreeSet;

use kube::ResourceExt;

use crate::controller::act::Act;
use crate::controller::build;
use crate::controller::observe::Observed;
use crate::controller::validated::ValidatedDeployment;

/// The claim templates stage's acts (none without a DeviceClass).
pub fn claim_templates<'o>(did: &ValidatedDeployment, observed: &'o Observed) -> Vec<Act<'o>> {
    let desired = build::claim_templates(did);
    if desired.is_empty() {
        return Vec::new();
    }
    let names: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
    let held: BTreeSet<String> = observed
        .claim_templates
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let mut acts: Vec<Act<'o>> = desired
        .into_iter()
        .filter(|t| !held.contains(&t.name_any()))
        .map(Act::create)
        .collect();
    let job_pods = observed
        .jobs
        .iter()
        .filter_map(|j| j.spec.as_ref()?.template.spec.as_ref());
    let pods = observed
        .workers
        .iter()
        .chain(&observed.job_pods)
        .filter_map(|p| p.spec.as_ref());
    let mut in_use = build::templates_in_use(job_pods.chain(pods));
    in_use.extend(
        observed
            .pod_groups
            .iter()
            .flat_map(|g| g.spec.resource_claims.iter().flatten())
            .filter_map(|c| c.resource_claim_template_name.clone()),
    );
    acts.extend(
        observed
            .claim_templates
            .iter()
            .filter(|t| {
                let t = t.name_any();
                !names.contains(&t) && !in_use.contains(&t)
            })
            .map(Act::delete),
    );
    acts
}
