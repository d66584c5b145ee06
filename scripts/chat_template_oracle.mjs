#!/usr/bin/env node
// The chat template oracle: renders conversations with @huggingface/jinja (the Jinja that
// transformers.js renders chat templates with), for a script to compare with strata's rendering
// (models/chat/, docs/chat.md).
//
//   node scripts/chat_template_oracle.mjs [--cases FILE] [--template FILE.jinja]
//       [--tokenizer-config tokenizer_config.json] [--sort-keys] [--modules DIR]
//
// Cases: a JSON list, from --cases or stdin, of {"name", "conversation", "template"?} where a
// conversation is what strata's ChatInputs holds: {"messages": [...], "tools"?: [...],
// "add_generation_prompt"?: bool, "bos_token"?: str, "eos_token"?: str, "extra"?: {...}}
// (scripts/chat_template_cases.json). A case's template is its own "template", else the file
// --template names, else the chat_template of --tokenizer-config (of a list of named templates,
// "tool_use" when the conversation has tools and there is one, else "default", as
// transformers.js chooses); bos_token and eos_token come from that config when the conversation
// does not set them.
//
// Each case is rendered with the variables transformers.js's apply_chat_template passes:
// messages, add_generation_prompt, tools (null when absent), documents (null), the special
// tokens present, then the extra variables. Output: one JSON line per case, {"name", "text"} or,
// where rendering throws, {"name", "error"} (raise_exception's message).
//
// --sort-keys orders every object's keys as nlohmann::json (a std::map) holds them: byte order.
// strata's ChatInputs takes nlohmann::json, so a dict printed by tojson (a tool's schema) lists
// its keys in that order; with --sort-keys the oracle sees the same input.
// --modules: the node_modules folder holding @huggingface/jinja (default
// build/tokenizer-oracle/node_modules; install it there with scripts/npm_pinned.sh's
// npm_install_pinned DIR @huggingface/jinja@0.5.11).
// Exit status: 0 rendered (a case that throws is output, not a failure), 2 usage or setup.
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

function usage(message) {
  if (message) console.error(`chat_template_oracle: ${message}`);
  const text = readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n");
  console.error(text.slice(1, 30).map((line) => line.replace(/^\/\/ ?/, "")).join("\n"));
  process.exit(2);
}

function parseArgs(argv) {
  const options = {
    cases: null,
    template: null,
    tokenizerConfig: null,
    sortKeys: false,
    modules: path.join(here, "..", "build", "tokenizer-oracle", "node_modules"),
  };
  for (let i = 0; i < argv.length; ++i) {
    const arg = argv[i];
    const value = () => argv[++i] ?? usage(`${arg} needs a value`);
    if (arg === "--cases") options.cases = value();
    else if (arg === "--template") options.template = value();
    else if (arg === "--tokenizer-config") options.tokenizerConfig = value();
    else if (arg === "--sort-keys") options.sortKeys = true;
    else if (arg === "--modules") options.modules = value();
    else usage(`unknown argument ${arg}`);
  }
  return options;
}

// What getToken reads: a string, or an AddedToken's content.
function tokenText(token) {
  if (typeof token === "string") return token;
  if (token && typeof token === "object" && typeof token.content === "string") return token.content;
  return undefined;
}

function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== "object") return value;
  // Byte order of the UTF-8 keys, as std::map<std::string> compares them.
  const keys = Object.keys(value).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const sorted = {};
  for (const key of keys) sorted[key] = sortKeys(value[key]);
  return sorted;
}

function chooseTemplate(caseTemplate, fileTemplate, config, conversation) {
  if (typeof caseTemplate === "string") return caseTemplate;
  if (fileTemplate !== null) return fileTemplate;
  const chat = config?.chat_template;
  if (typeof chat === "string") return chat;
  if (Array.isArray(chat)) {
    const named = Object.fromEntries(chat.map((entry) => [entry.name, entry.template]));
    if (conversation.tools && "tool_use" in named) return named.tool_use;
    if ("default" in named) return named.default;
  }
  throw new Error("no chat template: give the case a template, --template or --tokenizer-config");
}

function variablesOf(conversation, config, sorted) {
  const convert = sorted ? sortKeys : (x) => x;
  const variables = {
    messages: convert(conversation.messages ?? []),
    add_generation_prompt: conversation.add_generation_prompt ?? false,
    tools: conversation.tools == null ? null : convert(conversation.tools),
    documents: null,
  };
  for (const name of ["bos_token", "eos_token"]) {
    const token = conversation[name] ?? tokenText(config?.[name]);
    if (token) variables[name] = token;
  }
  for (const [key, value] of Object.entries(conversation.extra ?? {})) variables[key] = convert(value);
  return variables;
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  let Template;
  try {
    const entry = path.join(options.modules, "@huggingface", "jinja", "dist", "index.js");
    ({ Template } = await import(pathToFileURL(entry).href));
  } catch (error) {
    usage(`cannot load @huggingface/jinja from ${options.modules}: ${error.message}`);
  }
  const input = readFileSync(options.cases ?? 0, "utf8");
  const cases = JSON.parse(input);
  if (!Array.isArray(cases)) usage("the cases must be a JSON list");
  const fileTemplate = options.template ? readFileSync(options.template, "utf8") : null;
  const config = options.tokenizerConfig ? JSON.parse(readFileSync(options.tokenizerConfig, "utf8")) : null;
  const compiled = new Map();
  for (const { name, template, conversation } of cases) {
    let line;
    try {
      const source = chooseTemplate(template, fileTemplate, config, conversation);
      if (!compiled.has(source)) compiled.set(source, new Template(source));
      const text = compiled.get(source).render(variablesOf(conversation, config, options.sortKeys));
      line = { name, text };
    } catch (error) {
      line = { name, error: String(error?.message ?? error) };
    }
    process.stdout.write(JSON.stringify(line) + "\n");
  }
}

main();
