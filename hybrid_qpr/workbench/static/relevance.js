// The relevance panels: paired tests of the modes on the judged queries (/api/significance)
// and the overlap of two configurations on pasted queries (/api/overlap). Uses app.js's
// functions ($, el, api, setStatus, cell).
"use strict";

function fixed(value, digits = 4) { return typeof value === "number" ? value.toFixed(digits) : value; }

async function testSignificance() {
  const button = $("#significance");
  button.disabled = true;
  setStatus("#significance-status", "testing… (every judged query is searched once per mode)");
  try {
    const params = new URLSearchParams({ baseline: $("#sig-baseline").value, metric: $("#sig-metric").value });
    const r = await api(`/api/significance?${params}`);
    const table = $("#significance-result");
    $("thead", table).replaceChildren(el("tr", {}, ...["run", r.metric, "baseline", "delta", "p randomization (Holm)",
      "p t-test (Holm)", "wins", "losses", "ties", ""].map((h) => el("th", {}, h))));
    $("tbody", table).replaceChildren(...r.comparisons.map((c) => el("tr", { dataset: { run: c.run },
      class: c.significant ? "significant" : "noise" },
      el("td", {}, c.run), cell(c.mean), cell(c.baseline_mean), el("td", {}, (c.delta >= 0 ? "+" : "") + fixed(c.delta)),
      cell(c.randomization_p_holm), cell(c.t_p_holm), el("td", {}, c.wins), el("td", {}, c.losses), el("td", {}, c.ties),
      el("td", { class: "verdict" }, c.significant ? "significant" : "within noise"))));
    table.hidden = false;
    $("#significance-queries").replaceChildren(...r.comparisons.map((c) => el("details", { dataset: { run: c.run } },
      el("summary", {}, `${c.run} vs ${c.baseline}: ${c.verdict}`),
      el("ol", { class: "winloss" }, ...c.per_query.map((q) => el("li", { class: q.delta < 0 ? "loss" : "win" },
        el("span", { class: "delta" }, (q.delta >= 0 ? "+" : "") + fixed(q.delta, 3)), " ", q.text))))));
    setStatus("#significance-status", `${r.queries} judged queries, baseline ${r.baseline}; worst losses listed first`);
  } catch (error) {
    setStatus("#significance-status", error.message, true);
  } finally {
    button.disabled = false;
  }
}

async function compareOverlap() {
  const button = $("#overlap");
  button.disabled = true;
  setStatus("#overlap-status", "searching both configurations…");
  try {
    const body = { queries: $("#overlap-queries").value, a: $("#overlap-a").value, b: $("#overlap-b").value,
                   k: Number($("#k").value) };
    const r = await api("/api/overlap", { method: "POST", body: JSON.stringify(body),
                                           headers: { "Content-Type": "application/json" } });
    const table = $("#overlap-result");
    $("thead", table).replaceChildren(el("tr", {}, ...["query", "RBO", `Jaccard@${r.k}`, "only in A", "only in B"]
      .map((h) => el("th", {}, h))));
    $("tbody", table).replaceChildren(...r.changed.map((row) => el("tr", { dataset: { query: row.query } },
      el("td", {}, row.query), cell(row.rbo), cell(row.jaccard),
      el("td", {}, row.only_a.join(" ") || "–"), el("td", {}, row.only_b.join(" ") || "–"))));
    table.hidden = false;
    setStatus("#overlap-status", `A = ${r.a}, B = ${r.b}: ${r.queries} queries, mean RBO ${fixed(r.rbo)}, ` +
      `Jaccard@${r.k} ${fixed(r.jaccard)}, same first hit ${(100 * r.same_first).toFixed(0)}%; most changed first`);
  } catch (error) {
    setStatus("#overlap-status", error.message, true);
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#significance").addEventListener("click", testSignificance);
  $("#overlap").addEventListener("click", compareOverlap);
});
