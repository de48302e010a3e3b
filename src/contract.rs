//! The engine contract (docs/engine-contract.md): what the operator gives an engine image and
//! what it expects back, as one list of names that the pod builder, the acceptance runner, the
//! output parser and the stand-in engine all use. `tests/engine_contract_doc.rs` checks that the
//! document's tables list exactly these items with the same presence, so the document and the
//! code cannot drift apart.

/// Version of the contract. Every engine container gets it in [`env::CONTRACT_VERSION`]; a
/// change that removes or renames an item, changes its meaning, or makes an optional item
/// required, raises it. Version 2: the acceptance template runs the serving configuration
/// ([`placeholder::SERVING_ARGS`], [`placeholder::SERVING_COMMAND`]).
pub const VERSION: &str = "2";

/// Whether an item is always there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Operator side: set on every engine container. Engine side: the engine must produce it.
    Required,
    /// Operator side: set only in the situation the item names. Engine side: the engine may
    /// omit it; the operator then records "not reported" and never derives a value.
    Optional,
}

impl Presence {
    /// The word the document's tables use.
    pub fn word(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Optional => "optional",
        }
    }
}

/// One named item of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Exact name: an environment variable, a placeholder, an output field or an event.
    pub name: &'static str,
    /// Required or optional.
    pub presence: Presence,
}

const fn required(name: &'static str) -> Item {
    Item {
        name,
        presence: Presence::Required,
    }
}

const fn optional(name: &'static str) -> Item {
    Item {
        name,
        presence: Presence::Optional,
    }
}

/// Names of the environment variables the operator sets on engine containers.
pub mod env {
    /// The contract version ([`super::VERSION`]).
    pub const CONTRACT_VERSION: &str = "DEEPINFER_CONTRACT_VERSION";
    /// Always `1`: the engine never downloads at serve time.
    pub const HF_HUB_OFFLINE: &str = "HF_HUB_OFFLINE";
    /// The mounted checkpoint volume's root.
    pub const MODEL_DIR: &str = "DEEPINFER_HF_MODEL_DIR";
    /// `worker`, `prefill`, `decode` or `vision`.
    pub const ROLE: &str = "DEEPINFER_ROLE";
    /// Index of the serving group inside its role.
    pub const GROUP: &str = "DEEPINFER_GROUP";
    /// Rank of this pod inside its group (rank 0 leads).
    pub const RANK: &str = "DEEPINFER_RANK";
    /// Pods in the group.
    pub const NUM_PODS: &str = "DEEPINFER_NUM_PODS";
    /// Devices of this pod.
    pub const DEVICES_PER_POD: &str = "DEEPINFER_DEVICES_PER_POD";
    /// Devices in the group: tensor × pipeline × data.
    pub const WORLD_SIZE: &str = "DEEPINFER_WORLD_SIZE";
    /// Tensor-parallel degree.
    pub const TENSOR_PARALLEL: &str = "DEEPINFER_TENSOR_PARALLEL";
    /// Pipeline-parallel degree.
    pub const PIPELINE_PARALLEL: &str = "DEEPINFER_PIPELINE_PARALLEL";
    /// Data-parallel degree.
    pub const DATA_PARALLEL: &str = "DEEPINFER_DATA_PARALLEL";
    /// Expert-parallel degree.
    pub const EXPERT_PARALLEL: &str = "DEEPINFER_EXPERT_PARALLEL";
    /// DNS name of rank 0 of the group.
    pub const LEADER_ADDRESS: &str = "DEEPINFER_LEADER_ADDRESS";
    /// DNS names of every rank of the group, rank order, comma-separated.
    pub const PEERS: &str = "DEEPINFER_PEERS";
    /// Port the leader serves traffic and the health path on.
    pub const SERVE_PORT: &str = "DEEPINFER_SERVE_PORT";
    /// Rendezvous address (same as the leader address), for torch-style launchers.
    pub const MASTER_ADDR: &str = "MASTER_ADDR";
    /// Rendezvous port.
    pub const MASTER_PORT: &str = "MASTER_PORT";
    /// The pod's name (downward API).
    pub const POD_NAME: &str = "POD_NAME";
    /// The pod's IP (downward API).
    pub const POD_IP: &str = "POD_IP";
    /// The group's HCCL rank table (Ascend serving groups).
    pub const RANK_TABLE_FILE: &str = "RANK_TABLE_FILE";
    /// Decode groups: the prefill role's Service, `host:port`.
    pub const PREFILL_SERVICE: &str = "DEEPINFER_PREFILL_SERVICE";
    /// Decode groups: the vision role's Service, `host:port`.
    pub const VISION_SERVICE: &str = "DEEPINFER_VISION_SERVICE";
    /// Decode groups: the file listing the ready prefill / vision group leaders.
    pub const PEER_ENDPOINTS_FILE: &str = "DEEPINFER_PEER_ENDPOINTS_FILE";
}

/// The environment of every engine container, serving and acceptance alike.
pub const ENV: &[Item] = &[
    required(env::CONTRACT_VERSION),
    required(env::HF_HUB_OFFLINE),
    required(env::MODEL_DIR),
    required(env::ROLE),
    required(env::GROUP),
    required(env::RANK),
    required(env::NUM_PODS),
    required(env::DEVICES_PER_POD),
    required(env::WORLD_SIZE),
    required(env::TENSOR_PARALLEL),
    required(env::PIPELINE_PARALLEL),
    required(env::DATA_PARALLEL),
    required(env::EXPERT_PARALLEL),
    required(env::LEADER_ADDRESS),
    required(env::PEERS),
    required(env::SERVE_PORT),
    required(env::MASTER_ADDR),
    required(env::MASTER_PORT),
    required(env::POD_NAME),
    required(env::POD_IP),
    optional(env::RANK_TABLE_FILE),
    optional(env::PREFILL_SERVICE),
    optional(env::VISION_SERVICE),
    optional(env::PEER_ENDPOINTS_FILE),
];

/// Placeholders of the acceptance command template.
pub mod placeholder {
    /// The local checkpoint directory (what `--model_name` gets).
    pub const MODEL_DIR: &str = "{model_dir}";
    /// The prompts file (JSON lines) the engine reads.
    pub const PROMPTS_FILE: &str = "{prompts_file}";
    /// The outputs file (JSON lines) the engine writes.
    pub const OUTPUTS_FILE: &str = "{outputs_file}";
    /// The serving container's arguments of the judged role (`--model_name <dir>`, then
    /// `spec.runtime.args`, then the role's `spec.runtime.roles[].args`), as zero or more
    /// arguments. Only a whole argument; every template holds it.
    pub const SERVING_ARGS: &str = "{serving_args}";
    /// `spec.runtime.command` as zero or more arguments (none when the image's entrypoint
    /// serves). Only a whole argument.
    pub const SERVING_COMMAND: &str = "{serving_command}";
}

/// Every placeholder the runner substitutes. The file placeholders are substituted anywhere in
/// an argument; [`placeholder::SERVING_ARGS`] and [`placeholder::SERVING_COMMAND`] only as a
/// whole argument, which becomes zero or more arguments. Required: every template may use it
/// and it always has a value ([`placeholder::SERVING_ARGS`] must be in every template);
/// optional: it expands to nothing when the situation it names does not hold.
pub const PLACEHOLDERS: &[Item] = &[
    required(placeholder::MODEL_DIR),
    required(placeholder::PROMPTS_FILE),
    required(placeholder::OUTPUTS_FILE),
    required(placeholder::SERVING_ARGS),
    optional(placeholder::SERVING_COMMAND),
];

/// Placeholders that stand for a list of arguments and so must be a whole argument.
pub const LIST_PLACEHOLDERS: &[&str] = &[placeholder::SERVING_ARGS, placeholder::SERVING_COMMAND];

/// The documented acceptance inputs of the environment: the variables whose values legitimately
/// differ between the judged engine of an acceptance run and a serving engine of the same role
/// and revision, because they name the pod or its group rather than configure the engine. Every
/// other variable the operator sets, and every variable of `spec.runtime.env` and the role's
/// `spec.runtime.roles[].env`, has the same value in both. (`RANK_TABLE_FILE` and
/// `DEEPINFER_PEER_ENDPOINTS_FILE` name the same paths in both; the files' contents list the
/// run's own groups.)
pub const ACCEPTANCE_INPUT_ENV: &[Item] = &[
    required(env::GROUP),
    required(env::LEADER_ADDRESS),
    required(env::PEERS),
    required(env::MASTER_ADDR),
    required(env::POD_NAME),
    required(env::POD_IP),
    optional(env::PREFILL_SERVICE),
    optional(env::VISION_SERVICE),
];

/// What the runner writes in its report (and the judge in `manifest.json`) in place of the value
/// of a variable that comes from a Secret, a ConfigMap or a resource field, and in place of any
/// occurrence of such a value in another variable or an argument.
pub const REDACTED: &str = "<redacted>";

/// Fields of one line of the outputs file.
pub mod output {
    /// Prompt id the line answers.
    pub const ID: &str = "id";
    /// Decoded text, exactly as generated.
    pub const TEXT: &str = "text";
    /// `stop`, `length` or another engine-specific value.
    pub const FINISH_REASON: &str = "finish_reason";
    /// Tokens in the prompt.
    pub const PROMPT_TOKENS: &str = "prompt_tokens";
    /// Prompt tokens served from the prefix (KV) cache.
    pub const CACHED_TOKENS: &str = "cached_tokens";
    /// Tokens generated.
    pub const COMPLETION_TOKENS: &str = "completion_tokens";
    /// Draft tokens accepted by speculative decoding (MTP).
    pub const ACCEPTED_TOKENS: &str = "accepted_tokens";
    /// Requests in flight in the engine when this one was admitted (itself included).
    pub const ACTIVE_REQUESTS: &str = "active_requests";
    /// Seconds from admission to the first generated token.
    pub const FIRST_TOKEN_SECONDS: &str = "first_token_seconds";
    /// Seconds from admission to the last generated token (the request's completion time).
    pub const COMPLETION_SECONDS: &str = "completion_seconds";
}

/// Fields of one output line.
pub const OUTPUT_FIELDS: &[Item] = &[
    required(output::ID),
    required(output::TEXT),
    required(output::FINISH_REASON),
    optional(output::PROMPT_TOKENS),
    optional(output::CACHED_TOKENS),
    optional(output::COMPLETION_TOKENS),
    optional(output::ACCEPTED_TOKENS),
    optional(output::ACTIVE_REQUESTS),
    optional(output::FIRST_TOKEN_SECONDS),
    optional(output::COMPLETION_SECONDS),
];

/// Timing events (`DEEPINFER_EVENT <name>` lines on stdout or stderr).
pub mod event {
    /// Prefix of an event line.
    pub const PREFIX: &str = "DEEPINFER_EVENT ";
    /// Weights are loaded.
    pub const LOADED: &str = "loaded";
    /// Warm-up finished; the measured interval starts.
    pub const WARMUP_DONE: &str = "warmup_done";
    /// Every prompt is generated; the measured interval ends (else it ends at a clean exit).
    pub const GENERATION_DONE: &str = "generation_done";
}

/// Timing events; each is optional, and a phase whose events are missing is "not reported".
pub const EVENTS: &[Item] = &[
    optional(event::LOADED),
    optional(event::WARMUP_DONE),
    optional(event::GENERATION_DONE),
];

/// The engine's serving endpoint.
pub mod serve {
    /// Port the leader of a group serves on (container port `serve`).
    pub const PORT: i32 = 8000;
    /// Port ranks rendezvous on (container port `rendezvous`).
    pub const RENDEZVOUS_PORT: i32 = 29500;
    /// Path the default startup and readiness probes ask with HTTP GET on the serve port.
    pub const HEALTH_PATH: &str = "/health";
}

/// The required environment variables that `lookup` does not find, in contract order.
pub fn missing_env(lookup: impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
    ENV.iter()
        .filter(|i| i.presence == Presence::Required && lookup(i.name).is_none())
        .map(|i| i.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_within_each_table() {
        for table in [
            ENV,
            PLACEHOLDERS,
            OUTPUT_FIELDS,
            EVENTS,
            ACCEPTANCE_INPUT_ENV,
        ] {
            let mut names: Vec<_> = table.iter().map(|i| i.name).collect();
            names.sort_unstable();
            let before = names.len();
            names.dedup();
            assert_eq!(before, names.len(), "duplicate names in {table:?}");
        }
    }

    #[test]
    fn missing_env_names_each_absent_required_variable() {
        let all = |_: &str| Some("x".to_string());
        assert!(missing_env(all).is_empty());
        let no_rank = |n: &str| (n != env::RANK && n != env::PEERS).then(|| "x".to_string());
        assert_eq!(missing_env(no_rank), vec![env::RANK, env::PEERS]);
    }
}
