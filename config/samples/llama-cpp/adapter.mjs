#!/usr/bin/env node
// The DeepInfer engine contract (docs/engine-contract.md, version 2) for llama.cpp, through its
// Node.js binding node-llama-cpp. One program, two modes:
//
//   serve    adapter.mjs --model_name DIR [flags]
//            GET /health on DEEPINFER_SERVE_PORT (8000): 503 while the model loads, then 200;
//            POST /v1/completions: {"prompt", "max_tokens", "temperature", "top_p", "top_k",
//            "seed", "repetition_penalty", "json_schema" | "grammar"} → an OpenAI-style answer
//            with the engine's own timings (the serving API, version 1; a regex is refused
//            with 400, naming why).
//   offline  adapter.mjs --offline --model_name DIR [flags] --prompts FILE --output FILE
//            the acceptance run: every prompt of FILE under its JSON schema or GBNF grammar, one
//            output record per line, the DEEPINFER_EVENT markers on stdout, exit 0 when done.
//
// Flags (the serving arguments, spec.runtime.args): --gguf FILE (the GGUF file, relative to the
// model directory; default: the only *.gguf in it), --threads N (CPU threads; default
// llama.cpp's), --context-size N (tokens; default 2048), --gpu auto|false|cuda|vulkan (default
// auto: whatever backend the installed prebuilt binaries offer), --host ADDRESS (default
// 0.0.0.0). A flag this adapter does not know is refused by name.
import { readFileSync, readdirSync, appendFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { isAbsolute, join } from "node:path";
import { getLlama, LlamaCompletion } from "node-llama-cpp";

const CONTRACT_VERSION = "2";

function fail(message) {
  console.error(`deepinfer-llama-cpp: ${message}`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { offline: false, contextSize: 2048, gpu: "auto", host: "0.0.0.0" };
  const valued = {
    "--model_name": "modelDir", "--gguf": "gguf", "--threads": "threads",
    "--context-size": "contextSize", "--gpu": "gpu", "--host": "host",
    "--prompts": "prompts", "--output": "output",
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === "--offline") { opts.offline = true; continue; }
    const key = valued[flag];
    if (key === undefined) fail(`unknown argument ${JSON.stringify(flag)}; known: --offline, ${Object.keys(valued).join(", ")}`);
    if (i + 1 >= argv.length) fail(`${flag} needs a value`);
    opts[key] = argv[++i];
  }
  for (const key of ["threads", "contextSize"]) {
    if (opts[key] === undefined) continue;
    const n = Number(opts[key]);
    if (!Number.isInteger(n) || n < 1) fail(`--${key === "threads" ? "threads" : "context-size"} must be a positive whole number, got ${JSON.stringify(opts[key])}`);
    opts[key] = n;
  }
  if (opts.gpu === "false") opts.gpu = false;
  if (!opts.modelDir) fail("--model_name DIR is required (the operator passes it first among the serving arguments)");
  if (opts.offline && (!opts.prompts || !opts.output)) fail("--offline needs --prompts FILE and --output FILE");
  return opts;
}

function checkEnvironment() {
  const version = process.env.DEEPINFER_CONTRACT_VERSION;
  if (version !== undefined && version !== CONTRACT_VERSION) {
    fail(`DEEPINFER_CONTRACT_VERSION is ${JSON.stringify(version)}; this adapter implements engine contract version ${CONTRACT_VERSION}`);
  }
  const pods = process.env.DEEPINFER_NUM_PODS;
  if (pods !== undefined && pods !== "1") {
    fail(`DEEPINFER_NUM_PODS is ${pods}; llama.cpp runs a group in one pod: set the role's parallel layout to one pod per group`);
  }
}

function ggufPath(opts) {
  if (opts.gguf) return isAbsolute(opts.gguf) ? opts.gguf : join(opts.modelDir, opts.gguf);
  let names;
  try {
    names = readdirSync(opts.modelDir).filter((n) => n.endsWith(".gguf"));
  } catch (e) {
    fail(`cannot list the model directory ${opts.modelDir}: ${e.message}`);
  }
  if (names.length !== 1) {
    fail(`${opts.modelDir} holds ${names.length} .gguf files (${names.join(", ") || "none"}); put the checkpoint's GGUF conversion next to its safetensors, or name it with --gguf FILE`);
  }
  return join(opts.modelDir, names[0]);
}

async function loadEngine(opts) {
  const llama = await getLlama({ gpu: opts.gpu, build: "never" });
  const model = await llama.loadModel({ modelPath: ggufPath(opts) });
  const context = await model.createContext({ contextSize: opts.contextSize, threads: opts.threads });
  const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
  return { llama, model, completion };
}

// The grammar a request is decoded under: a JSON schema (llama.cpp's JSON-schema grammar, as
// node-llama-cpp converts it) or a GBNF grammar. Regexes have no decoder here.
async function grammarFor(engine, soArgs) {
  const keys = Object.keys(soArgs ?? {});
  if (keys.length !== 1) throw new Error(`so_args must hold exactly one of json_schema, grammar; got ${JSON.stringify(keys)}`);
  if (soArgs.json_schema !== undefined) return engine.llama.createGrammarForJsonSchema(soArgs.json_schema);
  if (soArgs.grammar !== undefined) return engine.llama.createGrammar({ grammar: soArgs.grammar });
  if (soArgs.regex !== undefined) throw new Error("regex is not decoded by this engine: write the prompt's structuredOutput as a GBNF grammar");
  throw new Error(`unknown so_args key ${JSON.stringify(keys[0])}`);
}

const FINISH = { eogToken: "stop", stopGenerationTrigger: "stop", customStopTrigger: "stop", maxTokens: "length", abort: "abort" };

// Generates one request and measures it: token counts as the engine evaluated and produced them,
// times from admission (the call) to the first and the last generated token.
async function generate(engine, { prompt, maxTokens, sampling, grammar }) {
  const tokens = engine.model.tokenize(prompt, false, "trimLeadingSpace");
  const bos = engine.model.tokens.shouldPrependBosToken && engine.model.tokens.bos != null ? 1 : 0;
  const s = sampling ?? {};
  const admitted = performance.now();
  let first = null;
  let last = null;
  let produced = 0;
  const { response, metadata } = await engine.completion.generateCompletionWithMeta(tokens, {
    grammar,
    maxTokens,
    temperature: s.temperature ?? 0,
    topP: s.top_p ?? 1,
    topK: s.top_k ?? 0,
    seed: s.seed ?? 0,
    repeatPenalty: (s.repetition_penalty ?? 1) === 1 ? false : { penalty: s.repetition_penalty },
    onToken(chunk) {
      const now = performance.now();
      first ??= now;
      last = now;
      produced += chunk.length;
    },
  });
  return {
    text: response,
    finish_reason: FINISH[metadata.stopReason] ?? metadata.stopReason,
    prompt_tokens: bos + tokens.length,
    completion_tokens: produced,
    active_requests: 1,
    ...(first !== null && { first_token_seconds: (first - admitted) / 1000, completion_seconds: (last - admitted) / 1000 }),
  };
}

function readPrompts(file) {
  return readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "").map((line, i) => {
    try {
      return JSON.parse(line);
    } catch (e) {
      return fail(`${file} line ${i + 1} is not JSON: ${e.message}`);
    }
  });
}

async function offline(opts) {
  const prompts = readPrompts(opts.prompts);
  const engine = await loadEngine(opts);
  console.log("DEEPINFER_EVENT loaded");
  await engine.completion.generateCompletion("warm-up", { maxTokens: 1 });
  console.log("DEEPINFER_EVENT warmup_done");
  writeFileSync(opts.output, "");
  for (const p of prompts) {
    let record;
    try {
      const grammar = await grammarFor(engine, p.so_args);
      record = { id: p.id, ...(await generate(engine, { prompt: p.prompt, maxTokens: p.max_tokens, sampling: p.sampling, grammar })) };
    } catch (e) {
      // Not completed, with the reason where the verdict shows it.
      console.error(`deepinfer-llama-cpp: prompt ${JSON.stringify(p.id)}: ${e.message}`);
      record = { id: p.id, text: "", finish_reason: `error: ${e.message}`.slice(0, 200) };
    }
    appendFileSync(opts.output, JSON.stringify(record) + "\n");
  }
  console.log("DEEPINFER_EVENT generation_done");
  await engine.llama.dispose();
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c) => { body += c; if (body.length > 1 << 20) reject(new Error("request body over 1 MiB")); });
    req.on("end", () => resolve(body));
    req.on("error", reject);
  });
}

function reply(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

async function complete(engine, body) {
  const r = JSON.parse(body);
  if (typeof r.prompt !== "string") throw new Error("prompt must be a string");
  const given = ["json_schema", "regex", "grammar"].filter((k) => r[k] !== undefined);
  // Exactly the constraint asked for, or none: a regex reaches grammarFor, which refuses it.
  const soArgs = given.length ? Object.fromEntries(given.map((k) => [k, r[k]])) : null;
  const grammar = soArgs ? await grammarFor(engine, soArgs) : undefined;
  const sampling = { temperature: r.temperature, top_p: r.top_p, top_k: r.top_k, seed: r.seed, repetition_penalty: r.repetition_penalty };
  const out = await generate(engine, { prompt: r.prompt, maxTokens: r.max_tokens, sampling, grammar });
  return {
    object: "text_completion",
    choices: [{ index: 0, text: out.text, finish_reason: out.finish_reason }],
    usage: { prompt_tokens: out.prompt_tokens, completion_tokens: out.completion_tokens, total_tokens: out.prompt_tokens + out.completion_tokens },
    // Serving API v1 (docs/engine-contract.md): the engine's own times from admission.
    ...(out.first_token_seconds !== undefined && {
      timings: { first_token_seconds: out.first_token_seconds, completion_seconds: out.completion_seconds },
    }),
  };
}

async function serve(opts) {
  const port = Number(process.env.DEEPINFER_SERVE_PORT ?? 8000);
  let engine = null;
  let queue = Promise.resolve();
  const server = createServer((req, res) => {
    const path = req.url.split("?")[0];
    if (req.method === "GET" && path === "/health") return reply(res, engine ? 200 : 503, { status: engine ? "ok" : "loading" });
    if (req.method === "POST" && path === "/v1/completions") {
      if (!engine) return reply(res, 503, { error: "the model is loading" });
      // One sequence: requests are generated one after another.
      queue = queue.then(async () => {
        try {
          reply(res, 200, await complete(engine, await readBody(req)));
        } catch (e) {
          reply(res, 400, { error: e.message });
        }
      });
      return undefined;
    }
    return reply(res, 404, { error: `no route ${req.method} ${path}` });
  });
  server.listen(port, opts.host, () => console.log(`deepinfer-llama-cpp: listening on ${opts.host}:${port}`));
  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  engine = await loadEngine(opts);
  console.log("deepinfer-llama-cpp: model loaded, serving");
}

const opts = parseArgs(process.argv.slice(2));
checkEnvironment();
await (opts.offline ? offline(opts) : serve(opts));
