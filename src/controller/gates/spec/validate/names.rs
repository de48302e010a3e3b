//! The resource's name and the names of the children made from it.

use super::shared::*;
use crate::api::*;

/// Longest `metadata.name` whose child names (`<name>-accept-<run hash>-<rank>`, used as a
/// Job and in the `job-name` label) stay within Kubernetes' 63-character limit.
pub const MAX_NAME_LENGTH: usize = 36;

/// Checks the resource's own name: its children are named after it.
pub fn validate_name(name: &str) -> Result<(), FieldError> {
    if name.len() > MAX_NAME_LENGTH {
        return Err(FieldError::new(
            "metadata.name",
            format!(
                "is {} characters long; at most {MAX_NAME_LENGTH} are allowed because the operator names its Jobs, pods and Services after it (a label value holds 63); recreate the resource under a shorter name",
                name.len()
            ),
        ));
    }
    if !is_dns1035_label(name) {
        return Err(FieldError::new(
            "metadata.name",
            format!(
                "is {name:?}; it must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit), because the operator names Services and pod subdomains after it; recreate the resource under such a name"
            ),
        ));
    }
    Ok(())
}

/// Most characters a Job's name may have: it is also its pods' `job-name` label value.
pub const MAX_JOB_NAME_LENGTH: usize = 63;

/// Checks that the name of every acceptance Job (one per rank of a group) fits
/// [`MAX_JOB_NAME_LENGTH`] for every role (every role has a group in the acceptance run, its Jobs named as long as the judged role's);
/// otherwise the API server would refuse the Job. The CRD's CEL rule states the same bound as
/// name length plus the digits of the last rank ≤ 38.
pub fn validate_acceptance_job_names(
    name: &str,
    spec: &DeepInferDeploymentSpec,
) -> Result<(), FieldError> {
    use crate::controller::build;
    let Some((index, role, pods)) = spec
        .roles
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r, build::group_shape(spec, r).pods))
        .max_by_key(|(_, _, pods)| *pods)
    else {
        return Ok(());
    };
    // The run hash has a fixed width, so any revision and token give the same length.
    let last = build::AcceptanceNames::new(name, "", "").job(pods - 1);
    if last.len() <= MAX_JOB_NAME_LENGTH {
        return Ok(());
    }
    let longest = name.len().saturating_sub(last.len() - MAX_JOB_NAME_LENGTH);
    Err(FieldError::new(
        "metadata.name",
        format_args!(
            "is {} characters long, and role {} has {pods} pods per group: the acceptance Job of a group's last rank would be named {last} ({} characters), but a Job's name is also its pods' job-name label, at most {MAX_JOB_NAME_LENGTH}; use a name of at most {longest} characters, or fewer pods per group (spec.roles[{index}].parallel, or more devices per pod in {})",
            name.len(),
            role.name,
            last.len(),
            spec.device_shape(role).devices_per_pod_field(index)
        ),
    ))
}
