//! The checker: judges each engine output on its own against its prompt's expectations.
//! Pure: no I/O. Both `accept` and `check` go through [`CompiledSpec::judge`].

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::engine_io::{NumberedOutput, ParsedOutputs};
use super::grammar::Grammar;
use super::rules::CompiledRule;
use crate::api::{AcceptancePrompt, AcceptanceSpec};

/// Most schema errors listed in one reason.
const MAX_SCHEMA_ERRORS: usize = 8;

/// The verdict on one prompt (or on an output whose id is not a prompt).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Prompt id.
    pub id: String,
    /// Whether every check passed.
    pub passed: bool,
    /// Why it failed (every failed check, `; `-separated); empty when it passed.
    pub reason: String,
}

impl Verdict {
    /// `PASS <id>` or `FAIL <id>: <reason>`.
    pub fn line(&self) -> String {
        if self.passed {
            format!("PASS {}", self.id)
        } else {
            format!("FAIL {}: {}", self.id, self.reason)
        }
    }
}

/// An acceptance spec that is not usable: which prompt and field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

enum Structure {
    Json {
        schema: Value,
        validator: Box<jsonschema::Validator>,
    },
    Regex(regex::Regex),
    Grammar(Grammar),
}

struct CompiledPrompt {
    id: String,
    structure: Structure,
    rules: Vec<CompiledRule>,
}

/// An acceptance spec with every schema, regex, grammar and rule compiled.
pub struct CompiledSpec {
    prompts: Vec<CompiledPrompt>,
    require_eos: bool,
}

impl std::fmt::Debug for CompiledSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.prompts.iter().map(|p| p.id.as_str()).collect();
        f.debug_struct("CompiledSpec")
            .field("prompts", &ids)
            .field("require_eos", &self.require_eos)
            .finish()
    }
}

impl CompiledSpec {
    /// Compiles the spec. `promptsFrom` must already be resolved into `prompts` (the controller
    /// does that before it hands the spec to the judge).
    pub fn compile(spec: &AcceptanceSpec) -> Result<Self, SpecError> {
        if let Some(from) = &spec.prompts_from {
            return Err(SpecError(format!(
                "promptsFrom (ConfigMap {:?}, key {:?}) is not resolved here; put its prompts inline under prompts",
                from.name, from.key
            )));
        }
        if spec.prompts.is_empty() {
            return Err(SpecError("prompts: at least one prompt is needed".into()));
        }
        // Prompts from a ConfigMap reach here unchecked by the CRD: their sampling is bounded here.
        if let Some((field, message)) = spec
            .sampling
            .as_ref()
            .and_then(|s| s.problems("the default").into_iter().next())
        {
            return Err(SpecError(format!("sampling.{field} {message}")));
        }
        let mut seen = HashMap::new();
        let mut prompts = Vec::with_capacity(spec.prompts.len());
        for (index, prompt) in spec.prompts.iter().enumerate() {
            let at = format!("prompts[{index}] (id {:?})", prompt.id);
            if prompt.id.is_empty() {
                return Err(SpecError(format!("prompts[{index}].id is empty")));
            }
            if let Some(first) = seen.insert(prompt.id.as_str(), index) {
                return Err(SpecError(format!(
                    "{at}: id already used by prompts[{first}]"
                )));
            }
            if let Some((field, message)) = prompt.sampling.as_ref().and_then(|s| {
                crate::api::AcceptanceSampling::from(s)
                    .problems("the value of sampling")
                    .into_iter()
                    .next()
            }) {
                return Err(SpecError(format!("{at}.sampling.{field} {message}")));
            }
            prompts.push(compile_prompt(prompt).map_err(|e| SpecError(format!("{at}.{e}")))?);
        }
        Ok(Self {
            prompts,
            require_eos: spec.require_eos,
        })
    }

    /// Prompt ids in spec order.
    pub fn prompt_ids(&self) -> impl Iterator<Item = &str> {
        self.prompts.iter().map(|p| p.id.as_str())
    }

    /// One verdict per prompt, in spec order, then one failing verdict per output whose id is
    /// not a prompt.
    pub fn judge(&self, parsed: &ParsedOutputs) -> Vec<Verdict> {
        let mut by_id: HashMap<&str, Vec<&NumberedOutput>> = HashMap::new();
        for out in &parsed.outputs {
            by_id.entry(out.output.id.as_str()).or_default().push(out);
        }
        let by_prompt_id: std::collections::HashSet<&str> = self.prompt_ids().collect();
        let mut verdicts: Vec<Verdict> = self
            .prompts
            .iter()
            .map(|prompt| {
                let failures = match by_id.get(prompt.id.as_str()).map(Vec::as_slice) {
                    None | Some([]) => vec!["no output".to_string()],
                    Some([one]) => self.check_one(prompt, one),
                    Some(many) => {
                        let lines: Vec<String> = many.iter().map(|o| o.line.to_string()).collect();
                        vec![format!(
                            "{} outputs for this id (lines {})",
                            many.len(),
                            lines.join(", ")
                        )]
                    }
                };
                Verdict {
                    id: prompt.id.clone(),
                    passed: failures.is_empty(),
                    reason: failures.join("; "),
                }
            })
            .collect();
        for out in &parsed.outputs {
            if !by_prompt_id.contains(out.output.id.as_str()) {
                verdicts.push(Verdict {
                    id: out.output.id.clone(),
                    passed: false,
                    reason: format!(
                        "output on line {} has an id that is not in the acceptance spec",
                        out.line
                    ),
                });
            }
        }
        verdicts
    }

    fn check_one(&self, prompt: &CompiledPrompt, out: &NumberedOutput) -> Vec<String> {
        let output = &out.output;
        let mut failures = Vec::new();
        match output.finish_reason.as_str() {
            "stop" => {}
            "length" if self.require_eos => failures.push(
                "not ended by EOS: finish_reason is \"length\" (the token budget ran out)"
                    .to_string(),
            ),
            "length" => {}
            other => failures.push(format!("not completed: finish_reason is {other:?}")),
        }
        let value = match &prompt.structure {
            Structure::Json { schema, validator } => {
                match serde_json::from_str::<Value>(&output.text) {
                    Err(err) => {
                        failures.push(format!("malformed JSON: {err}"));
                        None
                    }
                    Ok(value) => {
                        let errors = schema_errors(schema, validator, &value);
                        if errors.is_empty() {
                            Some(value)
                        } else {
                            failures.push(errors.join("; "));
                            None
                        }
                    }
                }
            }
            Structure::Regex(re) => {
                if re.is_match(&output.text) {
                    Some(Value::String(output.text.clone()))
                } else {
                    failures.push(format!(
                        "does not match the regex {:?}",
                        prompt_regex_source(re)
                    ));
                    None
                }
            }
            Structure::Grammar(grammar) => match grammar.check(&output.text) {
                Ok(()) => Some(Value::String(output.text.clone())),
                Err(why) => {
                    failures.push(why);
                    None
                }
            },
        };
        if let Some(value) = value {
            failures.extend(
                prompt
                    .rules
                    .iter()
                    .filter_map(|rule| rule.check(&value).err()),
            );
        }
        failures
    }
}

fn compile_prompt(prompt: &AcceptancePrompt) -> Result<CompiledPrompt, String> {
    let so = &prompt.structured_output;
    let structure = match (&so.json, &so.regex, &so.grammar) {
        (Some(schema), None, None) => {
            let validator = jsonschema::options()
                .with_keyword("type", written_type)
                .build(schema)
                .map_err(|e| format!("structuredOutput.json: not a usable JSON Schema: {e}"))?;
            Structure::Json {
                schema: schema.clone(),
                validator: Box::new(validator),
            }
        }
        (None, Some(pattern), None) => Structure::Regex(
            regex::Regex::new(&format!(r"\A(?:{pattern})\z"))
                .map_err(|e| format!("structuredOutput.regex: {e}"))?,
        ),
        (None, None, Some(gbnf)) => Structure::Grammar(
            Grammar::parse(gbnf).map_err(|e| format!("structuredOutput.grammar: {e}"))?,
        ),
        _ => return Err("structuredOutput: set exactly one of json, regex or grammar".into()),
    };
    let rules = prompt
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            CompiledRule::compile(rule).map_err(|e| format!("rules[{i}].expression: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(CompiledPrompt {
        id: prompt.id.clone(),
        structure,
        rules,
    })
}

/// A JSON type name of the `type` keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JsonKind {
    Null,
    Boolean,
    Object,
    Array,
    Number,
    String,
    Integer,
}

impl JsonKind {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "null" => Self::Null,
            "boolean" => Self::Boolean,
            "object" => Self::Object,
            "array" => Self::Array,
            "number" => Self::Number,
            "string" => Self::String,
            "integer" => Self::Integer,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Boolean => "boolean",
            Self::Object => "object",
            Self::Array => "array",
            Self::Number => "number",
            Self::String => "string",
            Self::Integer => "integer",
        }
    }

    /// Whether `value` is of this type. An integer is a number written as a whole number: JSON
    /// Schema's `integer` also takes `2.0` or `2e0` (a number whose fraction is zero), the checker
    /// does not, as the engine wrote a fraction or an exponent. A whole number beyond 64 bits is
    /// read as a float and so is not an integer here either.
    fn holds(self, value: &Value) -> bool {
        match (self, value) {
            (Self::Null, Value::Null)
            | (Self::Boolean, Value::Bool(_))
            | (Self::Object, Value::Object(_))
            | (Self::Array, Value::Array(_))
            | (Self::Number, Value::Number(_))
            | (Self::String, Value::String(_)) => true,
            (Self::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            _ => false,
        }
    }
}

/// The `type` keyword as the checker applies it (see [`JsonKind::holds`]).
struct WrittenType(Vec<JsonKind>);

/// Compiles `type` into [`WrittenType`] (the schema was checked against the meta-schema first).
fn written_type<'a>(
    _parent: &'a serde_json::Map<String, Value>,
    value: &'a Value,
    _path: jsonschema::paths::Location,
) -> Result<Box<dyn for<'i> jsonschema::Keyword<'i>>, jsonschema::ValidationError<'a>> {
    let unusable = || {
        jsonschema::ValidationError::custom(
            "`type` must be one of null, boolean, object, array, number, string, integer, or a list of them",
        )
    };
    let kinds = match value {
        Value::String(name) => vec![JsonKind::parse(name).ok_or_else(unusable)?],
        Value::Array(names) => names
            .iter()
            .map(|n| n.as_str().and_then(JsonKind::parse).ok_or_else(unusable))
            .collect::<Result<_, _>>()?,
        _ => return Err(unusable()),
    };
    Ok(Box::new(WrittenType(kinds)))
}

impl<'i> jsonschema::Keyword<'i> for WrittenType {
    fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        if self.is_valid(instance) {
            return Ok(());
        }
        let names: Vec<String> = self.0.iter().map(|k| format!("\"{}\"", k.name())).collect();
        let of = if names.len() == 1 { "type" } else { "types" };
        let mut message = format!("{instance} is not of {of} {}", names.join(", "));
        if self.0.contains(&JsonKind::Integer)
            && instance
                .as_f64()
                .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
        {
            message.push_str(
                " (written with a fraction or an exponent, or beyond 64 bits: an integer must be written as a whole number)",
            );
        }
        Err(jsonschema::ValidationError::custom(message))
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        self.0.iter().any(|k| k.holds(instance))
    }
}

/// The user's pattern, without the anchors the checker adds.
fn prompt_regex_source(re: &regex::Regex) -> &str {
    let s = re.as_str();
    s.strip_prefix(r"\A(?:")
        .and_then(|s| s.strip_suffix(r")\z"))
        .unwrap_or(s)
}

/// Schema errors as `<JSON path>: <message>`, then strings that are blank once trimmed where the
/// schema asks for a `minLength`.
fn schema_errors(schema: &Value, validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    let mut errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{}: {}", display_path(&e.instance_path().to_string()), e))
        .collect();
    if errors.is_empty() {
        trimmed_min_length(schema, value, &mut String::new(), &mut errors);
    }
    if errors.len() > MAX_SCHEMA_ERRORS {
        let more = errors.len() - MAX_SCHEMA_ERRORS;
        errors.truncate(MAX_SCHEMA_ERRORS);
        errors.push(format!("and {more} more schema errors"));
    }
    errors
}

fn display_path(pointer: &str) -> &str {
    if pointer.is_empty() {
        "(root)"
    } else {
        pointer
    }
}

/// Whitespace-only strings are empty: where a subschema sets `minLength`, the string must meet it
/// once trimmed too. Follows `properties`, `additionalProperties`, `items`, `prefixItems` and
/// `allOf`; not `$ref` or the other combinators (express those with `pattern: "\\S"`).
fn trimmed_min_length(schema: &Value, value: &Value, path: &mut String, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    if let (Some(min), Value::String(s)) = (schema.get("minLength").and_then(Value::as_u64), value)
    {
        let trimmed = s.trim().chars().count() as u64;
        if trimmed < min {
            errors.push(format!(
                "{}: {s:?} is shorter than {min} characters once whitespace is trimmed (whitespace-only strings count as empty)",
                display_path(path)
            ));
        }
    }
    let mut descend = |sub: &Value, key: &str, item: &Value, errors: &mut Vec<String>| {
        let len = path.len();
        path.push('/');
        path.push_str(&key.replace('~', "~0").replace('/', "~1"));
        trimmed_min_length(sub, item, path, errors);
        path.truncate(len);
    };
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            for (key, item) in map {
                match properties.and_then(|p| p.get(key)) {
                    Some(sub) => descend(sub, key, item, errors),
                    None => {
                        if let Some(sub) = schema.get("additionalProperties") {
                            descend(sub, key, item, errors);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            let prefix = schema.get("prefixItems").and_then(Value::as_array);
            for (index, item) in items.iter().enumerate() {
                let sub = match prefix {
                    Some(prefix) if index < prefix.len() => prefix.get(index),
                    _ => schema.get("items"),
                };
                if let Some(sub) = sub {
                    descend(sub, &index.to_string(), item, errors);
                }
            }
        }
        _ => {}
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for sub in all {
            trimmed_min_length(sub, value, path, errors);
        }
    }
}

/// Counts for a summary line: `(prompts in the spec, of them passed)`.
pub fn tally(verdicts: &[Verdict], prompt_count: usize) -> (usize, usize) {
    let passed = verdicts
        .iter()
        .take(prompt_count)
        .filter(|v| v.passed)
        .count();
    (prompt_count, passed)
}

/// `id: reason` for every failing verdict, `; `-separated.
pub fn failure_summary(verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    for v in verdicts.iter().filter(|v| !v.passed) {
        if !out.is_empty() {
            out.push_str("; ");
        }
        let _ = write!(out, "{}: {}", v.id, v.reason);
    }
    out
}

#[cfg(test)]
mod tests;
