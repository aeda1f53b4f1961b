// The controller's web view: plain JS + SVG, no library, nothing fetched from elsewhere.
// It reads the REST API (GET /topology, /links, /jobs, /switches, /plan, /healthz),
// follows GET /events (a fetch() stream, so that the bearer token goes in a header,
// never in a URL; polling when the stream fails) and posts / deletes jobs.
"use strict";

const T0 = performance.now();
const SVGNS = "http://www.w3.org/2000/svg";
const TOKEN_KEY = "mcast-controller-token";
const POLL_MS = 3000;
// a fabric of more nodes is drawn pod by pod: each pod one node until opened (drawCollapsed)
const COLLAPSE_AT = 500;
const TOP_DRAWN = 64;  // more top-tier switches than this are one node too
const MAX_PAGES = 1000;  // pages of a list followed at most (apiAll)
const state = { topology: null, links: null, jobs: [], switches: [], plan: null, health: null,
                selected: null, layout: null, layoutKey: "", fit: true, loads: 0, open: null, pods: null };

// -- the API ----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status; this.code = e.code || null; this.field = e.field || null;
  }
}

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function api(path, options = {}) {
  const r = await fetch(path, { ...options, headers: { ...authHeaders(), ...(options.headers || {}) } });
  if (r.status === 401) { askToken(); throw new ApiError(401, await r.json().catch(() => null)); }
  if (r.status === 204) return null;
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new ApiError(r.status, body);
  return body;
}

// a paged list (GET /jobs, /plan: `next` until null), its `key` list concatenated
async function apiAll(path, key) {
  const first = await api(path);
  const items = [...first[key]];
  let page = first;
  for (let n = 0; page.next && n < MAX_PAGES; n++) {
    page = await api(page.next);
    items.push(...page[key]);
  }
  return { ...first, [key]: items, next: null };
}

function askToken() {
  const d = document.getElementById("token-dialog");
  if (!d.open) d.showModal();
}

// -- helpers ----------------------------------------------------------------------------------

function el(tag, attrs = {}, text) {
  const ns = ["svg", "g", "line", "rect", "circle", "text", "path", "title", "polygon"].includes(tag);
  const e = ns ? document.createElementNS(SVGNS, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    // styles through the CSSOM: the page's Content-Security-Policy refuses style attributes
    if (k === "style") Object.assign(e.style, v);
    else e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;  // never innerHTML: names come from the network
  return e;
}

const natural = new Intl.Collator(undefined, { numeric: true }).compare;
const pair = (a, b) => (a < b ? `${a}|${b}` : `${b}|${a}`);

function bps(x) {
  if (x === null || x === undefined) return "—";
  const units = [["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]];
  for (const [u, f] of units) if (Math.abs(x) >= f) return `${(x / f).toPrecision(3)} ${u}b/s`;
  return `${Math.round(x)} b/s`;
}
const num = (x, d = 3) => (x === null || x === undefined ? "—" : Number(x).toPrecision(d));

function jobColour(id) {
  const i = state.jobs.findIndex((j) => j.id === id);
  return `hsl(${(i * 137.508) % 360}, 75%, 42%)`;
}

// -- layout: tiers by BFS distance from the hosts --------------------------------------------

function layout(topology) {
  const kind = new Map(topology.nodes.map((n) => [n.id, n.kind]));
  const adj = new Map(topology.nodes.map((n) => [n.id, []]));
  for (const l of topology.links) { adj.get(l.a).push(l.b); adj.get(l.b).push(l.a); }
  const tier = new Map();
  let frontier = topology.nodes.filter((n) => n.kind === "host").map((n) => n.id);
  frontier.forEach((h) => tier.set(h, 0));
  for (let t = 1; frontier.length; t++) {
    const next = [];
    for (const v of frontier) for (const u of adj.get(v)) {
      if (!tier.has(u) && kind.get(u) === "switch") { tier.set(u, t); next.push(u); }
    }
    frontier = next;
  }
  let top = Math.max(0, ...tier.values());
  for (const n of topology.nodes) if (!tier.has(n.id)) tier.set(n.id, top + 1);  // no host below it
  top = Math.max(0, ...tier.values());
  const tiers = Array.from({ length: top + 1 }, () => []);
  for (const n of topology.nodes) tiers[tier.get(n.id)].push(n.id);

  // order: tier 1 (edge / leaf) by name, hosts grouped under their switch, upper
  // tiers by the mean position of their neighbours below (one barycentre pass)
  const order = new Map();
  const place = (ids) => ids.forEach((v, i) => order.set(v, i / Math.max(1, ids.length - 1)));
  if (tiers[1]) { tiers[1].sort(natural); place(tiers[1]); }
  const under = (h) => adj.get(h).find((u) => tier.get(u) === 1);
  tiers[0].sort((a, b) => (order.get(under(a)) ?? 2) - (order.get(under(b)) ?? 2) || natural(a, b));
  place(tiers[0]);
  for (let t = 2; t <= top; t++) {
    const bary = (v) => {
      const below = adj.get(v).filter((u) => tier.get(u) < t && order.has(u));
      return below.length ? below.reduce((s, u) => s + order.get(u), 0) / below.length : 0.5;
    };
    const b = new Map(tiers[t].map((v) => [v, bary(v)]));
    tiers[t].sort((x, y) => b.get(x) - b.get(y) || natural(x, y));
    place(tiers[t]);
  }
  const widest = Math.max(...tiers.map((ids) => ids.length));
  // rows grow with the width, so that a wide fabric fitted into the panel is not a flat strip
  const width = Math.max(600, widest * 16 + 120), rowH = Math.max(110, Math.round(width * 0.12)), left = 90;
  const height = (top + 1) * rowH + 30;
  const pos = new Map();
  tiers.forEach((ids, t) => {
    const y = 30 + (top - t) * rowH + (t === 0 ? 40 : 0);
    const span = (width - left - 20) * (ids.length > 1 ? 1 : 0);
    ids.forEach((v, i) => pos.set(v, { x: left + (ids.length > 1 ? (span * i) / (ids.length - 1) : (width - left) / 2), y }));
  });
  const switchTiers = top;
  const names = switchTiers === 3 ? ["hosts", "edge", "aggregation", "core"]
    : switchTiers === 2 ? ["hosts", "leaf", "spine"]
    : ["hosts", ...Array.from({ length: switchTiers }, (_, i) => `tier ${i + 1}`)];
  return { pos, tiers, names, width, height, top, rowH, kind };
}

// -- drawing ------------------------------------------------------------------------------------

function loadColour(u) {  // 0 → green, 0.5 → amber, 1 → red
  const h = 130 - 130 * Math.min(1, Math.max(0, u));
  return `hsl(${h}, 80%, 42%)`;
}

function drawFabric() {
  const svg = document.getElementById("fabric");
  const topo = state.topology;
  if (!topo) return;
  // the layout is made again only for another topology (a redraw, say a job selected, keeps it)
  const key = topo === state.layoutOf ? state.layoutKey
    : topo.nodes.map((n) => n.id).join(",") + "#" + topo.links.map((l) => pair(l.a, l.b)).join(",");
  state.layoutOf = topo;
  if (key !== state.layoutKey) {
    state.layout = layout(topo); state.layoutKey = key;
    state.pods = topo.nodes.length > COLLAPSE_AT ? podsOf(topo, state.layout) : null;
    if (state.pods && !state.pods.members.has(state.open)) state.open = null;
  }
  const L = state.layout;
  svg.replaceChildren();
  if (state.pods && state.pods.members.size > 1) { drawCollapsed(svg, topo, L, state.pods); return; }
  svg.setAttribute("viewBox", `0 0 ${L.width} ${L.height}`);
  // fitted: the whole fabric in the panel; full size: readable labels, the panel scrolls
  svg.style.minWidth = state.fit ? "" : `${L.width}px`;
  svg.style.minHeight = state.fit ? "" : `${L.height}px`;
  L.tiers.forEach((ids, t) => {
    if (!ids.length) return;
    const y = L.pos.get(ids[0]).y;
    svg.append(el("text", { class: "tier-label", x: 6, y: y + 3 }, L.names[t] || `tier ${t}`));
  });

  const status = new Map((state.links ? state.links.links : []).map((l) => [pair(l.a.node, l.b.node), l]));
  const links = el("g", { id: "links", class: state.selected ? "dim" : "" });
  let measured = 0;
  for (const l of topo.links) {
    const a = L.pos.get(l.a), b = L.pos.get(l.b), s = status.get(pair(l.a, l.b));
    const line = el("line", { class: "link", x1: a.x, y1: a.y, x2: b.x, y2: b.y, "data-a": l.a, "data-b": l.b });
    let title = `${l.a} — ${l.b}, capacity ${bps(l.capacity)}`;
    if (s && !s.up) { line.classList.add("down"); title += ", DOWN"; }
    const r = s && s.rate_bps;
    if (s && s.up && r) {
      const peak = Math.max(r.a_to_b ?? 0, r.b_to_a ?? 0);
      const u = s.capacity > 0 ? peak / s.capacity : 0;
      line.setAttribute("stroke", loadColour(u));
      line.style.stroke = loadColour(u);
      line.style.strokeWidth = String(1 + 5 * Math.min(1, u));
      line.setAttribute("data-rate", String(peak));
      line.classList.add("measured");
      measured++;
      title += `, ${s.a.node}→${s.b.node} ${bps(r.a_to_b)}, ${s.b.node}→${s.a.node} ${bps(r.b_to_a)} (${(100 * u).toFixed(0)} %)`;
    }
    line.append(el("title", {}, title));
    links.append(line);
  }
  svg.append(links);
  document.getElementById("fabric-legend").textContent =
    `${topo.nodes.filter((n) => n.kind === "switch").length} switches, ${topo.nodes.filter((n) => n.kind === "host").length} hosts, ` +
    `${topo.links.length} links` + (measured ? `, ${measured} with measured load (green → red: share of capacity)` : ", no measured load");

  const job = state.selected ? state.jobs.find((j) => j.id === state.selected) : null;
  if (job && job.structure) svg.append(drawJob(job, L));

  const connected = new Map(state.switches.map((s) => [s.id, s.connected]));
  const nodes = el("g", { id: "nodes" });
  for (const n of topo.nodes) {
    const p = L.pos.get(n.id);
    const g = el("g", { class: `node ${n.kind}`, "data-id": n.id, transform: `translate(${p.x},${p.y})` });
    if (n.kind === "switch") {
      if (connected.get(n.id) === false) g.classList.add("disconnected");
      g.append(el("rect", { x: -6, y: -6, width: 12, height: 12, rx: 2 }));
      g.append(el("text", { x: 0, y: -9, "text-anchor": "middle" }, n.id));
    } else {
      g.append(el("circle", { r: 4 }));
      g.append(el("text", { x: 0, y: 0, transform: "translate(0,9) rotate(60)" }, n.id));
    }
    g.append(el("title", {}, n.kind === "switch" ? `${n.id}${connected.get(n.id) === false ? " (not connected)" : ""}` : n.id));
    nodes.append(g);
  }
  svg.append(nodes);
}

function drawJob(job, L, shown = (v) => v) {
  // shown(v): where node v is drawn (itself, or the collapsed pod holding it)
  const colour = jobColour(job.id);
  const g = el("g", { id: "job-overlay", "data-job": job.id });
  const s = job.structure;
  const drawn = new Set();
  for (const edge of s.edges) {
    const e = { ...edge, from: shown(edge.from), to: shown(edge.to) };
    if (e.from === e.to || drawn.has(`${e.from}>${e.to}`)) continue;  // inside one collapsed pod, or drawn
    drawn.add(`${e.from}>${e.to}`);
    const a = L.pos.get(e.from), b = L.pos.get(e.to);
    if (!a || !b) continue;
    g.append(el("line", { class: "job-edge", "data-from": e.from, "data-to": e.to, "data-copies": e.copies,
                          x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: colour }));
    if (e.copies > 1) {
      g.append(el("text", { class: "job-copies", x: (a.x + b.x) / 2 + 3, y: (a.y + b.y) / 2, fill: colour }, `×${e.copies}`));
    }
  }
  for (const br of s.branches) {  // a unicast copy: emitter to worker, drawn straight (its path is routed)
    const a = L.pos.get(shown(br.from)), b = L.pos.get(shown(br.to));
    if (!a || !b) continue;
    const mx = (a.x + b.x) / 2 + 20, my = (a.y + b.y) / 2;
    g.append(el("path", { class: "job-branch", "data-from": br.from, "data-to": br.to,
                          d: `M${a.x},${a.y} Q${mx},${my} ${b.x},${b.y}`, stroke: colour }));
  }
  for (const v of s.groups) {
    const p = L.pos.get(shown(v));
    if (p) g.append(el("circle", { class: "job-group", "data-switch": v, cx: p.x, cy: p.y, r: 10, stroke: colour }));
  }
  const mark = (v, text, cls) => {
    const p = L.pos.get(shown(v));
    if (p) g.append(el("text", { class: `job-role ${cls}`, "data-node": v, x: p.x + 6, y: p.y + 16, fill: colour }, text));
  };
  mark(job.ps, "PS", "job-ps");
  for (const w of s.ps_unicast) {
    const p = L.pos.get(shown(w));
    if (p) g.append(el("polygon", { class: "job-ps-unicast", "data-node": w, fill: "none", stroke: colour,
                                    points: `${p.x},${p.y - 8} ${p.x + 7},${p.y} ${p.x},${p.y + 8} ${p.x - 7},${p.y}` }));
  }
  return g;
}

// -- a large fabric: pods collapsed ------------------------------------------------------------

// The pods: what is left connected without the top tier (a fat-tree's pods, a
// leaf-spine's leaves with their hosts); the top tier is one node past TOP_DRAWN.
function podsOf(topo, L) {
  const topIds = new Set(L.tiers[L.top] || []);
  const adj = new Map(topo.nodes.map((n) => [n.id, []]));
  for (const l of topo.links) { adj.get(l.a).push(l.b); adj.get(l.b).push(l.a); }
  const unit = new Map(), members = new Map();
  const firstSwitch = (ids) => ids.filter((v) => L.kind.get(v) === "switch").sort(natural)[0] || ids[0];
  const found = [];
  for (const n of topo.nodes) {
    if (topIds.has(n.id) || unit.has(n.id)) continue;
    const ids = [n.id], seen = new Set(ids);
    for (let i = 0; i < ids.length; i++) {
      for (const u of adj.get(ids[i])) if (!topIds.has(u) && !seen.has(u)) { seen.add(u); ids.push(u); }
    }
    found.push(ids);
    ids.forEach((v) => unit.set(v, ids));
  }
  found.sort((a, b) => natural(firstSwitch(a), firstSwitch(b)));
  found.forEach((ids, i) => { const id = `pod ${i}`; members.set(id, ids); ids.forEach((v) => unit.set(v, id)); });
  const top = [...topIds].sort(natural);
  const topUnit = top.length > TOP_DRAWN ? `${L.names[L.top] || "top"} tier` : null;
  for (const v of top) unit.set(v, topUnit || v);
  return { unit, members, top, topUnit };
}

function drawCollapsed(svg, topo, L, P) {
  const shown = (v) => (state.open !== null && P.unit.get(v) === state.open ? v : P.unit.get(v));
  const pods = [...P.members.keys()];
  const open = new Set(state.open !== null ? P.members.get(state.open) : []);
  const openTiers = L.tiers.map((ids) => ids.filter((v) => open.has(v)));
  const width = Math.max(900, pods.length * 70 + 120, ...openTiers.map((ids) => ids.length * 6 + 120));
  const scale = width / 900, rowH = Math.round(110 * scale);  // rows grow with the width, as in layout()
  const pos = new Map(), left = 90, span = (ids, y) => ids.forEach((v, i) =>
    pos.set(v, { x: left + (ids.length > 1 ? ((width - left - 20) * i) / (ids.length - 1) : (width - left) / 2), y }));
  span(P.topUnit ? [P.topUnit] : P.top, 40 * scale);
  span(pods, 40 * scale + rowH);
  const bottom = Math.max(0, L.top - 1);
  openTiers.slice(0, L.top).forEach((ids, t) => span(ids, 40 * scale + rowH * (2 + bottom - t) + (t === 0 ? 30 * scale : 0)));
  const height = 40 * scale + rowH * (open.size ? 2 + bottom : 1) + 60 * scale;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.style.minWidth = state.fit ? "" : `${width}px`;
  svg.style.minHeight = state.fit ? "" : `${height}px`;
  const bundles = new Map();  // one line per pair of drawn nodes: the links between them
  for (const l of topo.links) {
    const a = shown(l.a), b = shown(l.b);
    if (a === b) continue;
    const k = pair(a, b), x = bundles.get(k) || { a, b, n: 0 };
    x.n++; bundles.set(k, x);
  }
  const links = el("g", { id: "links", class: state.selected ? "dim" : "" });
  for (const { a, b, n } of bundles.values()) {
    const pa = pos.get(a), pb = pos.get(b);
    const line = el("line", { class: "link", x1: pa.x, y1: pa.y, x2: pb.x, y2: pb.y, "data-a": a, "data-b": b });
    line.append(el("title", {}, `${a} — ${b}: ${n} link${n > 1 ? "s" : ""}`));
    links.append(line);
  }
  svg.append(links);
  const switches = topo.nodes.filter((n) => n.kind === "switch").length;
  document.getElementById("fabric-legend").textContent =
    `${switches} switches, ${topo.nodes.length - switches} hosts, ${topo.links.length} links in ${pods.length} pods ` +
    `(a pod is one node until opened: click it)`;
  const job = state.selected ? state.jobs.find((j) => j.id === state.selected) : null;
  if (job && job.structure) svg.append(drawJob(job, { pos }, shown));
  const nodes = el("g", { id: "nodes" });
  const hosts = (ids) => ids.filter((v) => L.kind.get(v) === "host").length;
  for (const id of [...pos.keys()]) {
    const p = pos.get(id), ids = P.members.get(id) || (id === P.topUnit ? P.top : null);
    if (ids) {  // a collapsed pod (or the top tier): click to open or close it
      const g = el("g", { class: "node pod" + (id === state.open ? " open" : ""), "data-pod": id,
                          transform: `translate(${p.x},${p.y}) scale(${Math.min(scale, 1.5)})` });
      g.append(el("rect", { x: -22, y: -10, width: 44, height: 20, rx: 4 }));
      g.append(el("text", { x: 0, y: 4, "text-anchor": "middle" }, id));
      g.append(el("title", {}, `${id}: ${ids.length - hosts(ids)} switches, ${hosts(ids)} hosts`));
      nodes.append(g);
      continue;
    }
    const kind = L.kind.get(id);
    const g = el("g", { class: `node ${kind}`, "data-id": id, transform: `translate(${p.x},${p.y}) scale(${Math.min(scale, 2.5)})` });
    g.append(kind === "switch" ? el("rect", { x: -4, y: -4, width: 8, height: 8, rx: 1 }) : el("circle", { r: 2.5 }));
    g.append(el("title", {}, id));
    nodes.append(g);
  }
  svg.append(nodes);
}

// -- panels -------------------------------------------------------------------------------------

function psLinkRate(job) {
  // the PS's access link carries what it sends; only meaningful if it serves this job alone
  if (!state.links || state.jobs.filter((j) => j.ps === job.ps).length !== 1) return null;
  for (const l of state.links.links) {
    if (!l.rate_bps) continue;
    if (l.a.node === job.ps) return l.rate_bps.a_to_b;
    if (l.b.node === job.ps) return l.rate_bps.b_to_a;
  }
  return null;
}

function drawJobs() {
  const tbody = document.querySelector("#jobs tbody");
  tbody.replaceChildren();
  for (const j of state.jobs) {
    const tr = el("tr", { "data-job": j.id });
    if (j.id === state.selected) tr.classList.add("selected");
    const idCell = el("td");
    idCell.append(el("span", { class: "swatch", style: { background: jobColour(j.id) } }), document.createTextNode(j.id));
    const del = el("button", { class: "del", type: "button", title: `delete ${j.id}`, "data-delete": j.id }, "✕");
    const delCell = el("td");
    delCell.append(del);
    tr.append(idCell, el("td", {}, j.ps), el("td", { title: j.workers.join(", ") }, String(j.workers.length)),
              el("td", {}, j.state === "planned" ? j.mode : j.state), el("td", { class: "num" }, bps(j.demand)),
              el("td", { class: "num" }, bps(j.rate)), el("td", { class: "num" }, bps(psLinkRate(j))), delCell);
    tbody.append(tr);
  }
  document.getElementById("jobs-count").textContent = `${state.jobs.length}`;
}

function fullness(s) {
  const f = (used, cap) => (cap === null || cap === undefined ? 0 : cap === 0 ? (used ? Infinity : 0) : used / cap);
  return Math.max(f(s.groups_used, s.group_capacity), f(s.entries_used, s.entry_capacity));
}

function usage(used, cap, learned) {
  const td = el("td", { class: "num" });
  td.append(document.createTextNode(`${used} / ${cap ?? "∞"}`));
  if (cap !== null && cap !== undefined) {
    const bar = el("span", { class: "bar" + (used >= cap ? " full" : "") });
    bar.append(el("i", { style: { width: `${Math.min(100, cap ? (100 * used) / cap : 100)}%` } }));
    td.append(bar);
  }
  if (learned !== null && learned !== undefined) {
    td.append(el("span", { class: "flag", title: `budget ${learned} learned from a table-full error` }, `learned ${learned}`));
  }
  return td;
}

function drawSwitches() {
  const tbody = document.querySelector("#switches tbody");
  tbody.replaceChildren();
  const rows = [...state.switches].sort((a, b) => fullness(b) - fullness(a) || natural(a.id, b.id));
  for (const s of rows) {
    const tr = el("tr", { "data-switch": s.id });
    const conn = el("td", { title: s.connected ? "connected" : s.other_primary ? "another client is primary" : "not connected" });
    conn.append(el("span", { class: "dot" + (s.connected ? " on" : "") }));
    tr.append(el("td", {}, s.id), conn, el("td", {}, s.backend === "p4runtime" ? "P4Runtime" : "OpenFlow"),
              usage(s.groups_used, s.group_capacity, s.learned_group_capacity),
              usage(s.entries_used, s.entry_capacity, s.learned_entry_capacity));
    tbody.append(tr);
  }
}

function drawPlan() {
  const dl = document.getElementById("plan");
  dl.replaceChildren();
  const p = state.plan, h = state.health;
  const add = (k, v, cls) => { dl.append(el("dt", {}, k), el("dd", { class: cls, "data-key": k }, v)); };
  if (!p) add("plan", "none yet");
  else {
    add("λ", num(p.lambda));
    add("LP bound", num(p.lp_bound));
    add("λ / bound", p.lp_bound ? num(p.lambda / p.lp_bound) : "—");
    add("κ", String(p.kappa));
    add("β", num(p.beta));
    add("algorithm", p.algorithm);
    add("generation", String(p.generation));
    add("plan time", `${num(p.runtime_s)} s`);
    add("computed", p.computed_at ? new Date(p.computed_at * 1000).toLocaleTimeString() : "—");
  }
  if (h && h.last_error) add("last error", h.last_error, "error");
}

function render() {
  drawFabric();
  drawJobs();
  drawSwitches();
  drawPlan();
}

// -- loading ------------------------------------------------------------------------------------

function setStatus(text) { document.getElementById("status").textContent = text; }

async function loadAll() {
  const seq = ++state.loads;  // an older load that answers late must not draw over a newer one
  try {
    const plan = apiAll("/plan", "jobs").catch((e) => { if (e.status === 503) return null; throw e; });
    const [topology, links, jobs, switches, health, p] = await Promise.all(
      [api("/topology"), api("/links"), apiAll("/jobs", "jobs"), api("/switches"), api("/healthz"), plan]);
    if (seq !== state.loads) return;
    Object.assign(state, { topology, links, jobs: jobs.jobs, switches: switches.switches, health, plan: p });
    if (state.selected && !state.jobs.some((j) => j.id === state.selected)) state.selected = null;
    render();
    setStatus("");
    if (window.__firstDrawMs === undefined) window.__firstDrawMs = performance.now() - T0;
  } catch (e) {
    if (e.status === 409 && seq === state.loads) { loadAll(); return; }  // plan_changed between pages: again
    setStatus(e.status === 401 ? "the API needs its token" : `cannot read the controller: ${e.message}`);
  }
}

async function loadLive() {  // a tick: rates and table use move, the plan did not change
  try {
    // pods collapsed: no link is drawn by its load, and GET /links is large (17 MB at k=48):
    // the links (the PS's measured rate) are read with each plan only
    const collapsed = state.pods && state.pods.members.size > 1;
    const [links, switches, health] = await Promise.all(
      [collapsed ? state.links : api("/links"), api("/switches"), api("/healthz")]);
    Object.assign(state, { links, switches: switches.switches, health });
    render();
  } catch (e) { setStatus(`cannot read the controller: ${e.message}`); }
}

// -- live: the /events stream, else polling -------------------------------------------------------

let pollTimer = null, streaming = false;

function setLive(mode) {
  const b = document.getElementById("live");
  b.textContent = mode === "live" ? "live" : mode === "polling" ? `polling every ${POLL_MS / 1000} s` : mode;
  b.className = `badge ${mode}`;
  document.body.dataset.live = mode;
}

async function follow() {
  if (streaming) return;  // one stream at a time (a token entered while one retries)
  streaming = true;
  try {
    const r = await fetch("/events", { headers: authHeaders() });
    if (r.status === 401) { askToken(); throw new Error("unauthorized"); }
    if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
    if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
    setLive("live");
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = (block.match(/^event: (.*)$/m) || [])[1];
        if (event === "plan" || event === "hello") loadAll();
        else if (event === "tick") loadLive();
      }
    }
    throw new Error("stream ended");
  } catch (e) {
    setLive("polling");
    if (!pollTimer) pollTimer = setInterval(loadAll, POLL_MS);
    setTimeout(follow, 5 * POLL_MS);  // try the stream again later
  } finally {
    streaming = false;
  }
}

// -- acting: register and delete jobs ---------------------------------------------------------------

function showErrors(field, message) {
  const form = document.getElementById("job-form");
  for (const s of form.querySelectorAll(".field-error")) s.textContent = "";
  if (!message) return;
  const top = field ? field.split(/[.[]/)[0] : "";
  const slot = form.querySelector(`.field-error[data-field="${CSS.escape(top)}"]`) || form.querySelector('.field-error[data-field=""]');
  slot.textContent = message;
}

async function register(ev) {
  ev.preventDefault();
  const f = ev.target;
  const raw = f.demand.value.trim();
  // the API validates; a value that is not a number goes as it is, so its message is the API's
  const demand = raw !== "" && Number.isFinite(Number(raw)) ? Number(raw) : raw;
  const body = { ps: f.ps.value.trim(), workers: f.workers.value.split(/[\s,]+/).filter(Boolean), demand };
  showErrors(null, null);
  try {
    const job = await api("/jobs", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    f.reset();
    state.selected = job.id;
    await loadAll();
  } catch (e) {
    showErrors(e.field, e.message);
  }
}

async function remove(id) {
  try {
    await api(`/jobs/${encodeURIComponent(id)}`, { method: "DELETE" });
    if (state.selected === id) state.selected = null;
    await loadAll();
  } catch (e) { setStatus(`cannot delete ${id}: ${e.message}`); }
}

// -- wiring -----------------------------------------------------------------------------------------

document.getElementById("job-form").addEventListener("submit", register);
document.querySelector("#jobs tbody").addEventListener("click", (ev) => {
  const del = ev.target.closest("[data-delete]");
  if (del) { remove(del.dataset.delete); return; }
  const tr = ev.target.closest("tr[data-job]");
  if (!tr) return;
  state.selected = state.selected === tr.dataset.job ? null : tr.dataset.job;
  drawFabric(); drawJobs();
});
document.getElementById("fabric").addEventListener("click", (ev) => {
  const pod = ev.target.closest("[data-pod]");
  if (!pod || !state.pods || !state.pods.members.has(pod.dataset.pod)) return;
  state.open = state.open === pod.dataset.pod ? null : pod.dataset.pod;
  drawFabric();
});
document.getElementById("token-button").addEventListener("click", askToken);
document.getElementById("fit-button").addEventListener("click", (ev) => {
  state.fit = !state.fit;
  ev.target.textContent = state.fit ? "full size" : "fit";
  drawFabric();
});
document.getElementById("token-form").addEventListener("submit", () => {
  const v = document.getElementById("token-input").value.trim();
  if (v) sessionStorage.setItem(TOKEN_KEY, v);
  document.getElementById("token-input").value = "";
  loadAll();
  follow();
});

loadAll();
follow();
