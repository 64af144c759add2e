// engram's web page: plain JavaScript over the REST API (/v1). Text from the memory is only ever set with
// textContent, never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { memory: null, cursor: null, key: sessionStorage.getItem("engram-key") || "", jobs: new Map(), cy: null };

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  for (const child of children) node.append(child);
  return node;
}

function say(message, isError = false) {
  $("status").textContent = message;
  $("status").className = isError ? "error" : "";
}

async function api(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  if (state.key) headers.Authorization = "Bearer " + state.key;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = (data && data.error) || { type: "http_error", message: response.statusText };
    throw new Error(`${response.status} ${error.type}: ${error.message}`);
  }
  return data;
}

const memPath = (suffix = "") => `/v1/memories/${encodeURIComponent(state.memory)}${suffix}`;

async function run(task) {
  try { await task(); } catch (err) { say(err.message, true); }
}

// memories -----------------------------------------------------------------------------------------------
async function loadMemories(select) {
  const data = await api("GET", "/v1/memories");
  const names = data.memories.map((m) => m.name);
  if (select && !names.includes(select)) names.push(select);
  const box = $("memory");
  box.replaceChildren(...names.map((n) => el("option", { value: n, textContent: n })));
  useMemory(select || state.memory || names[0] || null);
  if (state.memory) box.value = state.memory;
  if (!state.memory) say("No memory yet: type a name under 'new memory' and add a document.");
  await refresh();
}

// Another memory: the results on the page were the previous memory's, so they go.
function useMemory(name) {
  if (name !== state.memory) { clearResults(); say(""); }
  state.memory = name;
}

function clearResults() {
  $("passages").replaceChildren();
  $("answer").hidden = true;
  $("answer").replaceChildren();
  $("facts").tBodies[0].replaceChildren();
  $("seeds").replaceChildren();
  $("fallback").hidden = true;
  $("filter-note").textContent = "";
  if (state.cy) { state.cy.destroy(); state.cy = null; }
  $("graph").replaceChildren();
  delete $("graph").dataset.nodes;
  delete $("graph").dataset.edges;
}

// "Answer with LLM" needs an LLM on the server for this memory; the stats route says whether there is one.
function setAnswering(reason) {
  $("answer-btn").disabled = Boolean(reason);
  $("answer-why").hidden = !reason;
  $("answer-why").textContent = reason || "";
}

async function refresh() {
  if (!state.memory) return;
  await Promise.all([loadStats(), loadDocuments(true)]);
}

async function loadStats() {
  let data;
  try { data = await api("GET", memPath()); } catch (err) {
    if (err.message.startsWith("404")) {
      $("stats").replaceChildren(); $("documents").replaceChildren();
      setAnswering("Nothing to answer from yet: add a document to this memory first.");
      return;
    }
    throw err;
  }
  setAnswering(data.llm_configured ? "" : "No LLM is configured for this memory, so only retrieval works: start " +
    "engram serve with --llm-base-url and --llm-model (or ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL).");
  const s = data.stats;
  const rows = ["documents", "passages", "phrases", "facts", "edges", "pending", "failed", "generation"];
  $("stats").replaceChildren(...rows.flatMap((k) => [el("dt", { textContent: k }), el("dd", { textContent: String(s[k] ?? "–") })]));
}

async function loadDocuments(reset) {
  if (reset) { state.cursor = null; $("documents").replaceChildren(); }
  const params = new URLSearchParams({ limit: "50", prefix: $("doc-prefix").value });
  if (state.cursor) params.set("cursor", state.cursor);
  let data;
  try { data = await api("GET", memPath("/documents?" + params)); } catch (err) {
    if (err.message.startsWith("404")) return;
    throw err;
  }
  for (const doc of data.documents) {
    const del = el("button", { type: "button", className: "link", textContent: "delete" });
    del.setAttribute("aria-label", "delete " + doc.id);
    del.addEventListener("click", () => run(() => removeDocument(doc.id)));
    $("documents").append(el("li", {}, el("span", { textContent: doc.id }), del));
  }
  $("doc-count").textContent = `(${data.total})`;
  state.cursor = data.next_cursor;
  $("more-docs").hidden = !data.next_cursor;
}

async function removeDocument(id) {
  await api("DELETE", memPath("/documents/" + encodeURIComponent(id)));
  await refresh();
  if ($("passages").children.length && $("question").value.trim()) await ask();  // results without it
  say(`Deleted ${id}.`);
}

// adding documents and jobs ----------------------------------------------------------------------------
async function addDocuments(documents) {
  if (!state.memory) throw new Error("choose or name a memory first");
  const data = await api("POST", memPath("/documents"), { documents });
  if (data.job) { trackJob(data.job); say(`Indexing ${documents.length} document(s) as job ${data.job.id.slice(0, 8)}…`); }
  else say(`Indexed ${data.report.documents} document(s), ${data.report.passages} new passage(s).`);
  await loadMemories(state.memory);
}

function trackJob(job) {
  state.jobs.set(job.id, job);
  renderJobs();
  if (job.state === "queued" || job.state === "running") setTimeout(() => run(() => pollJob(job.id)), 500);
}

async function pollJob(id) {
  const job = await api("GET", `/v1/jobs/${id}?wait=2`);
  trackJob(job);
  if (job.state === "done") { say(`Job ${id.slice(0, 8)} done.`); await refresh(); }
  if (job.state === "failed") say(`Job ${id.slice(0, 8)} failed: ${job.error.message}`, true);
}

function renderJobs() {
  const items = [...state.jobs.values()].reverse().map((job) => {
    const stages = Object.entries(job.progress || {});
    const [stage, p] = stages.length ? stages[stages.length - 1] : ["", { done: 0, total: 0 }];
    const bar = el("progress", { max: Math.max(p.total, 1), value: p.done });
    const text = `${job.kind} ${job.id.slice(0, 8)}: ${job.state}${stage ? ` (${stage} ${p.done}/${p.total})` : ""}`;
    return el("li", {}, bar, " ", text);
  });
  $("jobs").replaceChildren(...items);
}

async function readFiles(files) {
  const documents = [];
  for (const file of files) {
    const text = await file.text();
    if (file.name.endsWith(".jsonl")) {
      text.split("\n").filter((l) => l.trim()).forEach((line, i) => {
        const row = JSON.parse(line);
        documents.push({ id: String(row.id ?? `${file.name}:${i}`), text: row.text, title: row.title ?? null });
      });
    } else {
      documents.push({ id: file.name, text, title: file.name.replace(/\.(txt|md)$/, "") });
    }
  }
  return documents;
}

// asking -----------------------------------------------------------------------------------------------
async function ask() {
  const body = { query: $("question").value, top_k: Number($("top-k").value), method: $("method").value };
  say("Retrieving…");
  const memory = state.memory;
  const result = (await api("POST", memPath("/retrieve"), body)).results[0];
  if (memory !== state.memory) return;  // the memory was switched meanwhile: these results are not its
  showPassages(result.passages);
  showTrace(result);
  await showGraph(result);
  say(`${result.passages.length} passage(s) by ${result.method}.`);
}

async function answer() {
  const body = { query: $("question").value, top_k: Number($("top-k").value), method: $("method").value };
  say("Answering…");
  const memory = state.memory;
  const result = (await api("POST", memPath("/answer"), body)).results[0];
  if (memory !== state.memory) return;
  $("answer").hidden = false;
  $("answer").replaceChildren(el("strong", { textContent: "Answer: " }), result.answer);
  showPassages(result.passages);
  say("Answered.");
}

function showPassages(passages) {
  $("passages").replaceChildren(...passages.map((p) => el("li", {},
    el("span", { className: "title", textContent: p.title || p.id }), " ",
    el("span", { className: "meta", textContent: `[${p.id}] score ${p.score.toFixed(4)}` }),
    el("div", { className: "text", textContent: p.text }))));
}

function showTrace(r) {
  $("fallback").hidden = !r.fell_back;
  $("fallback").textContent = r.fell_back ? `Fell back to dense ranking: ${r.fallback_reason}.` : "";
  $("filter-note").textContent = r.filtered ? "(the recognition filter ran)" : "(no filter: all candidates kept)";
  const kept = new Set(r.facts.map((f) => `${f.subject}|${f.relation}|${f.object}`));
  $("facts").tBodies[0].replaceChildren(...r.candidate_facts.map((f) => {
    const isKept = kept.has(`${f.subject}|${f.relation}|${f.object}`);
    return el("tr", { className: isKept ? "kept" : "dropped" },
      el("td", { textContent: isKept ? "✓" : "✗" }), el("td", { textContent: f.subject }),
      el("td", { textContent: f.relation }), el("td", { textContent: f.object }),
      el("td", { textContent: f.score.toFixed(3) }));
  }));
  const top = Math.max(...r.seeds.map((s) => s.weight), 1e-9);
  $("seeds").replaceChildren(...r.seeds.map((s) => el("li", {},
    el("span", { className: "bar", style: `width:${Math.round(80 * s.weight / top)}px` }),
    `${s.phrase} (${s.weight.toFixed(3)})`)));
}

async function showGraph(r) {
  const around = [...r.seeds.map((s) => s.phrase), ...r.passages.map((p) => p.id)];
  if (state.cy) { state.cy.destroy(); state.cy = null; }
  if (!around.length || typeof cytoscape === "undefined") return;
  const params = new URLSearchParams({ hops: "1", limit: String(Math.min(500, around.length + 40)) });  // starts + room
  around.forEach((a) => params.append("around", a));
  const memory = state.memory;
  const graph = await api("GET", memPath("/graph?" + params));
  if (memory !== state.memory) return;
  const seeds = new Set(r.seeds.map((s) => "phrase:" + s.phrase));
  const tops = new Set(r.passages.map((p) => "passage:" + p.id));
  const label = (n) => (n.label.length > 28 ? n.label.slice(0, 27) + "…" : n.label);
  const elements = [
    ...graph.nodes.map((n) => ({ data: { id: n.id, label: label(n), kind: n.kind,
      role: seeds.has(n.id) ? "seed" : tops.has(n.id) ? "top" : n.kind } })),
    ...graph.edges.map((e, i) => ({ data: { id: "e" + i, source: e.source, target: e.target, kind: e.kind, weight: e.weight } })),
  ];
  state.cy = cytoscape({ container: $("graph"), elements, style: graphStyle(), maxZoom: 4, minZoom: 0.2,
    layout: { name: "cose", animate: false, randomize: false, nodeRepulsion: 9000, nodeDimensionsIncludeLabels: true, padding: 24 } });
  const cy = state.cy;
  fitZoom(cy);
  quietOverlappingLabels(cy);
  $("graph").dataset.nodes = String(graph.nodes.length);
  $("graph").dataset.edges = String(graph.edges.length);
}

// A graph of 2-3 nodes is not blown up to fill the box: it stays at reading size.
function fitZoom(cy) {
  if (cy.zoom() > 1.3) { cy.zoom(1.3); cy.center(); }
}

// Labels that would overlap one drawn before them are hidden (seeds first, then retrieved passages, then the
// rest); hovering or tapping a node shows its label.
function quietOverlappingLabels(cy) {
  const rank = (n) => ({ seed: 0, top: 1 }[n.data("role")] ?? 2);
  const order = cy.nodes().toArray().sort((a, b) => rank(a) - rank(b));
  const placed = [];
  const overlaps = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
  for (const node of order) {
    const box = node.boundingBox({ includeNodes: false, includeEdges: false, includeLabels: true });
    if (placed.some((other) => overlaps(box, other))) node.addClass("quiet");
    else placed.push(box);
  }
  cy.on("mouseover tap", "node.quiet", (e) => e.target.addClass("shown"));
  cy.on("mouseout", "node.quiet", (e) => e.target.removeClass("shown"));
}

function graphStyle() {
  return [
    { selector: "node", style: { label: "data(label)", "font-size": 10, "text-valign": "bottom", "text-margin-y": 3, "text-wrap": "wrap", "text-max-width": 110, width: 16, height: 16, "background-color": "#9bbce8" } },
    { selector: "node[kind = 'passage']", style: { shape: "round-rectangle", "background-color": "#d9d9d9", width: 22, height: 14 } },
    { selector: "node[role = 'seed']", style: { "background-color": "#f0a500", width: 24, height: 24, "font-weight": "bold" } },
    { selector: "node[role = 'top']", style: { "background-color": "#6fbf73", width: 28, height: 18, "font-weight": "bold" } },
    { selector: "node.quiet", style: { "text-opacity": 0 } },
    { selector: "node.quiet.shown", style: { "text-opacity": 1, "z-index": 10 } },
    { selector: "edge", style: { width: 1, "line-color": "#c9ced6", "curve-style": "bezier" } },
    { selector: "edge[kind = 'relation']", style: { width: 2.5, "line-color": "#5a6b80" } },
    { selector: "edge[kind = 'synonym']", style: { "line-style": "dashed", "line-color": "#b07cc6", width: 2 } },
  ];
}

// wiring -----------------------------------------------------------------------------------------------
function on(id, event, handler) {
  $(id).addEventListener(event, (e) => { e.preventDefault(); run(handler); });
}

document.addEventListener("DOMContentLoaded", () => {
  $("api-key").value = state.key;
  on("key-form", "submit", async () => { state.key = $("api-key").value.trim(); sessionStorage.setItem("engram-key", state.key); await loadMemories(); say("Key set."); });
  on("memory-form", "submit", async () => { const name = $("new-memory").value.trim(); await loadMemories(name || $("memory").value); });
  on("memory", "change", async () => { useMemory($("memory").value); await refresh(); });
  on("add-form", "submit", async () => {
    await addDocuments([{ id: $("doc-id").value.trim(), text: $("doc-text").value, title: $("doc-title").value.trim() || null }]);
    $("add-form").reset();
  });
  on("upload-form", "submit", async () => { await addDocuments(await readFiles($("files").files)); $("upload-form").reset(); });
  on("docs-form", "submit", () => loadDocuments(true));
  on("more-docs", "click", () => loadDocuments(false));
  on("ask-form", "submit", ask);
  on("answer-btn", "click", answer);
  // the drawing follows its box when the window is resized (a phone turned, a narrowed window)
  new ResizeObserver(() => { if (state.cy) { state.cy.resize(); state.cy.fit(undefined, 24); fitZoom(state.cy); } }).observe($("graph"));
  run(() => loadMemories());
});
