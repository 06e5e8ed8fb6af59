// Ruff (Python linter) over the project's Python, from Ruff's WebAssembly build on npm: Debian 12
// has no ruff package. Reads ruff.toml at the repository root (Ruff's own format; the keys used are
// line-length, target-version, [lint] select / ignore / per-file-ignores), so `ruff check` reads
// the same configuration where a native ruff is installed.
//
//   node scripts/ruff.mjs [--fix] [PATH...]     (default: the `include` folders of ruff.toml)
//
// Prints one line per finding (path:row:col: CODE message) and exits 1 if there is any. --fix
// applies Ruff's safe fixes (import sorting and the like) in place, then reports what is left.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(path.join(root, "package.json"));
let ruff, toml;
try {
  ruff = require("@astral-sh/ruff-wasm-nodejs");
  toml = require("smol-toml");
} catch (e) {
  console.error("ruff: the npm packages are missing; run `bash scripts/setup.sh` (it installs them)");
  process.exit(2);
}

const config = toml.parse(fs.readFileSync(path.join(root, "ruff.toml"), "utf8"));
const args = process.argv.slice(2);
const fix = args.includes("--fix");
let targets = args.filter((a) => a !== "--fix");
if (targets.length === 0) targets = config.include ?? ["."];

// Ruff's settings minus what this runner handles itself (file selection and per-file ignores).
const lint = { ...(config.lint ?? {}) };
const perFile = lint["per-file-ignores"] ?? {};
delete lint["per-file-ignores"];
const settings = { ...config, lint };
delete settings.include;
delete settings.exclude;
const workspace = new ruff.Workspace(settings, ruff.PositionEncoding.Utf16);

function globToRegExp(glob) {
  let re = "";
  for (let i = 0; i < glob.length; ++i) {
    const c = glob[i];
    if (c === "*" && glob[i + 1] === "*") { re += ".*"; ++i; if (glob[i + 1] === "/") ++i; }
    else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}
const ignoresFor = (rel) =>
  Object.entries(perFile).filter(([g]) => globToRegExp(g).test(rel)).flatMap(([, codes]) => codes);
const excluded = (config.exclude ?? []).map(globToRegExp);

function pythonFiles(target) {
  const abs = path.resolve(root, target);
  if (!fs.existsSync(abs)) return [];
  if (fs.statSync(abs).isFile()) return [abs];
  return fs.readdirSync(abs, { withFileTypes: true }).flatMap((e) => {
    if (e.name.startsWith(".") || e.name === "__pycache__" || e.name === "node_modules") return [];
    const p = path.join(abs, e.name);
    if (e.isDirectory()) return pythonFiles(p);
    return e.name.endsWith(".py") ? [p] : [];
  });
}

// Offsets of each line's start, for turning (row, column) into string positions.
function lineStarts(text) {
  const starts = [0];
  for (let i = 0; i < text.length; ++i) if (text[i] === "\n") starts.push(i + 1);
  return starts;
}

function applyFixes(text, diagnostics) {
  const starts = lineStarts(text);
  const at = (loc) => starts[loc.row - 1] + loc.column - 1;
  const edits = diagnostics.filter((d) => d.fix).flatMap((d) => d.fix.edits)
    .map((e) => ({ from: at(e.location), to: at(e.end_location), content: e.content ?? "" }))
    .sort((a, b) => b.from - a.from);
  let out = text, limit = Infinity, applied = 0;
  for (const e of edits) {
    if (e.to > limit) continue;  // overlaps an edit already applied: the next pass gets it
    out = out.slice(0, e.from) + e.content + out.slice(e.to);
    limit = e.from;
    ++applied;
  }
  return { text: out, applied };
}

let findings = 0;
const files = [...new Set(targets.flatMap(pythonFiles))].sort();
for (const file of files) {
  const rel = path.relative(root, file);
  if (excluded.some((re) => re.test(rel))) continue;
  const ignored = new Set(ignoresFor(rel));
  const check = (text) => workspace.check(text).filter((d) => !ignored.has(d.code));
  let text = fs.readFileSync(file, "utf8");
  let diagnostics = check(text);
  if (fix) {
    for (let pass = 0; pass < 10 && diagnostics.some((d) => d.fix); ++pass) {
      const r = applyFixes(text, diagnostics);
      if (r.applied === 0) break;
      text = r.text;
      diagnostics = check(text);
    }
    fs.writeFileSync(file, text);
  }
  for (const d of diagnostics) {
    console.log(`${rel}:${d.start_location.row}:${d.start_location.column}: ${d.code ?? "error"} ${d.message}`);
    ++findings;
  }
}
console.log(`ruff: ${files.length} files, ${findings} finding${findings === 1 ? "" : "s"}`);
process.exit(findings ? 1 : 0);
