#!/usr/bin/env node
// The chat oracle: `strata tokenize --chat --json` against the references, on the chat templates
// the @lenml/tokenizer-* packages ship (in tokenizer_config.json) over the conversations of
// scripts/chat_template_cases.json. For each template and case it compares
//   (a) the rendered text with @huggingface/jinja's (scripts/chat_template_oracle.mjs);
//   (b) the ids with HF tokenizers' Rust encode(text) without special tokens, as
//       apply_chat_template(tokenize=True) encodes (the template writes its own BOS);
//   (c) the mask: its runs of 1 are the assistant messages, one each, in order; each decodes
//       (Rust decode, special tokens kept) to the assistant's content, reasoning and tool calls
//       as the template renders them, then the template's end-of-turn token (the first special
//       token the reference writes after an answer; DeepSeek-V3 closes tool calls with a plain
//       added token); and no run holds a system, user or tool message's text the answer does not
//       quote.
// A case the reference refuses (raise_exception) must be refused by strata too. Cases that set
// variables `strata tokenize --chat` does not take (extra, bos_token, eos_token) are left out.
//
//   node scripts/chat_oracle.mjs --work DIR --strata STRATA [--only NAME,NAME] [--verbose]
//
// DIR: where scripts/tokenizer_oracle.sh installed the npm packages. Prints a table (template,
// cases compared, text equal, ids equal, masks right) and each difference. Exit status: 0 all
// equal, 1 a difference, 2 usage or setup.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const die = (message) => {
  console.error(`chat_oracle: ${message}`);
  process.exit(2);
};

function parseArgs(argv) {
  const opts = { work: null, strata: null, only: null, verbose: false };
  for (let i = 0; i < argv.length; ++i) {
    const value = () => argv[++i] ?? die(`${argv[i - 1]} needs a value`);
    if (argv[i] === "--work") opts.work = value();
    else if (argv[i] === "--strata") opts.strata = value();
    else if (argv[i] === "--only") opts.only = value().split(",");
    else if (argv[i] === "--verbose") opts.verbose = true;
    else die(`unknown argument ${argv[i]}`);
  }
  if (!opts.work || !opts.strata) die("--work DIR and --strata STRATA are required");
  opts.work = path.resolve(opts.work);
  opts.strata = path.resolve(opts.strata);
  return opts;
}

// The packages whose tokenizer_config.json carries a chat template.
function templateFolders(work, only) {
  const lenml = path.join(work, "node_modules", "@lenml");
  return fs.readdirSync(lenml)
    .filter((name) => name.startsWith("tokenizer-"))
    .map((name) => ({ name: name.slice("tokenizer-".length), dir: path.join(lenml, name, "models") }))
    .filter(({ name, dir }) => {
      const config = path.join(dir, "tokenizer_config.json");
      if (only && !only.includes(name)) return false;
      return fs.existsSync(config) && JSON.parse(fs.readFileSync(config, "utf8")).chat_template;
    });
}

function referenceTexts(work, dir, cases) {
  const run = spawnSync("node", [path.join(here, "chat_template_oracle.mjs"), "--tokenizer-config",
    path.join(dir, "tokenizer_config.json"), "--modules", path.join(work, "node_modules")],
  { input: JSON.stringify(cases), encoding: "utf8", maxBuffer: 1 << 28 });
  if (run.status !== 0) die(`chat_template_oracle.mjs failed: ${run.stderr}`);
  return new Map(run.stdout.trim().split("\n").map((line) => JSON.parse(line)).map((r) => [r.name, r]));
}

function strataChat(strata, dir, conversation) {
  const args = ["tokenize", "--tokenizer", dir, "--chat", "--json"];
  if (conversation.add_generation_prompt) args.push("--add-generation-prompt");
  const input = { messages: conversation.messages };
  if (conversation.tools) input.tools = conversation.tools;
  const run = spawnSync(strata, args, { input: JSON.stringify(input), encoding: "utf8", maxBuffer: 1 << 28 });
  if (run.status !== 0) return { error: run.stderr.trim() };
  return JSON.parse(run.stdout);
}

function maskRuns(mask) {
  const runs = [];
  for (let i = 0; i < mask.length; ++i) {
    if (mask[i] !== 1) continue;
    const start = i;
    while (i < mask.length && mask[i] === 1) ++i;
    runs.push([start, i]);
  }
  return runs;
}

// What an assistant message's run must hold: its visible content and its reasoning where the
// template renders them, and, for a message that is only tool calls, their names where the
// template renders them (templates differ on calls beside content).
function expectedParts(message, renderedText) {
  const parts = [];
  const visible = typeof message.content === "string" ? message.content.split("</think>").pop().trim() : "";
  if (visible && renderedText.includes(visible)) parts.push(visible);
  const reasoning = (message.reasoning_content ?? "").trim();
  if (reasoning && renderedText.includes(reasoning)) parts.push(reasoning);
  for (const call of visible ? [] : message.tool_calls ?? []) {
    const name = (call.function ?? call).name;
    if (renderedText.includes(name)) parts.push(name);
  }
  return parts;
}

// The template's end-of-turn token, found on the reference's side: the first special token it
// writes after an answer.
async function endOfTurn(work, dir, tok) {
  const probe = { messages: [{ role: "user", content: "Hi there." }, { role: "assistant", content: "Fine answer." }] };
  const rendered = referenceTexts(work, dir, [{ name: "probe", conversation: probe }]).get("probe");
  if (rendered.text === undefined) return null;
  const after = rendered.text.slice(rendered.text.indexOf("Fine answer.") + "Fine answer.".length);
  for (const id of await tok.encode(after)) if ((await tok.decode([id], true)) === "") return id;
  return null;
}

// A run ends with the template's end-of-turn token, or, for a message of tool calls alone, with
// an added token where the template closes those with no end of turn (DeepSeek-V3).
async function checkMask(tok, conversation, got) {
  const assistants = conversation.messages.filter((m) => m.role === "assistant");
  const others = conversation.messages.filter((m) => m.role !== "assistant" && typeof m.content === "string")
    .map((m) => m.content.trim()).filter((text) => text.length >= 8);
  const runs = maskRuns(got.mask);
  if (runs.length !== assistants.length) return `${runs.length} runs of 1 for ${assistants.length} assistant messages`;
  for (let k = 0; k < runs.length; ++k) {
    const ids = got.ids.slice(runs[k][0], runs[k][1]);
    const last = ids[ids.length - 1];
    const callsOnly = !(typeof assistants[k].content === "string" && assistants[k].content.trim()) &&
      (assistants[k].tool_calls ?? []).length > 0;
    if (last !== tok.endOfTurn && !(callsOnly && tok.added.has(last))) {
      return `run ${k} ends with ${JSON.stringify(await tok.decode([last], false))}, not the end of turn`;
    }
    const text = await tok.decode(ids.slice(0, -1), false);
    const parts = expectedParts(assistants[k], got.text);
    for (const part of parts) {
      if (!text.includes(part)) return `run ${k} ${JSON.stringify(text)} lacks ${JSON.stringify(part)}`;
    }
    for (const other of others) {
      const quoted = parts.some((part) => part.includes(other));  // an answer may quote a tool
      if (text.includes(other) && !quoted) return `run ${k} holds a prompt's text ${JSON.stringify(other)}`;
    }
  }
  return null;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const require = createRequire(path.join(opts.work, "package.json"));
  const { Tokenizer } = require("tokenizers");
  const cases = JSON.parse(fs.readFileSync(path.join(here, "chat_template_cases.json"), "utf8"))
    .filter((c) => !c.template && !c.conversation.extra && c.conversation.bos_token === undefined &&
      c.conversation.eos_token === undefined);
  let failed = false;
  const rows = [];
  for (const { name, dir } of templateFolders(opts.work, opts.only)) {
    const reference = referenceTexts(opts.work, dir, cases);
    const json = fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8");
    const rust = Tokenizer.fromString(json);
    const tok = {
      added: new Set(JSON.parse(json).added_tokens.map((token) => token.id)),
      encode: async (text) => Array.from((await rust.encode(text, null, { addSpecialTokens: false })).getIds()),
      decode: async (ids, skip) => rust.decode(ids, skip),
    };
    tok.endOfTurn = await endOfTurn(opts.work, dir, tok);
    const row = { name, compared: 0, refused: 0, text: 0, ids: 0, masks: 0 };
    for (const c of cases) {
      const want = reference.get(c.name);
      const got = strataChat(opts.strata, dir, c.conversation);
      ++row.compared;
      const differ = (what) => {
        failed = true;
        console.log(`  ${name} / ${c.name}: ${what}`);
      };
      if (want.error !== undefined || got.error !== undefined) {
        if (want.error !== undefined && got.error !== undefined && got.error.includes(want.error)) {
          ++row.refused; ++row.text; ++row.ids; ++row.masks;
        } else differ(`reference ${want.error ?? "renders"}; strata ${got.error ?? "renders"}`);
        continue;
      }
      if (got.text === want.text) ++row.text;
      else differ(`text differs: strata ${JSON.stringify(got.text)} reference ${JSON.stringify(want.text)}`);
      const ids = await tok.encode(want.text);
      if (JSON.stringify(ids) === JSON.stringify(got.ids)) ++row.ids;
      else differ("ids differ from encode(text) without special tokens");
      const wrong = await checkMask(tok, c.conversation, got);
      if (wrong === null) ++row.masks;
      else differ(`mask: ${wrong}`);
      if (opts.verbose) console.log(`  ${name} / ${c.name}: checked`);
    }
    rows.push(row);
  }
  console.log("| template | cases compared | refused by both | text equal | ids equal | masks right |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows) console.log(`| ${r.name} | ${r.compared} | ${r.refused} | ${r.text} | ${r.ids} | ${r.masks} |`);
  process.exit(failed ? 1 : 0);
}

main().catch((error) => die(error.stack ?? String(error)));
