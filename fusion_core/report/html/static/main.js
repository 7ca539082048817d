// fusion-advisor report: builds the panes and tabs; on a compare page, the baseline beside
// the current result, each cluster with its status and each changed op marked on both.
// Loaded last (after graph.js and panel.js).
"use strict";

const panes = [];

function showTab(name) {
  document.querySelectorAll(".tab").forEach(t => t.classList.toggle("active", t.dataset.tab === name));
  document.querySelectorAll(".tab-body").forEach(b => { b.hidden = b.id !== `tab-${name}`; });
}

function pick(kind, id, from) {
  const details = document.getElementById("tab-details");
  if (kind === "cluster" && from && from.baseline) {
    details.innerHTML = baselinePanel(id);
    panes.forEach(p => p.graph.highlight(p.baseline ? ["cluster", id] : null));
  } else if (kind === "cluster") {
    details.innerHTML = (DATA.kind === "compare" ? changePanel(DATA.compare.current[id], "baseline") : "")
      + clusterPanel(PAGE.clusters[id]);
    panes.forEach(p => p.graph.highlight(p.baseline ? null : ["cluster", id]));
  } else if (kind === "node") {
    details.innerHTML = nodePanel(id);
    panes.forEach(p => p.graph.highlight(["nodes", [id]]));
  } else if (kind === "rejection") {
    const r = PAGE.rejections[id];
    details.innerHTML = rejectionItem(r, id);
    const idx = r.nodes.map(n => NODE_INDEX.get(n)).filter(i => i !== undefined);
    panes.forEach(p => { p.graph.highlight(["nodes", idx]); if (!p.baseline) p.graph.reveal(idx); });
  }
  showTab("details");
}

// marks: drawn node name -> [mark, why] for one pane (compare pages only).
function markOf(marks) {
  const names = PAGE.graph.nodes.map(n => n[0]);
  return i => (marks && marks[names[i]]) || null;
}

function overlayCurrent(compare) {
  const clusterOf = PAGE.graph.nodes.map(n => n[6]);
  const status = id => compare ? compare.current[id].status : "";
  return {
    clusterOf, side: compare ? "current" : undefined,
    label: id => `#${id}${status(id) && status(id) !== "kept" ? " " + status(id) : ""}`,
    cls: id => status(id),
    mark: markOf(compare && compare.marks.current),
    badge: k => PAGE.rejections[k].check,
  };
}

function overlayBaseline(compare) {
  const clusterOf = PAGE.graph.nodes.map(() => -1), baseline = compare.baseline;
  baseline.forEach((c, k) => c.nodes.forEach(n => {
    const i = NODE_INDEX.get(n);
    if (i !== undefined) clusterOf[i] = k;
  }));
  return {clusterOf, side: "base", label: k => `#${k} ${baseline[k].status}`,
    cls: k => baseline[k].status, mark: markOf(compare.marks.base)};
}

// What became of a cluster: its status, the other side's clusters and the ops it lost or gained.
function changePanel(c, other) {
  const parts = c.parts.length ? ` (${other} ${c.parts.map(p => "#" + p).join(", ")})` : "";
  return `<p class="change"><b class="st-${esc(c.status)}">${esc(c.status)}</b>${esc(parts)}</p>`
    + (c.lost.length ? `<p>now in no cluster: <span class="mark-lost">${esc(c.lost.join(", "))}</span></p>` : "")
    + (c.new.length ? `<p>in no baseline cluster: <span class="mark-new">${esc(c.new.join(", "))}</span></p>` : "");
}

function baselinePanel(k) {
  const c = DATA.compare.baseline[k];
  return `<h2>Baseline cluster ${k} <small>${esc(c.category)}</small></h2><p class="chain">${esc(c.ops.join(" → "))}</p>`
    + `<p>${esc(c.where)}</p>` + changePanel(c, "current")
    + (c.note ? `<p>${esc(c.note)}</p>` : "")
    + section("Traffic", bars([["unfused", c.unfused_bytes, "e"], ["fused", c.fused_bytes, "k"]], fmtBytes));
}

function addPane(title, overlay, baseline) {
  const wrap = document.createElement("section");
  wrap.className = "pane";
  wrap.innerHTML = `<div class="toolbar"><b>${esc(title)}</b> <button data-z="in">+</button><button data-z="out">−</button><button data-z="fit">fit</button>${PAGE.graph.groups.length ? '<button data-z="collapse">collapse blocks</button><button data-z="expand">expand blocks</button>' : ""}</div><div class="graph"></div>`;
  document.getElementById("panes").appendChild(wrap);
  const pane = {baseline};
  pane.graph = new FusionGraph(wrap.querySelector(".graph"), PAGE.graph, overlay,
    (kind, id) => pick(kind, id, pane));
  wrap.querySelector(".toolbar").addEventListener("click", ev => {
    const z = ev.target.dataset.z, g = pane.graph;
    if (z === "in") g.setZoom(g.zoom * 1.25); else if (z === "out") g.setZoom(g.zoom / 1.25);
    else if (z === "fit") g.fit(); else if (z) g.toggleAll(z === "collapse");
  });
  panes.push(pane);
}

function start() {
  document.getElementById("tab-rejections").innerHTML = rejectionsPanel();
  document.getElementById("tab-inductor").innerHTML = inductorPanel();
  document.querySelectorAll(".tab").forEach(t => t.addEventListener("click", () => showTab(t.dataset.tab)));
  document.getElementById("tab-rejections").addEventListener("click", ev => {
    const r = ev.target.closest("[data-pick-rejection]");
    if (r) pick("rejection", Number(r.dataset.pickRejection));
  });
  if (DATA.kind === "compare") {
    addPane("baseline", overlayBaseline(DATA.compare), true);
    addPane("current", overlayCurrent(DATA.compare), false);
  } else {
    addPane("graph", overlayCurrent(null), false);
  }
  showTab("details");
}

start();
