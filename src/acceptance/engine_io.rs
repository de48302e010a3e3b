//! The engine's input/output contract (docs/engine-contract.md): prompts go in as JSON lines, one
//! object per prompt; outputs come back as JSON lines, one object per prompt.

use serde::{Deserialize, Serialize};

use crate::api::{AcceptanceSpec, EffectiveSampling, StructuredOutput};

/// First bytes of the line the evidence writer appends to a truncated `outputs.jsonl`.
pub const TRUNCATION_MARKER: &str = "# deepinfer-operator: truncated";

/// One line of the prompts file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PromptLine {
    /// Prompt id; the output line carries it back.
    pub id: String,
    /// Prompt text.
    pub prompt: String,
    /// Token budget; absent means the engine's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i32>,
    /// The structured output requested (DeepInfer's per-prompt `so_args` sampling parameter).
    pub so_args: SoArgs,
    /// The sampling settings to generate with, every default applied. Absent only in files
    /// written before the runner pinned sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingParams>,
}

/// Sampling settings of one prompt, named as the engine's sampling parameters.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    /// Sampling temperature; 0 is greedy decoding.
    pub temperature: f64,
    /// Nucleus-sampling probability mass; 1 is off.
    pub top_p: f64,
    /// Top-k; 0 is off.
    pub top_k: i32,
    /// Random seed.
    pub seed: i64,
    /// Repetition penalty; 1 is none.
    pub repetition_penalty: f64,
}

impl From<EffectiveSampling> for SamplingParams {
    fn from(s: EffectiveSampling) -> Self {
        Self {
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k,
            seed: s.seed,
            repetition_penalty: s.repetition_penalty,
        }
    }
}

/// Structured-output request: exactly one key is set.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct SoArgs {
    /// A JSON Schema (as a JSON object, not a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
    /// A regular expression the whole output must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// A GBNF grammar (start rule `root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
}

impl From<&StructuredOutput> for SoArgs {
    fn from(so: &StructuredOutput) -> Self {
        Self {
            json_schema: so.json.clone(),
            regex: so.regex.clone(),
            grammar: so.grammar.clone(),
        }
    }
}

/// The prompts file's lines for a spec (`promptsFrom` already resolved), in spec order, each with
/// its effective sampling (the section's, then the prompt's overrides, defaults applied).
pub fn prompt_lines(spec: &AcceptanceSpec) -> Vec<PromptLine> {
    spec.prompts
        .iter()
        .map(|p| PromptLine {
            id: p.id.clone(),
            prompt: p.prompt.clone(),
            max_tokens: p.max_tokens,
            so_args: (&p.structured_output).into(),
            sampling: Some(spec.sampling_of(p).into()),
        })
        .collect()
}

/// The prompts file's bytes: one compact JSON object per line (see [`prompt_lines`]).
pub fn prompts_jsonl(spec: &AcceptanceSpec) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for line in prompt_lines(spec) {
        serde_json::to_writer(&mut out, &line)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// One line of the engine's outputs. Unknown fields are allowed and ignored.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct OutputLine {
    /// Prompt id this output answers.
    pub id: String,
    /// The decoded text, exactly as generated.
    pub text: String,
    /// `stop` (ended by EOS or a stop sequence), `length` (token budget hit), or an engine-specific
    /// value such as `abort` or `error`.
    pub finish_reason: String,
    /// Tokens in the prompt.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens served from the prefix (KV) cache.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Tokens generated.
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Draft tokens accepted by speculative decoding (MTP), when the engine reports them.
    #[serde(default)]
    pub accepted_tokens: Option<u64>,
    /// Requests in flight in the engine when this one was admitted (itself included).
    #[serde(default)]
    pub active_requests: Option<u64>,
    /// Seconds from admission to the first generated token.
    #[serde(default)]
    pub first_token_seconds: Option<f64>,
    /// Seconds from admission to the last generated token (the request's completion time).
    #[serde(default)]
    pub completion_seconds: Option<f64>,
}

/// An output with the 1-based line it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberedOutput {
    /// 1-based line number in the outputs file.
    pub line: usize,
    /// The parsed line.
    pub output: OutputLine,
}

/// A line of the outputs file that is not a valid output object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong (names the field when one is missing or mistyped).
    pub message: String,
}

/// The outputs file, parsed line by line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedOutputs {
    /// Valid output lines, in file order.
    pub outputs: Vec<NumberedOutput>,
    /// Lines that are not valid output objects.
    pub errors: Vec<LineError>,
    /// Line at which the evidence writer truncated the file, if it did.
    pub truncated_at: Option<usize>,
}

/// Parses the engine's JSON lines. Blank lines are skipped; every other line must be an object
/// with string `id`, `text` and `finish_reason`.
pub fn parse_outputs(bytes: &[u8]) -> ParsedOutputs {
    let mut parsed = ParsedOutputs::default();
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if raw.starts_with(TRUNCATION_MARKER.as_bytes()) {
            parsed.truncated_at = Some(line);
            continue;
        }
        match serde_json::from_slice::<OutputLine>(raw) {
            Ok(output) => parsed.outputs.push(NumberedOutput { line, output }),
            Err(err) => parsed.errors.push(LineError {
                line,
                message: describe_json_error(&err),
            }),
        }
    }
    parsed
}

/// serde_json's message without its "at line 1 column N" tail when the whole input is one line.
fn describe_json_error(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) if err.line() == 1 => format!("{} (column {})", &text[..cut], err.column()),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_names_bad_fields() {
        let input = b"{\"id\":\"a\",\"text\":\"x\",\"finish_reason\":\"stop\",\"prompt_tokens\":3,\"completion_tokens\":1,\"extra\":1}\n\n{\"id\":\"b\",\"finish_reason\":\"stop\"}\r\nnot json\n{\"id\":\"c\",\"text\":\"x\",\"finish_reason\":\"stop\",\"completion_tokens\":\"many\"}\n";
        let parsed = parse_outputs(input);
        assert_eq!(parsed.outputs.len(), 1);
        assert_eq!(parsed.outputs[0].line, 1);
        assert_eq!(parsed.outputs[0].output.prompt_tokens, Some(3));
        assert_eq!(parsed.outputs[0].output.accepted_tokens, None);
        let lines: Vec<usize> = parsed.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [3, 4, 5]);
        assert!(
            parsed.errors[0].message.contains("missing field `text`"),
            "{}",
            parsed.errors[0].message
        );
        assert!(
            parsed.errors[2]
                .message
                .contains("invalid type: string \"many\""),
            "{}",
            parsed.errors[2].message
        );
    }

    #[test]
    fn prompt_lines_carry_so_args_and_the_default_sampling() {
        let spec = crate::acceptance::spec_file::parse_spec(
            "prompts:\n- id: p\n  prompt: say yes\n  maxTokens: 8\n  structuredOutput:\n    regex: 'yes|no'\n",
        )
        .unwrap();
        let text = String::from_utf8(prompts_jsonl(&spec).unwrap()).unwrap();
        assert_eq!(text, "{\"id\":\"p\",\"prompt\":\"say yes\",\"max_tokens\":8,\"so_args\":{\"regex\":\"yes|no\"},\"sampling\":{\"temperature\":0.0,\"top_p\":1.0,\"top_k\":0,\"seed\":0,\"repetition_penalty\":1.0}}\n");
    }

    #[test]
    fn prompt_lines_carry_the_section_sampling_with_each_prompts_overrides() {
        let spec = crate::acceptance::spec_file::parse_spec(
            "sampling: {temperature: 0.6, topP: 0.95, seed: 42}\nprompts:\n- {id: a, prompt: x, structuredOutput: {regex: a}}\n- {id: b, prompt: y, sampling: {temperature: 0, topK: 20, repetitionPenalty: 1.05}, structuredOutput: {regex: b}}\n",
        )
        .unwrap();
        let text = String::from_utf8(prompts_jsonl(&spec).unwrap()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0]["sampling"],
            serde_json::json!({"temperature": 0.6, "top_p": 0.95, "top_k": 0, "seed": 42, "repetition_penalty": 1.0})
        );
        assert_eq!(
            lines[1]["sampling"],
            serde_json::json!({"temperature": 0.0, "top_p": 0.95, "top_k": 20, "seed": 42, "repetition_penalty": 1.05})
        );
        // A line without `sampling` (written before it was pinned) still reads.
        let old: PromptLine =
            serde_json::from_str("{\"id\":\"p\",\"prompt\":\"x\",\"so_args\":{\"regex\":\"a\"}}")
                .unwrap();
        assert_eq!(old.sampling, None);
    }
}
