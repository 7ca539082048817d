// fusion-advisor report: the side panel (cluster details, rejections, Inductor) and page wiring.
// Reads the JSON in #fusion-data written by page.py; needs graph.js loaded first.
"use strict";

const DATA = JSON.parse(document.getElementById("fusion-data").textContent);
const PAGE = DATA.page;
const NODE_INDEX = new Map(PAGE.graph.nodes.map((n, i) => [n[0], i]));
// Why a section is empty, in the words of the tool that wrote the page (page_data's hints).
const HINTS = PAGE.hints || {};

function because(key) { return HINTS[key] ? ` (${esc(HINTS[key])})` : ""; }

function fmtBytes(n) {
  for (const [unit, scale] of [["GB", 2 ** 30], ["MB", 2 ** 20], ["KB", 2 ** 10]]) {
    if (Math.abs(n) >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
  }
  return `${n} B`;
}

function median(xs) {
  if (!xs || !xs.length) return null;
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function section(title, body) { return `<h3>${esc(title)}</h3>${body}`; }

function bars(rows, unit) {
  const top = Math.max(...rows.map(r => r[1] || 0), 1e-12);
  return `<table class="bars">${rows.map(([name, v, cls]) => `<tr><td>${esc(name)}</td><td class="bar-cell"><div class="bar ${cls || ""}" style="width:${v === null ? 0 : Math.max(1, 100 * v / top)}%"></div></td><td class="num">${v === null ? "—" : esc(unit(v))}</td></tr>`).join("")}</table>`;
}

function pre(text, cls, id) { return `<pre class="${cls || ""}"${id ? ` id="${id}"` : ""}>${esc(text)}</pre>`; }

function diffBlock(text) {
  const lines = text.split("\n").map(l => {
    const cls = l.startsWith("+++") || l.startsWith("---") ? "dh" : l.startsWith("@@") ? "dhunk"
      : l.startsWith("+") ? "dadd" : l.startsWith("-") ? "ddel" : "";
    return `<span class="${cls}">${esc(l)}</span>`;
  });
  return `<pre class="diff">${lines.join("\n")}</pre>`;
}

function numericsBlock(c) {
  if (!c.numerics) return `<p class="muted">not run here${because("numerics")}</p>`;
  const n = c.numerics, err = n.max_abs_err === null ? "" : `, max abs err ${n.max_abs_err.toExponential(2)}`;
  return `<p class="${n.status.startsWith("FAILED") ? "bad" : "good"}">${esc(n.status)}${err}</p><ul>${n.gates.map(g => `<li>${g.passed ? "✓" : "✗"} ${esc(g.gate)}${g.detail ? ": " + esc(g.detail) : ""}</li>`).join("")}</ul>`;
}

function timingBlock(c) {
  const t = c.timing;
  if (!t) return `<p class="muted">not measured${PAGE.mode === "interpreter" || !PAGE.mode ? " (needs a CUDA GPU)" : PAGE.timed === false ? because("untimed") || " (timings not run)" : ""}</p>`;
  const us = v => `${v.toFixed(1)} µs`, gb = v => `${v.toFixed(0)} GB/s`;
  let out = bars([["fused kernel", median(t.kernel_us), "k"], ["eager ops", median(t.eager_us), "e"],
    ["Inductor", median(t.inductor_us), "i"]].filter(r => r[1] !== null), us);
  const ceiling = t.copy_gbps ? ["copy ceiling", t.copy_gbps] : t.peak_gbps ? ["peak (device)", t.peak_gbps] : null;
  if (t.gbps) out += bars([["kernel", t.gbps, "k"], ...(ceiling ? [[...ceiling, "c"]] : [])], gb);
  if (t.regime) out += `<p class="muted">regime: ${esc(t.regime)}</p>`;
  return out;
}

function inductorBlock(c) {
  if (!PAGE.inductor_ran) return `<p class="muted">not compared${because("inductor")}</p>`;
  const v = c.inductor;
  let out = v ? `<p>${esc(v.verdict)}${v.detail ? ": " + esc(v.detail) : ""}</p>` : "<p>no verdict</p>";
  if (c.inductor_kernels.length) out += `<ul>${c.inductor_kernels.map(k => `<li><code>${esc(k.name)}</code> (${esc(k.ops.join(" → "))})</li>`).join("")}</ul>`;
  return out;
}

function clusterPanel(c) {
  const info = PAGE.graph.info, ops = c.nodes.map((name, k) => {
    const i = NODE_INDEX.get(name), row = i === undefined ? ["", "", ""] : info[i];
    return `<tr><td>${esc(name)}</td><td>${esc(c.ops[k])}</td><td>${row[1] ? "L" + esc(row[1]) : ""}</td><td>${esc(row[2])}</td></tr>`;
  }).join("");
  const src = c.source.length ? `<pre class="source" id="source-lines">${c.source.map(([i, l]) => `<span class="ln">${i}</span> ${esc(l)}`).join("\n")}</pre>` : `<p class="muted">no source lines</p>`;
  const saved = c.unfused_bytes ? (100 * (c.unfused_bytes - c.fused_bytes) / c.unfused_bytes).toFixed(0) : "0";
  return `<h2>Cluster ${c.index} <small>${esc(c.category)}</small></h2><p class="chain">${esc(c.ops.join(" → "))}</p>`
    + section("Ops", `<table class="ops"><tr><th>node</th><th>op</th><th>line</th><th>shape</th></tr>${ops}</table>`
      + `<p class="muted">reads ${esc(c.reads.join(", "))}; writes ${esc(c.writes.join(", "))}${c.recomputed.length ? "; recomputes " + esc(c.recomputed.join(", ")) : ""}</p>`)
    + section(`Source ${c.where}`, src + (c.map ? `<p class="muted">map: ${esc(c.map)}${c.map_reason ? " — " + esc(c.map_reason) : ""}</p>` : ""))
    + (c.diff ? section("Diff", diffBlock(c.diff)) : "")
    + section(`Traffic (saves ${saved}%)`, bars([["unfused", c.unfused_bytes, "e"], ["fused", c.fused_bytes, "k"]], fmtBytes))
    + section("Numerics", numericsBlock(c))
    + section("Timings", timingBlock(c))
    + section("Inductor", inductorBlock(c))
    + section("Generated Triton kernel", c.kernel ? pre(c.kernel, "kernel", "kernel-source") : `<p class="bad">no kernel: ${esc(c.kernel_error)}</p>`);
}

function nodePanel(i) {
  const n = PAGE.graph.nodes[i], info = PAGE.graph.info[i];
  const rej = n[7] >= 0 ? PAGE.rejections[n[7]] : null;
  return `<h2>${esc(n[0])} <small>${esc(n[1])}</small></h2><table class="ops">`
    + `<tr><td>written as</td><td>${esc(info[0])}</td></tr><tr><td>line</td><td>${esc(info[1])}</td></tr>`
    + `<tr><td>shape</td><td>${esc(info[2])}</td></tr><tr><td>module</td><td>${esc(info[3])}</td></tr></table>`
    + (n[2] === "o" ? `<p class="muted">opaque op: a barrier no fused kernel crosses</p>` : "")
    + (rej ? rejectionItem(rej, n[7]) : "");
}

function rejectionItem(r, k) {
  return `<div class="rejection" data-pick-rejection="${k}"><b class="check">${esc(r.check)}</b> ${esc(r.ops.length > 6 ? r.ops.slice(0, 3).join(" → ") + ` → … (${r.ops.length} ops)` : r.ops.join(" → "))} <span class="muted">${esc(r.where)}</span><p>${esc(r.reason + r.retried)}</p></div>`;
}

function rejectionsPanel() {
  if (!PAGE.rejections.length) return "<p>No candidate was rejected.</p>";
  return PAGE.rejections.map(rejectionItem).join("");
}

function inductorPanel() {
  if (!PAGE.inductor_ran) return `<p class="muted">Inductor was not compared${because("inductor")}.</p>`;
  if (!PAGE.inductor_missed.length) return "<p>Every Inductor kernel that fuses pointwise or reduction ops matches one of our clusters, in whole or in part.</p>";
  return `<p>Inductor kernels we did not propose:</p>` + PAGE.inductor_missed.map(k =>
    `<div class="rejection"><code>${esc(k.name)}</code> ${esc(k.ops.join(" → "))} <span class="muted">${esc(k.lines.map(l => "L" + l).join(","))}</span><p>${esc(k.reason)}</p></div>`).join("");
}
