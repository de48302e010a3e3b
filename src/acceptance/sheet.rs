//! The measurement sheet: what an acceptance run measured, per prompt and in total, printed
//! from the kept manifest by `deepinfer-runner check --sheet`. Every value comes from the
//! manifest; a value the engine did not report is printed as "not reported", never derived.

use std::fmt::Display;
use std::path::Path;

use anyhow::Context as _;

use super::manifest::{Manifest, PromptRecord};
use super::placement::{Placement, RankPlacement, PLACEMENT_ANNOTATION};

/// What the sheet prints for a value the engine did not report.
pub const NOT_REPORTED: &str = "not reported";
/// What the sheet prints for a requested output the spec left to the engine's default.
pub const ENGINE_DEFAULT: &str = "engine default";

fn or_not_reported<T: Display>(value: Option<T>) -> String {
    value.map_or_else(|| NOT_REPORTED.to_string(), |v| v.to_string())
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| NOT_REPORTED.to_string(), |v| format!("{v:.3} s"))
}

/// Reads a manifest from kept evidence: a directory holding `manifest.json` (`accept
/// --evidence-dir`), the `manifest.json` file itself, or the evidence ConfigMap as YAML or JSON
/// (`kubectl get configmap <evidence> -o yaml`).
pub fn load_manifest(path: &Path) -> anyhow::Result<Manifest> {
    let file = if path.is_dir() {
        path.join(super::evidence::MANIFEST_KEY)
    } else {
        path.to_path_buf()
    };
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let value: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: neither JSON nor YAML", file.display()))?;
    let kept = value
        .get("data")
        .and_then(|d| d.get(super::evidence::MANIFEST_KEY))
        .and_then(|m| m.as_str());
    match kept {
        Some(inner) => {
            let mut manifest: Manifest = serde_json::from_str(inner).with_context(|| {
                format!(
                    "{}: data.{} is not an acceptance manifest",
                    file.display(),
                    super::evidence::MANIFEST_KEY
                )
            })?;
            manifest.placement = value
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get(PLACEMENT_ANNOTATION))
                .and_then(|p| p.as_str())
                .map(Placement::parse);
            Ok(manifest)
        }
        None => serde_yaml::from_value(value).with_context(|| {
            format!(
                "{}: not an acceptance manifest (give the evidence ConfigMap, its manifest.json, or a directory holding it)",
                file.display()
            )
        }),
    }
}

/// Columns of the per-prompt table, left to right.
const COLUMNS: [&str; 10] = [
    "prompt",
    "verdict",
    "prompt tokens",
    "cached prefix",
    "requested output",
    "output tokens",
    "accepted tokens",
    "active requests",
    "first token",
    "completion time",
];

fn prompt_row(r: &PromptRecord) -> [String; 10] {
    [
        r.id.clone(),
        if r.passed { "PASS" } else { "FAIL" }.to_string(),
        or_not_reported(r.prompt_tokens),
        or_not_reported(r.cached_tokens),
        r.requested_tokens
            .map_or_else(|| ENGINE_DEFAULT.to_string(), |n| n.to_string()),
        or_not_reported(r.completion_tokens),
        or_not_reported(r.accepted_tokens),
        or_not_reported(r.active_requests),
        seconds(r.first_token_seconds),
        seconds(r.completion_seconds),
    ]
}

/// The `Sampling:` line (the section's settings, defaults applied), then one line naming the
/// prompts whose own settings differ from them and how.
fn sampling_lines(m: &Manifest) -> String {
    let Some(s) = &m.sampling else {
        return "Sampling:  not recorded in this manifest\n".to_string();
    };
    let off = |on: bool| if on { "" } else { " (off)" };
    let mut out =
        format!(
        "Sampling:  temperature {}{} | top-p {}{} | top-k {}{} | seed {} | repetition penalty {}\n",
        s.temperature,
        if s.temperature == 0.0 { " (greedy)" } else { "" },
        s.top_p,
        off(s.top_p < 1.0),
        s.top_k,
        off(s.top_k > 0),
        s.seed,
        s.repetition_penalty,
    );
    let overrides: Vec<String> = m
        .prompts
        .iter()
        .filter_map(|p| {
            let own = p.sampling.as_ref()?.differences(s);
            (!own.is_empty()).then(|| format!("{}: {}", p.id, own.join(", ")))
        })
        .collect();
    if !overrides.is_empty() {
        out.push_str(&format!(
            "           per prompt: {}\n",
            overrides.join("; ")
        ));
    }
    out
}

/// `Model:`, `Images:`, `Owners:` and `Review:`: what ran, from what, and who owns and decided
/// what around it. A value a manifest does not hold is printed as not recorded.
fn record_lines(m: &Manifest) -> String {
    const NOT_RECORDED: &str = "not recorded";
    let c = &m.checkpoint;
    let or = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| NOT_RECORDED.to_string(), one_line)
    };
    let mut out = format!(
        "Model:     {} | checkpoint revision {} | claim {} path {} (loaded from {}) | source key {}\n",
        or(&c.model),
        c.revision,
        or(&c.claim),
        or(&c.path),
        c.model_dir,
        or(&c.source_key),
    );
    let images = if m.runtime.role_images.is_empty() {
        format!("{} (every role)", one_line(&m.runtime.image))
    } else {
        m.runtime
            .role_images
            .iter()
            .map(|(role, image)| format!("{} {}", one_line(role), one_line(image)))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    out.push_str(&format!(
        "Images:    {images} (runtime commit {})\n",
        m.runtime.commit
    ));
    let owners = if m.service_owners.is_empty() {
        "none declared (spec.serviceOwners)".to_string()
    } else {
        m.service_owners
            .iter()
            .map(|(service, owner)| format!("{}: {}", one_line(service), one_line(owner)))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    out.push_str(&format!("Owners:    {owners}\n"));
    if let Some(r) = &m.review {
        let mut parts = Vec::new();
        if let Some(reason) = &r.rerun_reason {
            parts.push(format!("rerun: {}", one_line(reason)));
        }
        if r.change_reason.is_some() || r.change_reviewer.is_some() {
            parts.push(format!(
                "acceptance change: {} (reviewed by {})",
                or(&r.change_reason),
                or(&r.change_reviewer)
            ));
        }
        out.push_str(&format!("Review:    {}\n", parts.join(" | ")));
    }
    out
}

/// The devices of the run: every role's group as its shape was (pods × devices per pod, the
/// product, the layout), the judged role first; for a manifest that recorded no groups, the
/// judged group's layout alone.
fn hardware(m: &Manifest) -> String {
    let layout = |l: &super::manifest::LayoutRecord| {
        format!(
            "tensor {} x pipeline {} x data {}, expert {}",
            l.tensor, l.pipeline, l.data, l.expert
        )
    };
    if m.groups.is_empty() {
        return format!(
            "{} devices in the group ({})",
            m.layout.world_size,
            layout(&m.layout)
        );
    }
    let order = m
        .roles
        .iter()
        .filter(|r| m.groups.contains_key(*r))
        .chain(m.groups.keys().filter(|r| !m.roles.contains(r)));
    let mut total = 0i64;
    let groups: Vec<String> = order
        .filter_map(|role| Some((role, m.groups.get(role)?)))
        .map(|(role, g)| {
            total = total.saturating_add(g.layout.world_size);
            let product = g
                .product
                .as_deref()
                .map_or_else(String::new, |p| format!(" of {p}"));
            format!(
                "{role} {} pod(s) × {} devices{product} ({} devices; {})",
                g.pods,
                g.devices_per_pod,
                g.layout.world_size,
                layout(&g.layout)
            )
        })
        .collect();
    format!("{total} devices in the run: {}", groups.join(" | "))
}

/// The sheet as text: the run, the hardware, the phases, capacity beside completion time, and
/// one table row per prompt plus a total row.
pub fn render(m: &Manifest) -> String {
    let t = &m.tokens;
    let mut out = String::new();
    out.push_str(&format!(
        "Measurement sheet: {} revision {} ({:?}), started {}\n",
        m.deployment.as_deref().unwrap_or("-"),
        m.revision,
        m.result,
        m.started_at
    ));
    if !m.roles.is_empty() {
        out.push_str(&format!(
            "Roles:     {} (one group each; the first judged)\n",
            m.roles.join(", ")
        ));
    }
    out.push_str(&record_lines(m));
    out.push_str(&format!(
        "Hardware:  {}; devices the leader's container saw: {} (inventory: {})\n",
        hardware(m),
        or_not_reported(m.devices.count_seen()),
        m.devices.source
    ));
    out.push_str(&format!(
        "Phases:    load {} | warm-up {} | measured {} | total {:.3} s (load and warm-up lie outside the measured interval)\n",
        seconds(m.timings.load_seconds),
        seconds(m.timings.warmup_seconds),
        seconds(m.timings.measured_seconds),
        m.timings.total_seconds
    ));
    out.push_str(&sampling_lines(m));
    out.push_str(&format!(
        "Capacity:  {} output tokens/s, {} prompts/s over the measured interval | per-request completion time: mean {}, max {}\n\n",
        or_not_reported(t.completion_tokens_per_second),
        or_not_reported(t.requests_per_second),
        seconds(t.mean_completion_seconds),
        seconds(t.max_completion_seconds),
    ));
    let mut rows: Vec<[String; 10]> = vec![COLUMNS.map(str::to_string)];
    rows.extend(m.prompts.iter().map(prompt_row));
    let passed = m.prompts.iter().filter(|p| p.passed).count();
    rows.push([
        format!("total ({} prompts)", m.prompt_ids.len()),
        format!("{passed} passed"),
        or_not_reported(t.prompt_tokens),
        or_not_reported(t.cached_tokens),
        t.requested_tokens
            .map_or_else(|| ENGINE_DEFAULT.to_string(), |n| n.to_string()),
        or_not_reported(t.completion_tokens),
        or_not_reported(t.accepted_tokens),
        t.peak_active_requests
            .map_or_else(|| NOT_REPORTED.to_string(), |n| format!("peak {n}")),
        String::new(),
        t.max_completion_seconds
            .map_or_else(|| NOT_REPORTED.to_string(), |s| format!("max {s:.3} s")),
    ]);
    out.push_str(&table(&rows));
    if m.prompts.len() < m.prompt_ids.len() {
        out.push_str(&format!(
            "({} of {} prompt rows were cut from the kept manifest to fit the evidence; see manifest.truncated)\n",
            m.prompt_ids.len() - m.prompts.len(),
            m.prompt_ids.len()
        ));
    }
    out.push('\n');
    out.push_str(&serving_lines(m.serving.as_ref()));
    out.push_str(&placement_lines(m.placement.as_ref()));
    out
}

/// The end-to-end measurement of a serving endpoint, one row per pass: capacity beside
/// individual completion time, both from the judge's side of the network, and how much of each
/// request was queueing and transit (where the engine reported its own completion time).
fn serving_lines(serving: Option<&crate::acceptance::serving::ServingMeasurement>) -> String {
    let Some(s) = serving else {
        return String::new();
    };
    let mut out = format!(
        "End to end, from the judge through {} (serving API v{}): ready after {:.3} s (loading and warm-up, outside every pass)\n",
        s.endpoint, s.api_version, s.ready_after_seconds
    );
    let mut rows: Vec<[String; 8]> = vec![[
        "concurrency",
        "requests",
        "wall",
        "output tokens/s",
        "requests/s",
        "completion time mean / max",
        "queued + transit max",
        "retries",
    ]
    .map(str::to_string)];
    for p in &s.passes {
        let answered = p.requests.iter().filter(|r| r.error.is_none()).count();
        let queued = p
            .requests
            .iter()
            .map(|r| r.queued_and_transit_seconds)
            .collect::<Option<Vec<f64>>>()
            .map(|q| q.into_iter().fold(0.0, f64::max));
        rows.push([
            p.concurrency.to_string(),
            format!("{answered} of {} answered", p.requests.len()),
            format!("{:.3} s", p.wall_seconds),
            or_not_reported(p.completion_tokens_per_second),
            p.requests_per_second.to_string(),
            format!("{:.3} s / {:.3} s", p.mean_seconds, p.max_seconds),
            seconds(queued),
            p.requests
                .iter()
                .map(|r| u64::from(r.attempts.saturating_sub(1)))
                .sum::<u64>()
                .to_string(),
        ]);
    }
    out.push_str(&table(&rows));
    out.push('\n');
    out
}

/// `rows` as a table: the first row is the header, underlined; cells padded to their column.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut out = String::new();
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join(" | ").trim_end());
        out.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("-|-"));
            out.push('\n');
        }
    }
    out
}

/// Columns of the placement table, left to right.
const PLACEMENT_COLUMNS: [&str; 6] = ["role", "rank", "pod", "node", "scale-up domain", "devices"];

/// The placement section: one row per rank as the operator recorded it, or why there is none.
fn placement_lines(placement: Option<&Result<Placement, String>>) -> String {
    let p = match placement {
        None => return "Placement: not recorded (the operator records it on the evidence ConfigMap when it records the verdict; give the ConfigMap to read it)\n".to_string(),
        Some(Err(why)) => return format!("Placement: unreadable: {}\n", one_line(why)),
        Some(Ok(p)) => p,
    };
    let mut out = format!(
        "Placement: {} rank(s), as the operator recorded them; scale-up domain = node label {}{}\n",
        p.ranks.len() + p.omitted_ranks,
        one_line(&p.domain_key),
        p.domains_not_read
            .as_deref()
            .map_or_else(String::new, |why| format!(" (not read: {})", one_line(why)))
    );
    let mut rows: Vec<[String; 6]> = vec![PLACEMENT_COLUMNS.map(str::to_string)];
    rows.extend(
        p.ranks
            .iter()
            .map(|r| placement_row(r, p.domains_not_read.is_some())),
    );
    out.push_str(&table(&rows));
    if p.omitted_ranks > 0 {
        out.push_str(&format!(
            "({} more rank(s) left out of the record)\n",
            p.omitted_ranks
        ));
    }
    out
}

fn placement_row(r: &RankPlacement, domains_not_read: bool) -> [String; 6] {
    let or =
        |v: &Option<String>, none: &str| v.as_deref().map_or_else(|| none.to_string(), one_line);
    let domain = match (&r.node, &r.domain) {
        (_, Some(domain)) => one_line(domain),
        (None, None) => "-".to_string(),
        (Some(_), None) if domains_not_read => "not read".to_string(),
        (Some(_), None) => "node has no label".to_string(),
    };
    let d = &r.devices;
    let mut devices = format!("{} {}", d.count, one_line(&d.resource));
    if !d.ids.is_empty() {
        devices.push_str(&format!(": ids {}", one_line(&d.ids.join(","))));
    }
    if !d.claims.is_empty() {
        devices.push_str(&format!(" (claims {})", one_line(&d.claims.join(", "))));
    }
    if let Some(note) = &d.note {
        devices.push_str(&format!(" ({})", one_line(note)));
    }
    [
        one_line(&r.role),
        r.rank.to_string(),
        or(&r.pod, "no pod"),
        or(&r.node, "not bound"),
        domain,
        devices,
    ]
}

/// `text` on one line: a value with a line break would read as another line of the sheet.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acceptance::engine::Timings;
    use crate::acceptance::engine_io::parse_outputs;
    use crate::acceptance::manifest::{
        build_manifest, AcceptanceResult, EngineRecord, RunFacts, RunIdentity,
    };
    use crate::acceptance::{checker::CompiledSpec, parse_spec};

    fn manifest(outputs: &str, measured: Option<f64>) -> Manifest {
        manifest_of(
            "prompts:\n- {id: a, prompt: x, maxTokens: 16, structuredOutput: {regex: 'yes'}}\n- {id: b, prompt: y, structuredOutput: {regex: 'no'}}\n",
            outputs,
            measured,
        )
    }

    fn manifest_of(spec: &str, outputs: &str, measured: Option<f64>) -> Manifest {
        let spec = parse_spec(spec).unwrap();
        let compiled = CompiledSpec::compile(&spec).unwrap();
        let parsed = parse_outputs(outputs.as_bytes());
        let verdicts = compiled.judge(&parsed);
        let ids: Vec<String> = compiled.prompt_ids().map(str::to_string).collect();
        let identity = RunIdentity {
            requested_tokens: [("a".to_string(), 16)].into(),
            sampling: spec.default_sampling(),
            prompt_sampling: crate::acceptance::manifest::prompt_sampling(&spec),
            layout: crate::api::ParallelSpec {
                tensor: 8,
                ..Default::default()
            },
            ..RunIdentity::default()
        };
        let facts = RunFacts {
            result: AcceptanceResult::Passed,
            reason: String::new(),
            devices: Default::default(),
            engine: EngineRecord {
                command: vec![],
                argv: None,
                env: None,
                exit: crate::acceptance::engine::EngineExit::Exited { code: 0 },
                timeout_seconds: 1,
            },
            timings: Timings {
                load_seconds: Some(3.0),
                warmup_seconds: Some(1.0),
                measured_seconds: measured,
                total_seconds: 6.0,
                markers: Default::default(),
            },
            serving: None,
        };
        build_manifest(&identity, facts, &ids, &parsed, &verdicts)
    }

    #[test]
    fn the_hardware_line_counts_every_roles_group_in_its_own_shape() {
        use crate::acceptance::manifest::GroupRecord;
        let mut m = manifest("", None);
        m.roles = vec!["decode".into(), "prefill".into()];
        let group = |pods, devices_per_pod, product: Option<&str>, tensor| GroupRecord {
            pods,
            devices_per_pod,
            product: product.map(str::to_string),
            layout: crate::acceptance::manifest::LayoutRecord::from(&crate::api::ParallelSpec {
                tensor,
                ..Default::default()
            }),
        };
        m.groups = [
            ("prefill".to_string(), group(1, 4, None, 4)),
            ("decode".to_string(), group(2, 8, Some("NVIDIA-H200"), 16)),
        ]
        .into();
        let sheet = render(&m);
        let line = sheet
            .lines()
            .find(|l| l.starts_with("Hardware:"))
            .expect("a hardware line");
        assert_eq!(
            line,
            "Hardware:  20 devices in the run: \
             decode 2 pod(s) × 8 devices of NVIDIA-H200 (16 devices; tensor 16 x pipeline 1 x data 1, expert 1) | \
             prefill 1 pod(s) × 4 devices (4 devices; tensor 4 x pipeline 1 x data 1, expert 1); \
             devices the leader's container saw: not reported (inventory: )",
            "the judged role first, each group in its own shape"
        );
    }

    #[test]
    fn every_reported_item_is_printed_per_prompt_and_in_total() {
        let m = manifest(
            concat!(
                r#"{"id":"a","text":"yes","finish_reason":"stop","prompt_tokens":10,"cached_tokens":4,"completion_tokens":6,"accepted_tokens":2,"active_requests":2,"first_token_seconds":0.1,"completion_seconds":0.5}"#,
                "\n",
                r#"{"id":"b","text":"no","finish_reason":"stop","prompt_tokens":20,"cached_tokens":0,"completion_tokens":14,"accepted_tokens":5,"active_requests":1,"first_token_seconds":0.2,"completion_seconds":1.5}"#,
                "\n"
            ),
            Some(2.0),
        );
        let t = &m.tokens;
        assert_eq!(
            (t.prompt_tokens, t.cached_tokens, t.completion_tokens),
            (Some(30), Some(4), Some(20))
        );
        assert_eq!(t.requested_tokens, None, "b left maxTokens to the engine");
        assert_eq!(t.peak_active_requests, Some(2));
        assert_eq!(
            (t.completion_tokens_per_second, t.requests_per_second),
            (Some(10.0), Some(1.0))
        );
        assert_eq!(
            (t.mean_completion_seconds, t.max_completion_seconds),
            (Some(1.0), Some(1.5))
        );
        let sheet = render(&m);
        assert!(
            sheet.contains("Hardware:  8 devices in the group"),
            "{sheet}"
        );
        assert!(
            sheet.contains("load 3.000 s | warm-up 1.000 s | measured 2.000 s | total 6.000 s"),
            "{sheet}"
        );
        assert!(sheet.contains("Capacity:  10 output tokens/s, 1 prompts/s over the measured interval | per-request completion time: mean 1.000 s, max 1.500 s"), "{sheet}");
        let row = |id: &str| {
            sheet
                .lines()
                .find(|l| l.starts_with(id))
                .unwrap_or_else(|| panic!("no row {id} in\n{sheet}"))
                .split(" | ")
                .map(str::trim)
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            row("a "),
            ["a", "PASS", "10", "4", "16", "6", "2", "2", "0.100 s", "0.500 s"]
        );
        assert_eq!(row("b ")[4], ENGINE_DEFAULT);
        assert_eq!(
            row("total"),
            [
                "total (2 prompts)",
                "2 passed",
                "30",
                "4",
                ENGINE_DEFAULT,
                "20",
                "7",
                "peak 2",
                "",
                "max 1.500 s"
            ]
        );
    }

    #[test]
    fn the_sheet_prints_the_sampling_and_each_prompts_overrides() {
        let greedy = render(&manifest("", None));
        assert!(
            greedy.contains("Sampling:  temperature 0 (greedy) | top-p 1 (off) | top-k 0 (off) | seed 0 | repetition penalty 1\n"),
            "{greedy}"
        );
        assert!(!greedy.contains("per prompt"), "{greedy}");
        let pinned = render(&manifest_of(
            "sampling: {temperature: 0.7, topP: 0.9, topK: 40, seed: 7, repetitionPenalty: 1.1}\nprompts:\n- {id: a, prompt: x, sampling: {temperature: 0, seed: 1}, structuredOutput: {regex: 'yes'}}\n- {id: b, prompt: y, sampling: {seed: 7}, structuredOutput: {regex: 'no'}}\n",
            "",
            None,
        ));
        assert!(
            pinned.contains("Sampling:  temperature 0.7 | top-p 0.9 | top-k 40 | seed 7 | repetition penalty 1.1\n           per prompt: a: temperature 0, seed 1\n"),
            "{pinned}"
        );
        let mut old = manifest("", None);
        old.sampling = None;
        assert!(
            render(&old).contains("Sampling:  not recorded in this manifest\n"),
            "{}",
            render(&old)
        );
    }

    #[test]
    fn what_the_engine_did_not_report_is_printed_as_not_reported() {
        let m = manifest(
            "{\"id\":\"a\",\"text\":\"yes\",\"finish_reason\":\"stop\",\"completion_tokens\":6}\n{\"id\":\"b\",\"text\":\"no\",\"finish_reason\":\"stop\"}\n",
            None,
        );
        assert_eq!(m.tokens.completion_tokens, None, "b reported no count");
        assert_eq!(m.tokens.requests_per_second, None, "no measured interval");
        let sheet = render(&m);
        let a = sheet.lines().find(|l| l.starts_with("a ")).unwrap();
        assert_eq!(a.matches(NOT_REPORTED).count(), 6, "{a}");
        assert!(sheet.contains("measured not reported"), "{sheet}");
        assert!(
            sheet.contains("Capacity:  not reported output tokens/s, not reported prompts/s"),
            "{sheet}"
        );
    }

    #[test]
    fn the_sheet_prints_model_images_claim_owners_and_review() {
        let mut m = manifest("", None);
        let bare = render(&m);
        assert!(
            bare.contains("Model:     not recorded | checkpoint revision  | claim not recorded path not recorded"),
            "{bare}"
        );
        assert!(
            bare.contains("Owners:    none declared (spec.serviceOwners)\n"),
            "{bare}"
        );
        assert!(!bare.contains("Review:"), "{bare}");
        m.checkpoint = crate::acceptance::manifest::CheckpointRecord {
            revision: "a".repeat(40),
            model_dir: "/models/flash/aaaa".into(),
            model: Some("deepseek-ai/DeepSeek-V4.1-Flash-1017".into()),
            claim: Some("models".into()),
            path: Some("flash/aaaa".into()),
            source_key: Some("k123".into()),
        };
        m.runtime.role_images = [
            ("decode".to_string(), "reg/d@sha256:1".to_string()),
            ("prefill".to_string(), "reg/p@sha256:2".to_string()),
        ]
        .into();
        m.service_owners = [
            ("kvCache".to_string(), "platform-kv team".to_string()),
            ("routing".to_string(), "gateway\nteam".to_string()),
        ]
        .into();
        m.review = Some(crate::api::ReviewRecord {
            rerun_reason: Some("node fault".into()),
            change_reason: Some("four shots now".into()),
            change_reviewer: Some("jane".into()),
        });
        let sheet = render(&m);
        for line in [
            format!("Model:     deepseek-ai/DeepSeek-V4.1-Flash-1017 | checkpoint revision {} | claim models path flash/aaaa (loaded from /models/flash/aaaa) | source key k123\n", "a".repeat(40)),
            "Images:    decode reg/d@sha256:1 | prefill reg/p@sha256:2 (runtime commit )\n".to_string(),
            "Owners:    kvCache: platform-kv team | routing: gateway team\n".to_string(),
            "Review:    rerun: node fault | acceptance change: four shots now (reviewed by jane)\n".to_string(),
        ] {
            assert!(sheet.contains(&line), "{line}in\n{sheet}");
        }
        // A manifest written before these were recorded still reads.
        let mut json = serde_json::to_value(manifest("", None)).unwrap();
        for key in ["roleImages", "templateVersion"] {
            json["runtime"].as_object_mut().unwrap().remove(key);
        }
        for key in ["model", "claim", "path", "sourceKey"] {
            json["checkpoint"].as_object_mut().unwrap().remove(key);
        }
        let old: Manifest = serde_json::from_value(json).unwrap();
        assert!(old.service_owners.is_empty() && old.review.is_none());
    }

    #[test]
    fn the_sheet_prints_each_ranks_pod_node_domain_and_devices() {
        use crate::acceptance::placement::{RankDevices, PLACEMENT_ANNOTATION};
        let m = manifest("", Some(1.0));
        let bare = render(&m);
        assert!(
            bare.ends_with("Placement: not recorded (the operator records it on the evidence ConfigMap when it records the verdict; give the ConfigMap to read it)\n"),
            "{bare}"
        );
        let rank =
            |role: &str, rank, node: Option<&str>, domain: Option<&str>, devices| RankPlacement {
                role: role.into(),
                rank,
                pod: node.map(|_| format!("{role}-{rank}-x")),
                node: node.map(str::to_string),
                domain: domain.map(str::to_string),
                devices,
            };
        let gpus = |count| RankDevices {
            resource: "nvidia.com/gpu".into(),
            count,
            ..RankDevices::default()
        };
        let record = Placement {
            domain_key: "nvidia.com/gpu.clique".into(),
            domains_not_read: None,
            ranks: vec![
                rank("decode", 0, Some("gpu-2"), Some("clique-b"), gpus(8)),
                rank("decode", 1, Some("gpu-3"), None, gpus(8)),
                rank(
                    "prefill",
                    0,
                    None,
                    None,
                    RankDevices {
                        resource: "huawei.com/Ascend910".into(),
                        count: 2,
                        ids: vec!["0".into(), "1".into()],
                        claims: vec!["devices=p-devices-1".into()],
                        note: Some("why\nnot".into()),
                    },
                ),
            ],
            omitted_ranks: 0,
        };
        // Read from the evidence ConfigMap as kubectl prints it: the annotation beside the data.
        let dir = std::env::temp_dir().join(format!("sheet-placement-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cm = serde_yaml::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"annotations": {PLACEMENT_ANNOTATION: record.annotation_value()}},
            "data": {"manifest.json": serde_json::to_string(&m).unwrap()}
        }))
        .unwrap();
        std::fs::write(dir.join("cm.yaml"), cm).unwrap();
        let loaded = load_manifest(&dir.join("cm.yaml")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(loaded.placement, Some(Ok(record.clone())));
        let sheet = render(&loaded);
        let section = &sheet[sheet.find("Placement:").expect("a placement section")..];
        assert_eq!(
            section,
            "Placement: 3 rank(s), as the operator recorded them; scale-up domain = node label nvidia.com/gpu.clique\n\
             role    | rank | pod        | node      | scale-up domain   | devices\n\
             --------|------|------------|-----------|-------------------|-----------------------------------------------------------------------\n\
             decode  | 0    | decode-0-x | gpu-2     | clique-b          | 8 nvidia.com/gpu\n\
             decode  | 1    | decode-1-x | gpu-3     | node has no label | 8 nvidia.com/gpu\n\
             prefill | 0    | no pod     | not bound | -                 | 2 huawei.com/Ascend910: ids 0,1 (claims devices=p-devices-1) (why not)\n"
        );
        let unread = Placement {
            domains_not_read: Some("the operator does not read nodes".into()),
            ..record
        };
        let sheet = render(&Manifest {
            placement: Some(Ok(unread)),
            ..m.clone()
        });
        assert!(
            sheet.contains("scale-up domain = node label nvidia.com/gpu.clique (not read: the operator does not read nodes)\n"),
            "{sheet}"
        );
        assert!(sheet.contains("| gpu-3     | not read "), "{sheet}");
        let broken = render(&Manifest {
            placement: Some(Placement::parse("[]")),
            ..m
        });
        assert!(
            broken.contains("Placement: unreadable: annotation deepinfer.io/placement is not a placement record"),
            "{broken}"
        );
    }

    #[test]
    fn a_manifest_is_read_from_a_directory_a_file_or_the_evidence_configmap() {
        let m = manifest("", Some(1.0));
        let dir = std::env::temp_dir().join(format!("sheet-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let json = serde_json::to_string(&m).unwrap();
        std::fs::write(dir.join("manifest.json"), &json).unwrap();
        assert_eq!(load_manifest(&dir).unwrap(), m);
        assert_eq!(load_manifest(&dir.join("manifest.json")).unwrap(), m);
        let cm = serde_yaml::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "data": {"manifest.json": json}
        }))
        .unwrap();
        std::fs::write(dir.join("cm.yaml"), cm).unwrap();
        assert_eq!(load_manifest(&dir.join("cm.yaml")).unwrap(), m);
        std::fs::write(dir.join("other.yaml"), "kind: Pod\n").unwrap();
        let err = format!("{:#}", load_manifest(&dir.join("other.yaml")).unwrap_err());
        assert!(err.contains("not an acceptance manifest"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
