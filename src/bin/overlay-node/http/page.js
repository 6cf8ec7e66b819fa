// The live web view of one overlay node: statuses arrive on /events every second, the
// chosen root's tree and the members' RTT rows are fetched now and then. Plain DOM and
// SVG, no libraries. `?once=1` renders once and closes the stream (for headless
// screenshots, which wait for the page to go idle); `?root=<id or name>` picks the tree.
"use strict";

const params = new URLSearchParams(location.search);
const once = params.has("once");
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { status: null, tree: null, rows: null, root: params.get("root") || "" };
let treeBusy = false, rowsBusy = false;

// The short id as the node prints it: the first 40 bits of the id in base32.
const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";
function short(hex) {
  const bits = BigInt("0x" + hex.slice(0, 16));
  let out = "";
  for (let i = 0; i < 8; i++) out += ALPHABET[Number((bits >> BigInt(59 - 5 * i)) & 31n)];
  return out;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

const fmt = (x, d = 2) => (x == null ? "–" : Number(x).toFixed(d));
const hue = (i) => `hsl(${(i * 137) % 360}, 55%, 50%)`;

// Name of a member by full id, else its short id.
function nameOf(hex) {
  const m = state.status && state.status.members.find((m) => m.id === hex);
  return m && m.name ? m.name : short(hex);
}

// Level-1 cluster index of every member (by full id); members order by cluster then name.
function clusterIndex() {
  const idx = new Map();
  const level = (state.status.clusters || []).find((l) => l.level === 1);
  if (level) level.groups.forEach((g, i) => g.members.forEach((m) => idx.set(m, i)));
  return idx;
}

function orderedMembers() {
  const idx = clusterIndex();
  const c = (m) => (idx.has(m.id) ? idx.get(m.id) : 1e9);
  return [...state.status.members].sort((a, b) => c(a) - c(b) || a.name.localeCompare(b.name));
}

function renderHeader(s) {
  $("node-name").textContent = `${s.name} (${short(s.id)})`;
  $("node-meta").textContent = `${s.addr} · up ${fmt(s.uptime_ms / 1000, 0)} s · ` +
    `${s.members.length} members · ${s.trees.length} trees · ${s.connections} connections`;
  document.title = `overlay: ${s.name}`;
}

function renderMembers(s) {
  const body = $("members").tBodies[0];
  body.replaceChildren(...orderedMembers().map((m) => {
    const me = m.id === s.id;
    const state = String(m.state).toLowerCase();
    return el("tr", { "data-member": short(m.id), "data-state": state },
      el("td", {}, m.name + (me ? " (this node)" : "")),
      el("td", {}, el("code", {}, short(m.id))),
      el("td", {}, m.addr), el("td", {}, state),
      el("td", { class: "num" }, me ? "" : fmt(m.rtt_ms)));
  }));
}

function renderClusters(s) {
  const box = $("clusters");
  const levels = s.clusters || [];
  if (!levels.length) return;
  box.replaceChildren(...levels.map((l) => el("div", { class: "cluster-level", "data-level": l.level },
    el("strong", {}, `level ${l.level}: `),
    ...l.groups.map((g, i) => {
      const div = el("span", { class: "cluster" + (g.mine ? " mine" : ""), "data-cluster": short(g.label),
        style: `--c: ${hue(i)}` }, `${g.names.join(", ") || g.members.map(short).join(", ")}` +
        (g.rtt_ms != null ? ` · ${fmt(g.rtt_ms)} ms` : ""));
      return div;
    }))));
  // Cluster-to-cluster matrix from the level-1 groups and the bandwidth estimates.
  const groups = (levels.find((l) => l.level === 1) || { groups: [] }).groups;
  const bw = new Map((s.bandwidth || []).map((b) => [b.from + b.to, b]));
  const label = (g) => g.names[0] || short(g.label);
  const head = el("tr", {}, el("th", {}, ""), ...groups.map((g) => el("th", {}, label(g))));
  const rows = groups.map((a) => el("tr", { "data-cluster-row": short(a.label) }, el("th", {}, label(a)),
    ...groups.map((b) => {
      const e = bw.get(a.label + b.label);
      let rtt = a === b ? a.rtt_ms : e && e.latency_ms != null ? 2 * e.latency_ms : null;
      const text = (rtt != null ? fmt(rtt, 1) + " ms" : "–") + (e ? ` ${fmt(e.mbit, 0)} Mb/s` : "");
      return el("td", { style: `background: ${heat(rtt, 0.05, 300)}` }, text);
    })));
  $("cluster-matrix").replaceChildren(head, ...rows);
}

// Green for short RTTs to red for long ones, on a log scale between lo and hi (ms).
function heat(ms, lo, hi) {
  if (ms == null || !(ms > 0)) return "#eef0f3";
  const t = Math.min(1, Math.max(0, Math.log(ms / lo) / Math.log(hi / lo)));
  return `hsl(${120 - 120 * t}, 70%, ${82 - 20 * t}%)`;
}

function renderMatrix() {
  const s = state.status;
  const members = orderedMembers().filter((m) => m.state === "alive");
  const rows = new Map();
  // This node's row always comes from the live status; the others from the gathered rows.
  for (const r of state.rows || []) rows.set(r.id, new Map(r.rtt_ms));
  rows.set(s.id, new Map(s.members.filter((m) => m.rtt_ms != null).map((m) => [m.id, m.rtt_ms])));
  const all = [...rows.values()].flatMap((r) => [...r.values()]).filter((x) => x > 0);
  const lo = Math.max(0.01, Math.min(...all, 1)), hi = Math.max(...all, lo * 10);
  const head = el("tr", {}, el("th", {}, ""), ...members.map((m) => el("th", { title: short(m.id) }, m.name)));
  const body = members.map((a) => el("tr", { "data-rtt-row": short(a.id) }, el("th", {}, a.name),
    ...members.map((b) => {
      const v = a.id === b.id ? null : rows.has(a.id) ? rows.get(a.id).get(b.id) : undefined;
      return el("td", { "data-rtt-from": short(a.id), "data-rtt-to": short(b.id),
        style: `background: ${a.id === b.id ? "#fff" : heat(v, lo, hi)}` },
        a.id === b.id ? "" : v == null ? "?" : fmt(v, v < 10 ? 2 : 0));
    })));
  $("rtt-matrix").replaceChildren(head, ...body);
  const known = members.filter((m) => rows.has(m.id)).length;
  $("rtt-note").textContent = `Rows are the measuring member (${known} of ${members.length} known; ` +
    "a member that does not answer leaves \"?\"); members grouped by cluster.";
}

function renderCounters(s) {
  const rows = [["frames in / out", `${s.frames_in} / ${s.frames_out}`],
    ["bytes in / out", `${s.bytes_in} / ${s.bytes_out}`],
    ["rejected frames", s.frames_rejected], ["protocol errors", s.protocol_errors],
    ["auth failures", s.auth_failures], ["packets dropped", s.packets_dropped],
    ["links lost / resyncs", `${s.links_lost} / ${s.resyncs_after_loss}`],
    ["trees connected", `${s.trees.filter((t) => t.connected).length} of ${s.trees.length}`]];
  $("counters").tBodies[0].replaceChildren(...rows.map(([k, v]) => el("tr", {},
    el("th", {}, k), el("td", { class: "num" }, String(v)))));
}

function renderRootSelect(s) {
  const sel = $("root");
  if (!state.root) state.root = s.id;
  if (!s.members.some((m) => m.id === state.root || m.name === state.root || short(m.id) === state.root)) {
    state.root = s.id;
  }
  const roots = s.trees.map((t) => t.root);
  if (!roots.includes(s.id)) roots.unshift(s.id);
  const want = roots.map((r) => `${r}|${nameOf(r)}`).join(",");
  if (sel.dataset.roots !== want) {
    sel.dataset.roots = want;
    sel.replaceChildren(...roots.map((r) => el("option", { value: r }, `${nameOf(r)} (${short(r)})`)));
  }
  const match = s.members.find((m) => m.id === state.root || m.name === state.root || short(m.id) === state.root);
  if (match) sel.value = match.id;
}

// The tree laid out by cluster: one vertical band per level-1 cluster, each node in its
// cluster's band at the row of its depth, so the links that cross bands are the ones
// that cross the WAN.
function renderTree() {
  const t = state.tree, s = state.status, box = $("tree");
  if (!t || !s) return;
  const byId = new Map(t.nodes.map((n) => [n.id, n]));
  const depth = new Map();
  const depthOf = (id) => {
    let d = 0, cur = id;
    while (cur !== t.root) {
      const n = byId.get(cur);
      if (!n || !n.parent || ++d > t.nodes.length) return -1;
      cur = n.parent;
    }
    return d;
  };
  t.nodes.forEach((n) => depth.set(n.id, depthOf(n.id)));
  const idx = clusterIndex();
  const bandOf = (id) => (idx.has(id) ? idx.get(id) : -1);
  const bands = [...new Set(t.nodes.map((n) => bandOf(n.id)))].sort((a, b) => a - b);
  const maxDepth = Math.max(0, ...depth.values());
  const W = 1200, rowH = 70, top = 40;
  // A last row for the members not (or not yet) connected to the root, when there are any.
  const detachedRow = maxDepth + 1;
  const rows = [...depth.values()].some((d) => d < 0) ? detachedRow + 1 : detachedRow;
  const H = top + rows * rowH;
  const size = (b) => t.nodes.filter((n) => bandOf(n.id) === b).length;
  const total = t.nodes.length || 1;
  let x0 = 0;
  const band = new Map(bands.map((b) => { const w = (W * size(b)) / total; const r = { x: x0, w }; x0 += w; return [b, r]; }));
  const pos = new Map();
  for (let d = 0; d <= detachedRow; d++) {
    for (const b of bands) {
      const here = t.nodes.filter((n) => bandOf(n.id) === b &&
        (d === detachedRow ? depth.get(n.id) < 0 : depth.get(n.id) === d));
      // Under their parents as far as the band allows: fewer crossing edges.
      here.sort((p, q) => ((pos.get(p.parent) || {}).x || 0) - ((pos.get(q.parent) || {}).x || 0) ||
        p.name.localeCompare(q.name));
      const r = band.get(b);
      here.forEach((n, k) => pos.set(n.id, { x: r.x + ((k + 0.5) * r.w) / here.length, y: top + d * rowH }));
    }
  }
  const parts = [];
  for (const b of bands) {
    const r = band.get(b);
    const g = b >= 0 ? s.clusters.find((l) => l.level === 1).groups[b] : null;
    parts.push(svg("rect", { class: "cluster-band", "data-cluster": g ? short(g.label) : "", x: r.x + 2, y: 4,
      width: Math.max(0, r.w - 4), height: H - 8, rx: 6, fill: b >= 0 ? hue(b) : "#999", "fill-opacity": 0.08,
      stroke: b >= 0 ? hue(b) : "#999", "stroke-opacity": 0.5 }));
    parts.push(svg("text", { x: r.x + 8, y: 18, fill: "#6b7385" }, g ? `cluster ${g.names[0] || short(g.label)}` : "no cluster"));
  }
  for (const n of t.nodes) {
    const a = pos.get(n.parent), b = pos.get(n.id);
    if (!n.parent || !a || depth.get(n.id) < 0) continue;
    const cross = bandOf(n.parent) !== bandOf(n.id);
    parts.push(svg("line", { class: "tree-edge", "data-from": short(n.parent), "data-to": short(n.id),
      x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: cross ? "#c0392b" : "#4a5468", "stroke-width": cross ? 2.2 : 1.4 }));
  }
  for (const n of t.nodes) {
    const p = pos.get(n.id), isRoot = n.id === t.root, detached = depth.get(n.id) < 0;
    const g = svg("g", { class: "tree-node", "data-tree-node": short(n.id), "data-depth": depth.get(n.id),
      transform: `translate(${p.x},${p.y})` });
    g.append(svg("title", {}, `${n.name} (${short(n.id)})` + (n.dist_ms != null ? `, ${fmt(n.dist_ms)} ms to the root` : "") +
      (n.answered ? "" : ", did not answer")));
    g.append(svg("circle", { r: isRoot ? 11 : 8, fill: detached ? "#fff" : bandOf(n.id) >= 0 ? hue(bandOf(n.id)) : "#999",
      stroke: isRoot ? "#1d2330" : "#fff", "stroke-width": isRoot ? 3 : 1.5 }));
    g.append(svg("text", { y: 22, "text-anchor": "middle" }, n.name || short(n.id)));
    parts.push(g);
  }
  box.setAttribute("viewBox", `0 0 ${W} ${H}`);
  box.replaceChildren(...parts);
  const drawn = t.nodes.filter((n) => depth.get(n.id) >= 0).length;
  $("tree-note").textContent = `${drawn} of ${t.nodes.length} members connected; red links cross clusters`;
  document.body.dataset.rendered = "tree";
}

async function loadTree() {
  if (treeBusy || !state.status) return;
  treeBusy = true;
  try {
    const r = await fetch("/api/tree?root=" + encodeURIComponent(state.root));
    if (r.ok) { state.tree = await r.json(); renderTree(); }
  } catch (e) { /* the next round retries */ } finally { treeBusy = false; }
}

async function loadRows() {
  if (rowsBusy || !state.status) return;
  rowsBusy = true;
  try {
    const r = await fetch("/api/rtt");
    if (r.ok) { state.rows = await r.json(); renderMatrix(); }
  } catch (e) { /* the next round retries */ } finally { rowsBusy = false; }
}

function onStatus(s) {
  state.status = s;
  renderHeader(s); renderMembers(s); renderClusters(s); renderCounters(s);
  renderRootSelect(s); renderMatrix(); renderTree();
}

$("root").addEventListener("change", (e) => { state.root = e.target.value; state.tree = null; loadTree(); });

const events = new EventSource("/events");
events.onopen = () => { $("conn").dataset.state = "live"; $("conn").textContent = "live"; };
events.onerror = () => { $("conn").dataset.state = "closed"; $("conn").textContent = "reconnecting"; };
events.onmessage = async (e) => {
  const first = !state.status;
  onStatus(JSON.parse(e.data));
  if (once) {
    if (!first) return;
    events.close();
    await Promise.all([loadTree(), loadRows()]);
    document.body.dataset.once = "done";
  } else if (first) {
    loadTree(); loadRows();
    setInterval(loadTree, 3000);
    setInterval(loadRows, 5000);
  }
};
