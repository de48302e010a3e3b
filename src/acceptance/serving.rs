//! The judge's side of the serving API (docs/engine-contract.md, "Serving API"): the prompts are
//! sent to a serving endpoint, as traffic reaches it, instead of to an engine run of the judge's
//! own. `accept --endpoint URL` waits for the endpoint's `GET /health` to answer 200 (loading and
//! warm-up, kept apart from what is measured), then sends every acceptance prompt to
//! `POST /v1/completions` one at a time with its pinned sampling and its structured-output
//! constraint: those answers are the outputs the checker judges. A second pass sends the prompts
//! again with `--load-concurrency` requests in flight (at least that many requests, cycling
//! through the prompts) to measure capacity beside individual completion time. Every figure is
//! taken on the judge's side of the network; what only the engine can know (its own first-token
//! and completion times) is recorded when the answer carries it and is otherwise absent, never
//! estimated.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{header, Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::engine::round_ms;
use super::engine_io::{OutputLine, PromptLine};
use crate::checkpoint::fetch::error_chain;

/// Version of the serving API the judge speaks (docs/engine-contract.md).
pub const SERVING_API_VERSION: u32 = 1;
/// The completions path of the serving API.
pub const COMPLETIONS_PATH: &str = "/v1/completions";
/// The health path of the serving API.
pub const HEALTH_PATH: &str = "/health";
/// Longest answer read; a longer one is refused.
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// Attempts of one request: a failed connection or a `503` (the engine not ready or full) is
/// sent again after a second, up to this many times in all.
const ATTEMPTS: u32 = 3;
/// Longest wait for one answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// What the judge measured of a serving endpoint, kept in the manifest (`serving`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServingMeasurement {
    /// The endpoint judged, e.g. `http://rank-0.flash-worker-7c2f1-0.models.svc:8000`.
    pub endpoint: String,
    /// The serving API version spoken.
    pub api_version: u32,
    /// Seconds from the judge's start until `GET /health` answered 200: loading and warm-up, not
    /// part of any measured pass.
    pub ready_after_seconds: f64,
    /// The judged pass (concurrency 1) and the load pass.
    pub passes: Vec<ServingPass>,
}

/// One pass over the endpoint.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServingPass {
    /// Requests in flight at once.
    pub concurrency: u32,
    /// Seconds from the first request sent to the last answer read.
    pub wall_seconds: f64,
    /// Completion tokens over the wall seconds, when every answer reported its tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_per_second: Option<f64>,
    /// Answered requests over the wall seconds.
    pub requests_per_second: f64,
    /// Mean of the requests' seconds (send to last byte, on the judge's side).
    pub mean_seconds: f64,
    /// Longest of them.
    pub max_seconds: f64,
    /// Each request.
    pub requests: Vec<ServedRequest>,
}

/// One request as the judge saw it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServedRequest {
    /// The prompt id.
    pub id: String,
    /// Attempts made (1 when the first was answered).
    pub attempts: u32,
    /// HTTP status of the last attempt; 0 when nothing answered.
    pub status: u16,
    /// Seconds from sending the last attempt to reading the last byte of its answer.
    pub seconds: f64,
    /// Seconds from the engine's admission to its first token, as the engine reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_first_token_seconds: Option<f64>,
    /// Seconds from the engine's admission to its last token, as the engine reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_completion_seconds: Option<f64>,
    /// `seconds` less the engine's completion time: the time the request spent queued before
    /// admission and in transit, when the engine reported its completion time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_and_transit_seconds: Option<f64>,
    /// Tokens generated, as the engine reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Why the answer could not be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a judged endpoint left for the checker.
pub struct Served {
    /// The outputs of the judged pass, as the engine contract's outputs file.
    pub outputs: Vec<u8>,
    /// The measurement.
    pub measurement: ServingMeasurement,
    /// Requests of the judged pass the endpoint did not answer usably: `id: why`.
    pub refused: Vec<String>,
    /// One line per request, for the evidence's log.
    pub log: Vec<u8>,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Judges `endpoint` (`http://host:port`) with `prompts`: waits up to `ready_within` for its
/// health, then the judged pass and a pass at `load_concurrency`. `Err` when the endpoint never
/// became ready or is not a URL.
pub async fn judge_endpoint(
    endpoint: &str,
    prompts: &[PromptLine],
    load_concurrency: u32,
    ready_within: Duration,
) -> Result<Served, String> {
    let base = endpoint.trim_end_matches('/').to_owned();
    let uri = |path: &str| -> Result<Uri, String> {
        format!("{base}{path}")
            .parse()
            .map_err(|e| format!("--endpoint {endpoint:?} is not a URL: {e}"))
    };
    let (health, completions) = (uri(HEALTH_PATH)?, uri(COMPLETIONS_PATH)?);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let start = Instant::now();
    wait_ready(&client, &health, ready_within).await?;
    let ready_after_seconds = round_ms(start.elapsed().as_secs_f64());

    let (judged, answers) = pass(&client, &completions, prompts.iter().collect(), 1).await;
    let mut outputs = Vec::new();
    let mut refused = Vec::new();
    for (request, answer) in judged.requests.iter().zip(answers) {
        match answer {
            Some(line) => {
                serde_json::to_writer(&mut outputs, &line).map_err(|e| e.to_string())?;
                outputs.push(b'\n');
            }
            None => refused.push(format!(
                "{}: {}",
                request.id,
                request.error.as_deref().unwrap_or("no answer")
            )),
        }
    }
    let concurrency = load_concurrency.max(1);
    let mut passes = vec![judged];
    if concurrency > 1 && !prompts.is_empty() {
        let count = prompts.len().max(concurrency as usize);
        let load: Vec<&PromptLine> = prompts.iter().cycle().take(count).collect();
        passes.push(pass(&client, &completions, load, concurrency).await.0);
    }
    let log = passes
        .iter()
        .flat_map(|p| {
            p.requests.iter().map(move |r| {
                format!(
                    "concurrency {} {}: HTTP {} after {:.3}s in {} attempt(s){}\n",
                    p.concurrency,
                    r.id,
                    r.status,
                    r.seconds,
                    r.attempts,
                    r.error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )
            })
        })
        .collect::<String>()
        .into_bytes();
    Ok(Served {
        outputs,
        measurement: ServingMeasurement {
            endpoint: base,
            api_version: SERVING_API_VERSION,
            ready_after_seconds,
            passes,
        },
        refused,
        log,
    })
}

/// Polls `health` every second until it answers 200.
async fn wait_ready(client: &HttpClient, health: &Uri, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let request = Request::get(health.clone())
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let last = match tokio::time::timeout(Duration::from_secs(5), client.request(request)).await
        {
            Ok(Ok(response)) if response.status() == StatusCode::OK => return Ok(()),
            Ok(Ok(response)) => format!("HTTP {}", response.status()),
            Ok(Err(e)) => error_chain(&e),
            Err(_) => "no answer within 5s".into(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "the serving endpoint {health} did not answer 200 within {}s (last: {last})",
                within.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Sends `prompts` with up to `concurrency` in flight; the requests in prompt order, each with
/// its usable answer.
async fn pass(
    client: &HttpClient,
    completions: &Uri,
    prompts: Vec<&PromptLine>,
    concurrency: u32,
) -> (ServingPass, Vec<Option<OutputLine>>) {
    let start = Instant::now();
    let mut done: Vec<(usize, ServedRequest, Option<OutputLine>)> =
        futures::stream::iter(prompts.into_iter().enumerate())
            .map(|(i, prompt)| async move {
                let (request, answer) = send(client, completions, prompt).await;
                (i, request, answer)
            })
            .buffer_unordered(concurrency as usize)
            .collect()
            .await;
    let wall_seconds = round_ms(start.elapsed().as_secs_f64());
    done.sort_by_key(|(i, _, _)| *i);
    let answered = done.iter().filter(|(_, _, a)| a.is_some()).count();
    let tokens: Option<u64> = done
        .iter()
        .map(|(_, r, _)| r.completion_tokens)
        .sum::<Option<u64>>();
    let seconds: Vec<f64> = done.iter().map(|(_, r, _)| r.seconds).collect();
    let per_second = |n: f64| {
        if wall_seconds > 0.0 {
            round_ms(n / wall_seconds)
        } else {
            0.0
        }
    };
    let requests: Vec<ServedRequest> = done.iter().map(|(_, r, _)| r.clone()).collect();
    let answers = done.into_iter().map(|(_, _, a)| a).collect();
    let pass = ServingPass {
        concurrency,
        wall_seconds,
        completion_tokens_per_second: tokens
            .filter(|_| answered == requests.len())
            .map(|t| per_second(t as f64)),
        requests_per_second: per_second(answered as f64),
        mean_seconds: round_ms(seconds.iter().sum::<f64>() / seconds.len().max(1) as f64),
        max_seconds: seconds.iter().copied().fold(0.0, f64::max),
        requests,
    };
    (pass, answers)
}

/// The request body of `prompt` (docs/engine-contract.md, "Serving API").
pub fn request_body(prompt: &PromptLine) -> Value {
    let mut body = json!({"prompt": prompt.prompt});
    if let Some(max) = prompt.max_tokens {
        body["max_tokens"] = json!(max);
    }
    if let Some(s) = prompt.sampling {
        body["temperature"] = json!(s.temperature);
        body["top_p"] = json!(s.top_p);
        body["top_k"] = json!(s.top_k);
        body["seed"] = json!(s.seed);
        body["repetition_penalty"] = json!(s.repetition_penalty);
    }
    let so = &prompt.so_args;
    if let Some(schema) = &so.json_schema {
        body["json_schema"] = schema.clone();
    }
    if let Some(regex) = &so.regex {
        body["regex"] = json!(regex);
    }
    if let Some(grammar) = &so.grammar {
        body["grammar"] = json!(grammar);
    }
    body
}

/// One answer of the serving API.
#[derive(Deserialize)]
struct Answer {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    timings: Option<EngineTimings>,
}

#[derive(Deserialize)]
struct Choice {
    text: String,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize)]
struct PromptTokensDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct EngineTimings {
    first_token_seconds: Option<f64>,
    completion_seconds: Option<f64>,
}

/// Sends one prompt (again after a failed connection or a 503), reads and parses the answer.
async fn send(
    client: &HttpClient,
    completions: &Uri,
    prompt: &PromptLine,
) -> (ServedRequest, Option<OutputLine>) {
    let body = Bytes::from(request_body(prompt).to_string());
    let mut served = ServedRequest {
        id: prompt.id.clone(),
        attempts: 0,
        status: 0,
        seconds: 0.0,
        engine_first_token_seconds: None,
        engine_completion_seconds: None,
        queued_and_transit_seconds: None,
        completion_tokens: None,
        error: None,
    };
    for attempt in 1..=ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        served.attempts = attempt;
        let request = Request::builder()
            .method(Method::POST)
            .uri(completions.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()));
        let request = match request {
            Ok(request) => request,
            Err(e) => {
                served.error = Some(e.to_string());
                return (served, None);
            }
        };
        let sent = Instant::now();
        let outcome = tokio::time::timeout(ANSWER_TIMEOUT, async {
            let response = client.request(request).await.map_err(|e| error_chain(&e))?;
            let status = response.status();
            let limited = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES);
            let bytes = limited
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, bytes))
        })
        .await;
        served.seconds = round_ms(sent.elapsed().as_secs_f64());
        let (status, bytes) = match outcome {
            Err(_) => {
                served.error = Some(format!("no answer within {}s", ANSWER_TIMEOUT.as_secs()));
                return (served, None);
            }
            Ok(Err(e)) => {
                served.error = Some(format!("request failed: {e}"));
                continue;
            }
            Ok(Ok(answer)) => answer,
        };
        served.status = status.as_u16();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            served.error = Some(format!("HTTP 503: {}", excerpt(&bytes)));
            continue;
        }
        if !status.is_success() {
            served.error = Some(format!("HTTP {}: {}", status.as_u16(), excerpt(&bytes)));
            return (served, None);
        }
        served.error = None;
        return match parse_answer(&prompt.id, &bytes) {
            Ok(line) => {
                served.completion_tokens = line.completion_tokens;
                served.engine_first_token_seconds = line.first_token_seconds;
                served.engine_completion_seconds = line.completion_seconds;
                served.queued_and_transit_seconds = line
                    .completion_seconds
                    .map(|engine| round_ms((served.seconds - engine).max(0.0)));
                (served, Some(line))
            }
            Err(e) => {
                served.error = Some(e);
                (served, None)
            }
        };
    }
    (served, None)
}

/// The output line of an answer (the engine's own first-token and completion seconds in it).
fn parse_answer(id: &str, bytes: &[u8]) -> Result<OutputLine, String> {
    let answer: Answer = serde_json::from_slice(bytes)
        .map_err(|e| format!("not an answer of the serving API ({e}): {}", excerpt(bytes)))?;
    let choice = answer
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| "the answer holds no choice".to_string())?;
    let usage = answer.usage;
    let timings = answer.timings;
    Ok(OutputLine {
        id: id.to_owned(),
        text: choice.text,
        finish_reason: choice.finish_reason.unwrap_or_else(|| "unknown".into()),
        prompt_tokens: usage.as_ref().and_then(|u| u.prompt_tokens),
        cached_tokens: usage
            .as_ref()
            .and_then(|u| u.prompt_tokens_details.as_ref())
            .and_then(|d| d.cached_tokens),
        completion_tokens: usage.as_ref().and_then(|u| u.completion_tokens),
        accepted_tokens: None,
        active_requests: None,
        first_token_seconds: timings.as_ref().and_then(|t| t.first_token_seconds),
        completion_seconds: timings.as_ref().and_then(|t| t.completion_seconds),
    })
}

/// The first 200 characters of an answer, for messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acceptance::engine_io::{SamplingParams, SoArgs};

    fn prompt(so: SoArgs) -> PromptLine {
        PromptLine {
            id: "p1".into(),
            prompt: "Plan three shots.".into(),
            max_tokens: Some(64),
            so_args: so,
            sampling: Some(SamplingParams {
                temperature: 0.0,
                top_p: 1.0,
                top_k: 0,
                seed: 1234,
                repetition_penalty: 1.0,
            }),
        }
    }

    #[test]
    fn a_request_carries_the_pinned_sampling_and_the_one_constraint() {
        let body = request_body(&prompt(SoArgs {
            json_schema: Some(json!({"type": "object"})),
            ..SoArgs::default()
        }));
        assert_eq!(
            body,
            json!({"prompt": "Plan three shots.", "max_tokens": 64, "temperature": 0.0,
                   "top_p": 1.0, "top_k": 0, "seed": 1234, "repetition_penalty": 1.0,
                   "json_schema": {"type": "object"}})
        );
        let regex = request_body(&prompt(SoArgs {
            regex: Some("[a-z]+".into()),
            ..SoArgs::default()
        }));
        assert_eq!(regex["regex"], "[a-z]+");
        assert!(regex.get("json_schema").is_none() && regex.get("grammar").is_none());
    }

    #[test]
    fn an_answer_becomes_an_output_line_with_only_what_the_engine_reported() {
        let line = parse_answer(
            "p1",
            br#"{"choices":[{"text":"{}","finish_reason":"stop"}],
                 "usage":{"prompt_tokens":12,"completion_tokens":3,
                          "prompt_tokens_details":{"cached_tokens":4}},
                 "timings":{"first_token_seconds":0.05,"completion_seconds":0.2}}"#,
        )
        .expect("an answer");
        assert_eq!(line.text, "{}");
        assert_eq!(line.finish_reason, "stop");
        assert_eq!(
            (
                line.prompt_tokens,
                line.cached_tokens,
                line.completion_tokens
            ),
            (Some(12), Some(4), Some(3))
        );
        assert_eq!(
            (line.first_token_seconds, line.completion_seconds),
            (Some(0.05), Some(0.2))
        );
        let bare = parse_answer(
            "p1",
            br#"{"choices":[{"text":"x","finish_reason":"length"}]}"#,
        )
        .expect("an answer without usage");
        assert_eq!(
            (
                bare.completion_tokens,
                bare.first_token_seconds,
                bare.completion_seconds
            ),
            (None, None, None)
        );
        assert!(parse_answer("p1", br#"{"choices":[]}"#).is_err());
        assert!(parse_answer("p1", b"<html>")
            .unwrap_err()
            .contains("<html>"));
    }
}
