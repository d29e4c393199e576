// The workbench page: runs /api/compare for the query, draws one column per mode with rank
// moves, stores judgments (/api/judgments) and tunes (/api/tune). No dependencies, no build.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const state = { query: "", data: null, judgments: {}, timer: null, running: 0, session: null, show: "", options: [] };
// the page's own controls; every other search option /api/compare declares passes through from the page's address
const FORM_PARAMS = ["q", "k", "filter", "fusion", "alpha"];
const SHOWN_CHARS = 300;  // a shown field's value on a card (three lines); the card's toggle holds every field whole
const METRICS = ["MRR@20", "H@1", "H@10", "nDCG@10", "MAP"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  const key = sessionStorage.getItem("workbench-key");
  if (key) headers["X-API-Key"] = key;
  // every write carries this run's token, which only this page can read (GET /api/session)
  if (options.method && options.method !== "GET") headers[state.session.header] = state.session.token;
  const response = await fetch(path, { ...options, headers });
  let body;
  try { body = await response.json(); } catch { body = { error: `HTTP ${response.status}` }; }
  if (response.status === 401) {
    const given = window.prompt("This workbench needs an API key:");
    if (given) { sessionStorage.setItem("workbench-key", given); return api(path, options); }
  }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function setStatus(id, text, isError = false) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("error", isError);
}

function params() {
  const out = new URLSearchParams();
  out.set("q", $("#q").value);
  out.set("k", $("#k").value);
  for (const item of $("#filters").value.split(/\s+/).filter(Boolean)) out.append("filter", item);
  if ($("#fusion").value) out.set("fusion", $("#fusion").value);
  if ($("#alpha-on").checked) out.set("alpha", $("#alpha").value);
  const given = new URLSearchParams(location.search);
  for (const name of state.options) if (given.get(name)) out.set(name, given.get(name));
  return out;
}

async function loadOptions() {  // the search options the API declares (/api/openapi.json), by parameter name
  const spec = await api("/api/openapi.json");
  state.options = spec.paths["/api/compare"].get.parameters.map((p) => p.name).filter((n) => !FORM_PARAMS.includes(n));
}

function requestText(request) {  // the settings the search used, one per line (the status line's tooltip)
  return Object.entries(request).filter(([, v]) => v !== null).map(([k, v]) => `${k}: ${fieldText(v)}`).join("\n");
}

function pageParams(p) {  // the page's own link: the search and the field shown
  const out = new URLSearchParams(p);
  if (state.show) out.set("show", state.show);
  return out;
}

function fieldText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

async function loadSession() {
  state.session = await api("/api/session");
  $("#writes").textContent = state.session.index_writes
    ? "Index writes on: tune stores the winning fusion as the index default."
    : "Index writes off: tune reports its result and stores nothing (start serve with --allow-index-writes to store).";
}

async function loadHealth() {
  try {
    const h = await api("/api/health");
    const u = h.fusion_in_use;  // tuned on this index, the model's (untuned), or the package defaults
    const f = u.from === "tune" ? `tuned fusion ${u.fusion} α=${u.alpha}`
      : u.from === "model" ? `fusion ${u.fusion} α=${u.alpha} (the model's, untuned)` : `untuned (${u.fusion} α=${u.alpha})`;
    if (!$("#alpha-on").checked) $("#alpha").value = h.defaults.alpha;  // the package default, from the server
    const second = h.reranker ? ` · reranker ${h.reranker.model} (top ${h.reranker.depth})` : "";  // which cross-encoder re-reads the hits
    $("#health").textContent = `${h.index} · ${h.backend} · ${h.documents.toLocaleString()} documents · model ${h.model} · ${f}${second}`;
    state.minTune = h.min_tune_queries;
    const fusion = $("#fusion");  // the server's fusion methods, after "index default"
    fusion.replaceChildren(fusion.options[0], ...h.fusions.map((name) => new Option(name, name)));
    showCounts(h.judgments, h.judged_queries);
    if (h.judgment_lines_skipped) {
      $("#judge-count").textContent += ` · ${h.judgment_lines_skipped} unreadable line(s) of the judgment files skipped (the server log names them)`;
    }
  } catch (error) {
    setStatus("#health", `health check failed: ${error.message}`, true);
  }
}

function showCounts(judgments, judgedQueries) {
  const need = state.minTune || 0;
  $("#judge-count").textContent = `${judgments} judgments on ${judgedQueries} queries with a relevant hit` +
    (judgedQueries < need ? ` (tune needs ${need})` : "");
}

async function runQuery() {
  const query = $("#q").value.trim();
  if (!query) { setStatus("#status", "type a query first", true); $("#q").focus(); return; }
  const p = params();
  history.replaceState(null, "", `/?${pageParams(p)}`);
  const ticket = ++state.running;
  setStatus("#status", "searching…");
  try {
    const started = performance.now();
    const data = await api(`/api/compare?${p}`);
    if (ticket !== state.running) return; // a newer query already answered
    state.query = data.query;
    state.data = data;
    state.judgments = data.judgments || {};
    render();
    const s = data.settings;
    setStatus("#status", `${data.modes.length} lists of ${data.k} · hybrid: ${s.fusion} α=${s.alpha} depth ${s.depth} · ` +
      `${Math.round(performance.now() - started)} ms`);
    $("#status").title = requestText(data.request);
  } catch (error) {
    if (ticket === state.running) setStatus("#status", error.message, true);
  }
}

function move(rank, other) {
  if (other === null || other === undefined) return { cls: "new", text: "– new" };
  if (other > rank) return { cls: "up", text: `#${other} ▲${other - rank}` };
  if (other < rank) return { cls: "down", text: `#${other} ▼${rank - other}` };
  return { cls: "same", text: `#${other} =` };
}

function scorePart(label, ranked) {
  return ranked ? `${label} ${ranked.score.toFixed(3)} #${ranked.rank}` : `${label} –`;
}

function hitNode(mode, hit) {
  const judged = state.judgments[hit.id];
  const node = el("li", { class: `hit${judged !== undefined ? ` judged-${judged}` : ""}`, tabindex: "-1",
                          dataset: { id: hit.id, mode } });
  node.append(el("div", { class: "top" }, el("span", { class: "rank" }, `${hit.rank}.`),
                 el("span", { class: "text" }, hit.text)));
  const metadata = hit.metadata || {};
  if (state.show && metadata[state.show] !== undefined && metadata[state.show] !== null) {
    const value = fieldText(metadata[state.show]);
    node.append(el("div", { class: "shown", dataset: { field: state.show }, title: `${state.show} (every field: the toggle below)` },
                   value.length > SHOWN_CHARS ? `${value.slice(0, SHOWN_CHARS - 1)}…` : value));
  }
  const meta = el("div", { class: "meta" }, el("span", { class: "id" }, hit.id),
                  el("span", { title: "the score this list ranks by" }, `score ${hit.score.toFixed(3)}`),
                  el("span", { class: "bm25", title: "BM25 score and rank" }, scorePart("BM25", hit.bm25)),
                  el("span", { class: "knn", title: "kNN score and rank" }, scorePart("kNN", hit.knn)));
  if (hit.cross_encoder !== undefined) {
    meta.append(el("span", { class: "ce", title: "cross-encoder (reranker) score and rank" }, scorePart("CE", hit.cross_encoder)));
  }
  if (hit.signals) {  // business signals after fusion (the index's tuned formula): what each added
    meta.append(el("span", { class: "fused", title: "fused score before the business signals" }, `fused ${hit.fused_score.toFixed(3)}`));
    for (const [name, value] of Object.entries(hit.signals)) {
      meta.append(el("span", { class: "signal", title: "this signal's contribution to the score" }, `${name} ${value >= 0 ? "+" : ""}${value.toFixed(3)}`));
    }
  }
  node.append(meta);
  const fields = Object.entries(metadata);
  if (fields.length) {  // every field whole, behind a toggle at the end of the line: an FAQ's answer would fill the column
    meta.append(el("details", { class: "fields" },
                   el("summary", { title: "every metadata field of this hit" }, `${fields.length} field${fields.length === 1 ? "" : "s"}`),
                   ...fields.map(([field, value]) => el("div", { class: "chip" }, el("b", {}, `${field}: `), fieldText(value)))));
  }
  const moves = el("div", { class: "moves", "aria-label": "rank in the other lists" });
  for (const [other, rank] of Object.entries(hit.ranks)) {
    const m = move(hit.rank, rank);
    moves.append(el("span", { class: `move ${m.cls}`, title: rank ? `#${rank} in ${other}: this list ranks it ${m.text.split(" ")[1]}` : `not in ${other}'s top ${state.data.k}` },
                    `${other} ${m.text}`));
  }
  const row = el("div", { class: "judge-row", role: "group", "aria-label": "judge this hit" });
  for (const [relevance, label] of [[1, "Relevant"], [2, "Highly"], [0, "Not relevant"]]) {
    row.append(el("button", { type: "button", class: "judge", "aria-pressed": String(judged === relevance),
                               dataset: { relevance: String(relevance) } }, label));
  }
  node.append(el("div", { class: "actions" }, moves, row));  // one line: where the others rank it, the judgment
  return node;
}

function showFields() {  // the fields of this answer's hits (and the one chosen) in the Show control
  const fields = new Set(state.show ? [state.show] : []);
  for (const mode of state.data.modes) for (const hit of state.data.lists[mode]) Object.keys(hit.metadata || {}).forEach((f) => fields.add(f));
  const select = $("#show");
  select.replaceChildren(select.options[0], ...[...fields].sort().map((name) => new Option(name, name)));
  select.value = state.show;
}

function render() {
  showFields();
  const columns = $("#columns");
  columns.replaceChildren();
  for (const mode of state.data.modes) {
    const hits = state.data.lists[mode];
    const note = mode === "hybrid" ? `${state.data.settings.fusion} α=${state.data.settings.alpha}` : `${hits.length} hits`;
    const list = el("ol", { "aria-label": `${mode} results` }, ...hits.map((hit) => hitNode(mode, hit)));
    columns.append(el("section", { class: "column", dataset: { mode } }, el("h2", {}, mode, el("small", {}, note)), list));
  }
}

function applyJudgment(id, relevance) {
  state.judgments[id] = relevance;
  for (const node of document.querySelectorAll(".hit")) {
    if (node.dataset.id !== id) continue;
    node.className = node.className.replace(/\s*judged-\d/g, "") + ` judged-${relevance}`;
    for (const button of node.querySelectorAll("button.judge")) {
      button.setAttribute("aria-pressed", String(Number(button.dataset.relevance) === relevance));
    }
  }
}

async function judge(hitNode, relevance) {
  const id = hitNode.dataset.id;
  try {
    const stored = await api("/api/judgments", { method: "POST", headers: { "Content-Type": "application/json" },
                                                  body: JSON.stringify({ query: state.query, id, relevance }) });
    applyJudgment(id, relevance);
    showCounts(stored.judgments, stored.judged_queries);
    setStatus("#status", `judged ${id}: ${relevance}`);
  } catch (error) {
    setStatus("#status", `judgment not stored: ${error.message}`, true);
  }
}

function cell(value) { return el("td", {}, typeof value === "number" ? value.toFixed(4) : value); }

async function tune() {
  const button = $("#tune");
  button.disabled = true;
  setStatus("#tune-status", "tuning… (every judged query is searched once per mode)");
  try {
    const r = await api("/api/tune", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    const table = $("#tune-result");
    $("thead", table).replaceChildren(el("tr", {}, el("th", {}, "run"), el("th", {}, "settings"),
                                         ...METRICS.map((m) => el("th", {}, m))));
    const rows = [["bm25", r.before.bm25, "before"], ["knn", r.before.knn, "before"],
                  ["hybrid before", r.before.hybrid, "before"], ["hybrid after", r.after.hybrid, "after"]];
    $("tbody", table).replaceChildren(...rows.map(([name, run, cls]) => el("tr", { class: cls, dataset: { run: name } },
      el("td", {}, name), el("td", {}, run.fusion ? `${run.fusion} α=${run.alpha}` : "–"),
      ...METRICS.map((m) => cell(run.metrics[m])))));
    table.hidden = false;
    const c = r.chosen;
    setStatus("#tune-status", `tuned on ${r.queries} queries (${r.metric}); ` +
      (r.stored ? `stored as the index default: ${c.fusion} α=${c.alpha} depth ${c.depth}`
                : `kept: ${c.fusion} α=${c.alpha} depth ${c.depth}, not stored` + (r.index_writes ? "" : " (index writes are off)")) +
      (r.decision && r.decision.sentence ? `. ${r.decision.sentence}` : "") +
      (r.gain ? `. ${r.gain.sentence}` : ""));
    loadHealth();
    if (state.query) runQuery();
  } catch (error) {
    setStatus("#tune-status", error.message, true);
  } finally {
    button.disabled = false;
  }
}

function requery() { // fusion and alpha re-query live, debounced while the slider moves
  clearTimeout(state.timer);
  state.timer = setTimeout(() => { if ($("#q").value.trim()) runQuery(); }, 150);
}

function showAlpha() {
  $("#alpha").disabled = !$("#alpha-on").checked;
  $("#alpha-value").textContent = $("#alpha-on").checked ? Number($("#alpha").value).toFixed(2) : "default";
}

function focusHit(step, across = false) {
  const current = document.activeElement.closest ? document.activeElement.closest(".hit") : null;
  const columns = [...document.querySelectorAll(".column")];
  if (!columns.length) return;
  let col = current ? columns.indexOf(current.closest(".column")) : 0;
  let hits = [...columns[col].querySelectorAll(".hit")];
  let index = current ? hits.indexOf(current) : -1;
  if (across) {
    col = Math.min(Math.max(col + step, 0), columns.length - 1);
    hits = [...columns[col].querySelectorAll(".hit")];
    index = Math.min(Math.max(index, 0), hits.length - 1);
  } else {
    index = Math.min(Math.max(index + step, 0), hits.length - 1);
  }
  if (hits[index]) hits[index].focus();
}

function onKey(event) {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(event.target.tagName);
  if (typing || event.ctrlKey || event.metaKey || event.altKey) {
    if (event.key === "Escape") event.target.blur();
    return;
  }
  const hit = document.activeElement.closest ? document.activeElement.closest(".hit") : null;
  const actions = {
    "/": () => $("#q").focus(), j: () => focusHit(1), k: () => focusHit(-1), ArrowDown: () => focusHit(1),
    ArrowUp: () => focusHit(-1), h: () => focusHit(-1, true), l: () => focusHit(1, true), t: () => tune(),
  };
  if (hit && ["0", "1", "2"].includes(event.key)) { judge(hit, Number(event.key)); event.preventDefault(); return; }
  if (actions[event.key]) { actions[event.key](); event.preventDefault(); }
}

function start() {
  const url = new URLSearchParams(location.search);
  if (url.get("k")) $("#k").value = url.get("k");
  if (url.get("fusion")) $("#fusion").value = url.get("fusion");
  if (url.get("alpha")) { $("#alpha").value = url.get("alpha"); $("#alpha-on").checked = true; }
  state.show = url.get("show") || "";
  $("#filters").value = url.getAll("filter").join(" ");
  showAlpha();
  $("#search").addEventListener("submit", (event) => { event.preventDefault(); runQuery(); });
  $("#fusion").addEventListener("change", requery);
  $("#k").addEventListener("change", requery);
  $("#show").addEventListener("change", () => {  // a view of the same answer: no new query
    state.show = $("#show").value;
    if (state.data) { render(); history.replaceState(null, "", `/?${pageParams(params())}`); }
  });
  $("#alpha").addEventListener("input", () => { showAlpha(); requery(); });
  $("#alpha-on").addEventListener("change", () => { showAlpha(); requery(); });
  $("#columns").addEventListener("click", (event) => {
    const button = event.target.closest("button.judge");
    if (button) judge(button.closest(".hit"), Number(button.dataset.relevance));
  });
  $("#tune").addEventListener("click", tune);
  document.addEventListener("keydown", onKey);
  loadSession().catch((error) => setStatus("#writes", `session failed: ${error.message}`, true))
    .then(loadHealth).then(() => loadOptions().catch((error) => setStatus("#status", `options failed: ${error.message}`, true)))
    .then(() => {
      if (url.get("q")) { $("#q").value = url.get("q"); runQuery(); }
    });
}

document.addEventListener("DOMContentLoaded", start);
