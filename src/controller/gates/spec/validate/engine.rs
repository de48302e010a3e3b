//! The model, the runtime and the acceptance workload.

use super::shared::*;
use crate::api::*;

pub(super) fn validate_model(model: &ModelSpec, errors: &mut Vec<FieldError>) {
    if model.name.is_empty() {
        errors.push(FieldError::new(
            "spec.model.name",
            "is empty; set the hub id of the model, e.g. deepseek-ai/DeepSeek-V4.1-Flash-1017",
        ));
    }
    if model.license.is_empty() {
        errors.push(FieldError::new(
            "spec.model.license",
            "is empty; set the licence id the checkpoint is published under, e.g. mit",
        ));
    }
    let source = &model.source;
    match (&source.hub, &source.volume) {
        (Some(_), Some(_)) | (None, None) => errors.push(FieldError::new(
            "spec.model.source",
            "must set exactly one of hub (fetch a pinned revision) or volume (a PVC that already holds the checkpoint)",
        )),
        _ => {}
    }
    if let Some(hub) = &source.hub {
        if !is_lower_hex(&hub.revision, 40, 40) {
            errors.push(FieldError::new(
                "spec.model.source.hub.revision",
                format_args!(
                    "is {:?}; it must be a full 40-character lowercase hex commit id, not a branch or tag; copy the commit from the model's history page",
                    hub.revision
                ),
            ));
        }
        require_claim(&hub.claim_name, "spec.model.source.hub.claimName", errors);
    }
    if let Some(volume) = &source.volume {
        require_claim(
            &volume.claim_name,
            "spec.model.source.volume.claimName",
            errors,
        );
    }
}

pub(super) fn require_claim(claim: &str, field: &str, errors: &mut Vec<FieldError>) {
    if claim.is_empty() {
        errors.push(FieldError::new(
            field,
            "is empty; name the PersistentVolumeClaim to use",
        ));
    }
}

pub(super) fn validate_runtime(runtime: &RuntimeSpec, errors: &mut Vec<FieldError>) {
    for (field, probe) in [
        ("spec.runtime.startupProbe", &runtime.startup_probe),
        ("spec.runtime.readinessProbe", &runtime.readiness_probe),
        ("spec.runtime.livenessProbe", &runtime.liveness_probe),
    ] {
        let Some(probe) = probe else { continue };
        let http_host = probe.http_get.as_ref().and_then(|h| h.host.as_ref());
        let tcp_host = probe.tcp_socket.as_ref().and_then(|t| t.host.as_ref());
        if let Some(host) = http_host.or(tcp_host) {
            errors.push(FieldError::new(
                field,
                format_args!("names host {host:?}; a probe asks the engine's own pod; remove httpGet.host and tcpSocket.host (the kubelet would connect to that host instead)"),
            ));
        }
    }
    if !is_pinned_by_digest(&runtime.image) {
        errors.push(FieldError::new(
            "spec.runtime.image",
            format_args!(
                "is {:?}; it must be pinned by digest (<repository>@sha256:<64 hex>); a tag alone is refused; resolve the tag with `crane digest` or `docker buildx imagetools inspect`",
                runtime.image
            ),
        ));
    }
    if !is_lower_hex(&runtime.commit, 7, 40) {
        errors.push(FieldError::new(
            "spec.runtime.commit",
            format_args!(
                "is {:?}; it must be the runtime's git commit id (7 to 40 lowercase hex characters)",
                runtime.commit
            ),
        ));
    }
}

/// `spec.runtime.roles`: each entry names a role of `spec.roles`, once, and pins its image.
pub(super) fn validate_role_runtimes(
    overrides: &[crate::api::RoleRuntime],
    roles: &[RoleSpec],
    errors: &mut Vec<FieldError>,
) {
    for (i, o) in overrides.iter().enumerate() {
        let at = format!("spec.runtime.roles[{i}]");
        if !roles.iter().any(|r| r.name == o.role) {
            errors.push(FieldError::new(
                format!("{at}.role"),
                format_args!(
                    "is {:?}, which is not a role of spec.roles; fix the name or remove the entry",
                    o.role
                ),
            ));
        }
        if overrides[..i].iter().any(|p| p.role == o.role) {
            errors.push(FieldError::new(
                format!("{at}.role"),
                format_args!(
                    "names {:?} a second time; each role may be named once; merge the duplicate entries",
                    o.role
                ),
            ));
        }
        if let Some(image) = o.image.as_deref().filter(|i| !is_pinned_by_digest(i)) {
            errors.push(FieldError::new(
                format!("{at}.image"),
                format_args!(
                    "is {image:?}; it must be pinned by digest (<repository>@sha256:<64 hex>); a tag alone is refused"
                ),
            ));
        }
    }
}

pub(super) fn validate_acceptance(acceptance: &AcceptanceSpec, errors: &mut Vec<FieldError>) {
    if acceptance.prompts.is_empty() && acceptance.prompts_from.is_none() {
        errors.push(FieldError::new(
            "spec.acceptance.prompts",
            "is empty and spec.acceptance.promptsFrom is unset; give at least one prompt in prompts, or a ConfigMap in promptsFrom",
        ));
    }
    for (i, prompt) in acceptance.prompts.iter().enumerate() {
        let at = format!("spec.acceptance.prompts[{i}]");
        if prompt.id.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.id"),
                "is empty; give the prompt a stable id",
            ));
        } else if prompt.id.chars().any(char::is_control) {
            errors.push(FieldError::new(
                format!("{at}.id"),
                format_args!("is {:?}; it must not contain control characters; it names the prompt in manifests, evidence keys and logs", prompt.id),
            ));
        } else if let Some(first) = acceptance.prompts[..i]
            .iter()
            .position(|q| q.id == prompt.id)
        {
            errors.push(FieldError::new(
                format!("{at}.id"),
                format_args!(
                    "repeats id {:?} of spec.acceptance.prompts[{first}]; prompt ids must be unique; rename the duplicate",
                    prompt.id
                ),
            ));
        }
        let so = &prompt.structured_output;
        let kinds = [so.json.is_some(), so.regex.is_some(), so.grammar.is_some()];
        if kinds.iter().filter(|set| **set).count() != 1 {
            errors.push(FieldError::new(
                format!("{at}.structuredOutput"),
                "must set exactly one of json, regex or grammar",
            ));
        }
        if so.json.as_ref().is_some_and(|schema| !schema.is_object()) {
            errors.push(FieldError::new(
                format!("{at}.structuredOutput.json"),
                "must be a JSON Schema object",
            ));
        }
        if let Some(sampling) = &prompt.sampling {
            let own = crate::api::AcceptanceSampling::from(sampling);
            for (field, message) in own.problems("the value of spec.acceptance.sampling") {
                errors.push(FieldError::new(format!("{at}.sampling.{field}"), message));
            }
        }
    }
    if let Some(sampling) = &acceptance.sampling {
        for (field, message) in sampling.problems("the default") {
            errors.push(FieldError::new(
                format!("spec.acceptance.sampling.{field}"),
                message,
            ));
        }
    }
    if !(1..=MAX_ACCEPTANCE_TIMEOUT_SECONDS).contains(&acceptance.timeout_seconds) {
        errors.push(FieldError::new(
            "spec.acceptance.timeoutSeconds",
            format_args!(
                "is {}; it must be between 1 and {MAX_ACCEPTANCE_TIMEOUT_SECONDS}",
                acceptance.timeout_seconds
            ),
        ));
    }
    if let Some(n) = acceptance
        .load_concurrency
        .filter(|n| !(1..=256).contains(n))
    {
        errors.push(FieldError::new(
            "spec.acceptance.loadConcurrency",
            format!("is {n}; give 1 to 256 requests in flight at once (1: no load pass)"),
        ));
    }
    if acceptance
        .engine
        .as_ref()
        .is_some_and(|engine| engine.command.is_empty())
    {
        errors.push(FieldError::new(
            "spec.acceptance.engine.command",
            "is empty; give the program and its arguments, or remove engine to use the default",
        ));
    } else if let Some(problem) = acceptance
        .engine
        .as_ref()
        .and_then(|engine| crate::acceptance::engine::template_problem(&engine.command))
    {
        // Same as the CEL rules on `EngineCommand.command`.
        errors.push(FieldError::new("spec.acceptance.engine.command", problem));
    }
}

/// `spec.runtime.command` is what serving pods run: the acceptance template must run it too
/// (`{serving_command}`), or the verdict would be about another program. Same as the CEL rule on
/// the spec.
pub(super) fn validate_serving_command(
    spec: &DeepInferDeploymentSpec,
    errors: &mut Vec<FieldError>,
) {
    let runs_it = spec.acceptance.judges_serving()
        || spec.acceptance.engine.as_ref().is_some_and(|engine| {
            engine
                .command
                .iter()
                .any(|a| a == crate::contract::placeholder::SERVING_COMMAND)
        });
    if !spec.runtime.command.is_empty() && !runs_it {
        errors.push(FieldError::new(
            "spec.runtime.command",
            "is set, but spec.acceptance.engine.command (default: DeepInfer's offline example) does not hold {serving_command} as a whole argument, so the acceptance run would not run the command the pods serve with; add \"{serving_command}\" to spec.acceptance.engine.command where the engine's program goes, or remove spec.runtime.command",
        ));
    }
}
