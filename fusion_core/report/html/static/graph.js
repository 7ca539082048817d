// fusion-advisor report: draws the laid-out graph (positions come from layout.py) as SVG.
// One FusionGraph per pane; a compare page has two (the baseline's side and the current one).
"use strict";

const STEP = 44, NODE_H = 22, BAND_GAP = 26, MARGIN = 30, PAD = 6;

function esc(text) {
  return String(text).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;"})[c]);
}

function hue(k) { return (k * 47 + 200) % 360; }

// overlay: {clusterOf: node index -> cluster id, label(id), cls(id), side, mark(i)}; a compare
// page's pane draws one side ("base" or "current") of a graph holding both: a node only the
// other side has is drawn dashed where it carries a mark ([class, why]), else not at all.
// onPick(kind, id)
class FusionGraph {
  constructor(host, graph, overlay, onPick) {
    this.host = host; this.g = graph; this.overlay = overlay; this.onPick = onPick;
    this.zoom = 1; this.selected = null;
    const other = {base: "current", current: "base"}[overlay.side];
    this.absent = new Set(other && graph.only ? graph.only[other] : []);
    // Large runs start collapsed so the first view fits; small ones start expanded.
    this.collapsed = new Set(graph.groups.map((gr, i) => [gr, i])
      .filter(([gr]) => gr.n >= 4).map(([, i]) => i));
    this.bandOfLayer = [];
    graph.bands.forEach((b, i) => { for (let l = b.start; l < b.start + b.depth; l++) this.bandOfLayer[l] = i; });
    host.addEventListener("click", ev => this.click(ev));
    this.render();
  }

  hidden(band) {
    const b = this.g.bands[band];
    if (b.group < 0 || !this.collapsed.has(b.group)) return false;
    return this.g.groups[b.group].bands[0] !== band;
  }

  // Top of every band for the current collapse state (hidden bands take no space).
  placeBands() {
    this.top = []; let y = MARGIN;
    this.g.bands.forEach((b, i) => {
      this.top[i] = y;
      if (!this.hidden(i)) y += b.depth * STEP + BAND_GAP;
    });
    this.height = y + MARGIN;
  }

  y(layer) {
    const band = this.bandOfLayer[layer], b = this.g.bands[band];
    return this.top[band] + (layer - b.start) * STEP + NODE_H / 2;
  }

  mark(i) { return this.overlay.mark ? this.overlay.mark(i) : null; }

  visible(i) {
    return !this.hidden(this.bandOfLayer[this.g.nodes[i][4]]) && (!this.absent.has(i) || !!this.mark(i));
  }

  // An edge only the other side has: drawn dashed to or from a node drawn dashed, else not.
  edgeClass(u, v, side) {
    if (!side || side === this.overlay.side) return "";
    return this.absent.has(u) || this.absent.has(v) ? " absent" : null;
  }

  render() {
    this.placeBands();
    const parts = [], g = this.g, width = g.width + 2 * MARGIN + 120;
    parts.push(`<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L8,4L0,8z" fill="#888"/></marker></defs>`);
    parts.push(this.bandFrames());
    parts.push(this.clusterShapes());
    parts.push(this.edgePaths());
    parts.push(this.nodeBoxes());
    const w = width * this.zoom, h = this.height * this.zoom;
    this.host.innerHTML = `<svg width="${w}" height="${h}" viewBox="${-MARGIN} 0 ${width} ${this.height}">${parts.join("")}</svg>`;
    if (this.selected) this.highlight(this.selected);
  }

  bandFrames() {
    const out = [], xs = this.bandExtents();
    this.g.bands.forEach((b, i) => {
      if (!b.label || this.hidden(i)) return;
      const [lo, hi] = xs[i], top = this.top[i] - 10, h = b.depth * STEP + 4;
      out.push(`<rect class="band" x="${lo - 40}" y="${top}" width="${hi - lo + 80}" height="${h}"/>`);
      let text = esc(b.label);
      if (b.group >= 0) {
        const gr = this.g.groups[b.group];
        if (this.collapsed.has(b.group)) {
          text = `${esc(gr.label)} ×${gr.n}`;
          out.push(`<text class="toggle" data-toggle="${b.group}" x="${lo - 36}" y="${top + 30}">▸ expand ×${gr.n}</text>`);
        } else if (gr.bands[0] === i) {
          out.push(`<text class="toggle" data-toggle="${b.group}" x="${lo - 36}" y="${top + 30}">▾ collapse ×${gr.n}</text>`);
        }
      }
      out.push(`<text class="band-label" x="${lo - 36}" y="${top + 14}">${text}</text>`);
    });
    return out.join("");
  }

  bandExtents() {
    const xs = this.g.bands.map(() => [Infinity, -Infinity]);
    for (const n of this.g.nodes) {
      const b = xs[this.bandOfLayer[n[4]]];
      b[0] = Math.min(b[0], n[3] - n[5] / 2); b[1] = Math.max(b[1], n[3] + n[5] / 2);
    }
    return xs;
  }

  // A cluster is drawn as one row per layer it spans, stroked first and filled over, so
  // only the outline of the union shows and no other node sits inside it.
  clusterShapes() {
    const rows = new Map(), ov = this.overlay, nodes = this.g.nodes;
    const add = (id, layer, lo, hi, op) => {
      if (!rows.has(id)) rows.set(id, new Map());
      const r = rows.get(id), cur = r.get(layer);
      r.set(layer, cur ? [Math.min(cur[0], lo), Math.max(cur[1], hi), cur[2] || op] : [lo, hi, op]);
    };
    nodes.forEach((n, i) => {
      const id = ov.clusterOf[i];
      if (id === undefined || id < 0 || !this.visible(i)) return;
      add(id, n[4], n[3] - n[5] / 2 - PAD, n[3] + n[5] / 2 + PAD, true);
    });
    for (const [u, v, pts, side] of this.g.edges) {
      const id = ov.clusterOf[u];
      if (id === undefined || id < 0 || ov.clusterOf[v] !== id || !this.visible(u)
        || this.edgeClass(u, v, side) === null) continue;
      for (let k = 0; k < pts.length; k += 2) add(id, pts[k + 1], pts[k] - 8, pts[k] + 8, false);
    }
    const out = [], others = this.obstacles();
    for (const [id, r] of rows) {
      const layers = [...r.keys()].sort((a, b) => a - b), first = layers[0], last = layers[layers.length - 1];
      const left = Math.min(...layers.map(l => r.get(l)[0])), right = Math.max(...layers.map(l => r.get(l)[1]));
      const rects = layers.map(l => {
        // As wide as the whole cluster where no other op in the layer is in the way.
        let [lo, hi, op] = r.get(l);
        const near = (others.get(l) || []).filter(([, , c]) => c !== id);
        if (op) lo = Math.max(left, ...near.filter(([, b]) => b <= lo).map(([, b]) => b + 4));
        if (op) hi = Math.min(right, ...near.filter(([a]) => a >= hi).map(([a]) => a - 4));
        const yc = this.y(l);
        const top = l === first ? yc - NODE_H / 2 - PAD : yc - STEP / 2;
        const bot = l === last ? yc + NODE_H / 2 + PAD : yc + STEP / 2;
        return `x="${lo}" y="${top}" width="${hi - lo}" height="${bot - top}"`;
      });
      const [lo] = r.get(first), h = hue(id), cls = ov.cls(id);
      out.push(`<g class="cluster ${cls}" data-cluster="${id}" style="--h:${h}">`
        + rects.map(a => `<rect class="edge-of" ${a}/>`).join("")
        + rects.map(a => `<rect class="fill" ${a}/>`).join("")
        + `<text class="cluster-label" x="${lo + 2}" y="${this.y(first) - NODE_H / 2 - PAD - 3}">${esc(ov.label(id))}</text></g>`);
    }
    return out.join("");
  }

  // Per layer, the [left, right, cluster] extent of every visible op.
  obstacles() {
    const out = new Map();
    this.g.nodes.forEach((n, i) => {
      if (!this.visible(i)) return;
      if (!out.has(n[4])) out.set(n[4], []);
      out.get(n[4]).push([n[3] - n[5] / 2 - PAD, n[3] + n[5] / 2 + PAD, this.overlay.clusterOf[i]]);
    });
    return out;
  }

  curve(points) {
    let d = `M${points[0][0]},${points[0][1]}`;
    for (let k = 1; k < points.length; k++) {
      const [x0, y0] = points[k - 1], [x1, y1] = points[k], my = (y0 + y1) / 2;
      d += `C${x0},${my} ${x1},${my} ${x1},${y1}`;
    }
    return d;
  }

  edgePaths() {
    const out = [], nodes = this.g.nodes;
    const from = i => [nodes[i][3], this.y(nodes[i][4]) + NODE_H / 2];
    const to = i => [nodes[i][3], this.y(nodes[i][4]) - NODE_H / 2];
    for (const [u, v, pts, side] of this.g.edges) {
      const cls = this.edgeClass(u, v, side);
      if (cls === null) continue;
      if (this.visible(u) && this.visible(v)) {
        const mid = [];
        for (let k = 0; k < pts.length; k += 2) mid.push([pts[k], this.y(pts[k + 1])]);
        out.push(`<path class="edge${cls}" d="${this.curve([from(u), ...mid, to(v)])}"/>`);
      } else if (this.visible(v)) {  // leaves a collapsed run: start at its first instance
        const gr = this.g.groups[this.g.bands[this.bandOfLayer[nodes[u][4]]].group];
        const twin = gr && gr.counterpart[u];
        if (twin !== undefined) out.push(`<path class="edge exit" d="${this.curve([from(twin), to(v)])}"/>`);
      }
    }
    for (const [u, v, side] of this.g.stubs) {
      if (this.edgeClass(u, v, side) === null) continue;
      if (this.visible(u)) {
        const [x, y] = from(u);
        out.push(`<path class="stub" d="M${x},${y}v10"/>`);
      }
      if (this.visible(v)) {
        const [x, y] = to(v);
        out.push(`<path class="stub" d="M${x},${y - 14}v14"><title>from ${esc(nodes[u][0])}</title></path><text class="stub-label" x="${x + 3}" y="${y - 6}">${esc(nodes[u][1])} ↓</text>`);
      }
    }
    return out.join("");
  }

  nodeBoxes() {
    const out = [];
    this.g.nodes.forEach((n, i) => {
      if (!this.visible(i)) return;
      const [name, text, kind, x, layer, w, , rej] = n, y = this.y(layer) - NODE_H / 2;
      const mark = this.mark(i), absent = this.absent.has(i);
      // Rejections are the current analysis': a pane without their badges leaves them out.
      const rejected = rej >= 0 && this.overlay.badge;
      const cls = `node k-${kind}${rejected ? " rejected" : ""}${absent ? " absent" : ""}${mark ? " mark-" + mark[0] : ""}`;
      const title = name + (absent ? ` (only in the ${this.overlay.side === "base" ? "current" : "baseline's"} graph)` : "") + (mark ? `: ${mark[0]}, ${mark[1]}` : "");
      out.push(`<g class="${cls}" data-node="${i}"><rect x="${x - w / 2}" y="${y}" width="${w}" height="${NODE_H}" rx="4"/><text x="${x}" y="${y + 15}">${esc(text)}</text><title>${esc(title)}</title></g>`);
      if (rejected) {
        out.push(`<text class="badge" data-rejection="${rej}" x="${x + w / 2 + 4}" y="${y + 15}">✗ ${esc(this.overlay.badge(rej))}</text>`);
      }
    });
    return out.join("");
  }

  click(ev) {
    const t = ev.target.closest("[data-toggle],[data-node],[data-cluster],[data-rejection]");
    if (!t) return;
    if (t.dataset.toggle !== undefined) {
      const gi = Number(t.dataset.toggle);
      if (this.collapsed.has(gi)) this.collapsed.delete(gi); else this.collapsed.add(gi);
      this.render();
    } else if (t.dataset.rejection !== undefined) this.onPick("rejection", Number(t.dataset.rejection));
    else if (t.dataset.node !== undefined) {
      const i = Number(t.dataset.node), c = this.overlay.clusterOf[i];
      if (c !== undefined && c >= 0) this.onPick("cluster", c); else this.onPick("node", i);
    } else this.onPick("cluster", Number(t.dataset.cluster));
  }

  highlight(sel) {
    this.selected = sel;
    this.host.querySelectorAll(".selected").forEach(e => e.classList.remove("selected"));
    if (sel && sel[0] === "cluster") {
      this.host.querySelectorAll(`[data-cluster="${sel[1]}"]`).forEach(e => e.classList.add("selected"));
    } else if (sel && sel[0] === "nodes") {
      for (const i of sel[1]) {
        const e = this.host.querySelector(`[data-node="${i}"]`);
        if (e) e.classList.add("selected");
      }
    }
  }

  // Scroll the first visible node of `indices` into view (expanding its run if needed).
  reveal(indices) {
    const shown = indices.filter(i => this.visible(i));
    if (!shown.length && indices.length) {
      const band = this.bandOfLayer[this.g.nodes[indices[0]][4]];
      this.collapsed.delete(this.g.bands[band].group);
      this.render();
    }
    const e = this.host.querySelector(`[data-node="${indices[0]}"]`);
    if (e) e.scrollIntoView({block: "center", inline: "center"});
  }

  setZoom(z) { this.zoom = Math.max(0.1, Math.min(3, z)); this.render(); }

  fit() {
    const box = this.host.getBoundingClientRect();
    this.setZoom(Math.min(1, (box.width - 10) / (this.g.width + 2 * MARGIN + 120)));
  }

  toggleAll(collapse) {
    this.collapsed = new Set(collapse ? this.g.groups.map((_, i) => i) : []);
    this.render();
  }
}
