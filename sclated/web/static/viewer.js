// The sclate run viewer: plain JavaScript, no build step, no network but the daemon's.
// Reads /api/v1 with the bearer token from the URL fragment (#token=...) or the form,
// kept in sessionStorage; follows a running run through the events stream (NDJSON read
// with fetch(), since EventSource cannot send the Authorization header).
"use strict";

const TOKEN_KEY = "sclate-token";
const main = document.getElementById("main");
const tooltip = document.getElementById("tooltip");
let pageGeneration = 0; // a page left behind stops its polling and streams
let pageAbort = null;

// -- small helpers --------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function fmtWall(ns) { return ns ? new Date(ns / 1e6).toISOString().replace("T", " ").slice(0, 19) + "Z" : "–"; }
function fmtSim(ns) {
  if (ns === null || ns === undefined) return "–";
  return new Date(ns / 1e6).toISOString().replace("T", " ").slice(0, 16);
}
function fmtSpan(s) {
  const a = Math.abs(s);
  if (a >= 86400) return (s / 86400).toFixed(a >= 864000 ? 0 : 1) + "d";
  if (a >= 3600) return (s / 3600).toFixed(1) + "h";
  if (a >= 60) return (s / 60).toFixed(1) + "m";
  if (a >= 1 || a === 0) return s.toFixed(a >= 10 ? 0 : 2) + "s";
  return (s * 1000).toFixed(a >= 0.01 ? 0 : 2) + "ms";
}
function fmtMs(ns) { return ns === null || ns === undefined ? "–" : (ns / 1e6).toFixed(1) + " ms"; }
function stateBadge(state) { return el("span", { class: "state " + state, "data-state": state }, state); }
function runLink(name) { return el("a", { href: "#/" + name }, name); }
function text(value) { return typeof value === "string" ? value : JSON.stringify(value, null, 1); }

// -- the token --------------------------------------------------------------------------
function takeTokenFromFragment() {
  const m = location.hash.match(/[#&?]token=([^&]+)/);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  const rest = location.hash.replace(/[&?]?token=[^&]+/, "").replace(/^#&?/, "#");
  history.replaceState(null, "", location.pathname + (rest && rest !== "#" ? rest : "#/runs"));
}
function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
function showTokenForm(show) {
  document.getElementById("token-form").hidden = !show;
  document.getElementById("forget-token").hidden = show || !token();
}
document.getElementById("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = document.getElementById("token-input").value.trim();
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  route();
});
document.getElementById("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  route();
});

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
function authHeaders() { const t = token(); return t ? { Authorization: "Bearer " + t } : {}; }
async function api(path, signal) {
  const resp = await fetch("/api/v1/" + path, { headers: authHeaders(), signal });
  let body = null;
  try { body = await resp.json(); } catch (_) { body = null; }
  if (!resp.ok) throw new ApiError(resp.status, (body && body.error) || resp.statusText);
  return body;
}

function showError(err) {
  if (err && err.name === "AbortError") return;
  if (err instanceof ApiError && err.status === 401) {
    showTokenForm(true);
    main.replaceChildren(el("p", { class: "error", id: "auth-needed" }, "A bearer token is needed: " + err.message));
    return;
  }
  main.replaceChildren(el("p", { class: "error" }, String(err && err.message ? err.message : err)));
}

// -- tooltips -----------------------------------------------------------------------------
document.addEventListener("mousemove", (e) => {
  const target = e.target instanceof Element ? e.target.closest("[data-tip]") : null;
  if (!target) { tooltip.hidden = true; return; }
  tooltip.textContent = target.getAttribute("data-tip");
  tooltip.hidden = false;
  const x = Math.min(e.clientX + 14, window.innerWidth - tooltip.offsetWidth - 8);
  tooltip.style.left = x + "px";
  tooltip.style.top = (e.clientY + 14) + "px";
});

// -- the runs page ------------------------------------------------------------------------
const STATES = ["", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED"];

function filterFromQuery(q) {
  const terms = [];
  if (q.get("state")) terms.push("state=" + q.get("state"));
  if (q.get("benchmark")) terms.push("benchmark=" + q.get("benchmark"));
  if (q.get("harness")) terms.push("harness=" + q.get("harness"));
  for (const label of (q.get("label") || "").split(",").map((s) => s.trim()).filter(Boolean)) {
    terms.push("labels." + label);
  }
  return terms.join(" AND ");
}

async function runsPage(query, gen) {
  const q = new URLSearchParams(query);
  const form = el("form", { class: "filters", id: "filters" },
    el("select", { name: "state" }, STATES.map((s) => el("option", { value: s, selected: q.get("state") === s }, s || "any state"))),
    el("input", { name: "benchmark", placeholder: "benchmark", value: q.get("benchmark") || "" }),
    el("input", { name: "harness", placeholder: "harness", value: q.get("harness") || "" }),
    el("input", { name: "label", placeholder: "label key=value", value: q.get("label") || "" }),
    el("button", { type: "submit" }, "filter"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) next.set(k, String(v));
    location.hash = "#/runs" + (next.toString() ? "?" + next : "");
  });
  const tbody = el("tbody", { id: "runs-body" });
  const status = el("p", { class: "muted", id: "runs-status" }, "loading…");
  main.replaceChildren(el("h1", {}, "Runs"), form,
    el("table", { id: "runs" }, el("thead", {}, el("tr", {},
      ["run", "state", "benchmark", "harness", "labels", "created", "simulated time", "score", "reason"].map((h) => el("th", {}, h)))), tbody),
    status);
  const filter = filterFromQuery(q);
  // The list is read again every 2 s while the page is shown: states change live.
  while (gen === pageGeneration) {
    try {
      const runs = [];
      let pageToken = "";
      do {
        const page = await api("runs?page_size=500&filter=" + encodeURIComponent(filter) + "&page_token=" + encodeURIComponent(pageToken), pageAbort.signal);
        runs.push(...page.runs);
        pageToken = page.next_page_token;
      } while (pageToken && gen === pageGeneration);
      if (gen !== pageGeneration) return;
      runs.sort((a, b) => b.create_ns - a.create_ns);
      tbody.replaceChildren(...runs.map((r) => {
        const labels = Object.entries(r.spec.labels || {}).map(([k, v]) => k + "=" + v).join(", ");
        const score = r.results && r.results.score !== undefined && r.results.score !== null ? Number(r.results.score).toFixed(3) : "–";
        return el("tr", { class: "clickable run-row", "data-run": r.name, onclick: () => { location.hash = "#/" + r.name; } },
          el("td", {}, runLink(r.name)), el("td", {}, stateBadge(r.state)),
          el("td", {}, r.spec.benchmark.name), el("td", {}, r.spec.agent.harness), el("td", {}, labels),
          el("td", {}, fmtWall(r.create_ns)), el("td", {}, fmtSim(r.sim_ns)), el("td", {}, score),
          el("td", { class: "muted" }, r.reason));
      }));
      status.textContent = runs.length + " run(s)" + (filter ? " matching " + filter : "") + "; updated " + new Date().toLocaleTimeString();
    } catch (err) {
      if (gen === pageGeneration) showError(err);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

// -- one run ------------------------------------------------------------------------------
const KIND_COLORS = {
  deliver_prompt: "#2f6fd6", notify: "#0f9bb0", grade: "#1f8a4c", agent_control: "#6b7385",
  exec_in_sandbox: "#c58b14", world_event: "#d2527f", wake: "#aab3c5", none: "#cfd5e1",
};
const EXTRA_COLORS = ["#8e44ad", "#e67e22", "#16a085", "#7f8c8d", "#c0392b", "#2c3e50"];
function kindColor(kind) {
  if (!(kind in KIND_COLORS)) KIND_COLORS[kind] = EXTRA_COLORS[Object.keys(KIND_COLORS).length % EXTRA_COLORS.length];
  return KIND_COLORS[kind];
}
function fireKind(ev) {
  const effects = ev.payload.effects || [];
  return effects.length ? effects[0] : "none";
}
// A cron job: a command run in the sandbox on schedule (a benchmark's routine or one the
// harness scheduled itself), the fires whose work holds a "cron" lease.
function isCron(ev) {
  return (ev.payload.effects || []).includes("exec_in_sandbox") || /cron/i.test(ev.payload.source || "") || /cron/i.test(ev.payload.event_id || "");
}

class RunPage {
  constructor(runName, gen) {
    this.name = runName;
    this.gen = gen;
    this.events = [];
    this.run = null;
    this.detail = null;
    this.calls = [];
    this.samples = [];
    this.view = null; // the timeline's visible wall range [x0, x1] (seconds), null: all
    this.renderQueued = false;
  }

  alive() { return this.gen === pageGeneration; }

  async load() {
    try {
      this.detail = await api("runs/" + encodeURIComponent(this.name.slice(5)), pageAbort.signal);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        main.replaceChildren(el("h1", {}, this.name),
          el("p", { class: "notfound", id: "notfound" }, "Run " + this.name + " not found."),
          el("p", {}, el("a", { href: "#/runs" }, "all runs")));
        return;
      }
      throw err;
    }
    this.run = this.detail.run;
    this.layout();
    await this.loadCapture();
    this.render();
    await this.follow();
  }

  async loadCapture() {
    if (this.run.history_expired) return;
    const id = encodeURIComponent(this.name.slice(5));
    try {
      this.calls = (await api("runs/" + id + "/calls", pageAbort.signal)).calls;
      this.samples = (await api("runs/" + id + "/trajectories", pageAbort.signal)).samples;
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      this.captureError = err.message;
    }
  }

  async refresh() {
    this.detail = await api("runs/" + encodeURIComponent(this.name.slice(5)), pageAbort.signal);
    this.run = this.detail.run;
    await this.loadCapture();
  }

  // The run's events: history, then live ones until the run ends (NDJSON).
  async follow() {
    const id = encodeURIComponent(this.name.slice(5));
    const after = this.events.length ? this.events[this.events.length - 1].seq : 0;
    const resp = await fetch("/api/v1/runs/" + id + "/events?follow=1&after_seq=" + after, { headers: authHeaders(), signal: pageAbort.signal });
    if (!resp.ok) {
      let body = null;
      try { body = await resp.json(); } catch (_) { body = null; }
      throw new ApiError(resp.status, (body && body.error) || resp.statusText);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    this.setLive(true);
    for (;;) {
      const { value, done } = await reader.read();
      if (done || !this.alive()) break;
      buffer += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (!line.trim()) continue;
        const msg = JSON.parse(line);
        if (msg.end) continue;
        this.events.push(msg);
        if (msg.kind === "state") { this.run.state = msg.payload.state; this.run.reason = msg.payload.reason; }
        if (msg.kind === "state" || msg.kind === "verdict" || msg.kind === "snapshot") this.needsRefresh = true;
      }
      this.queueRender();
    }
    if (!this.alive()) return;
    this.setLive(false);
    // The run ended: its results, captured calls and trajectories are final now.
    await this.refresh();
    this.render();
    main.setAttribute("data-stream", "ended");
  }

  setLive(on) {
    const badge = document.getElementById("live");
    if (badge) badge.textContent = on && !["SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED"].includes(this.run.state) ? "● live" : "";
  }

  queueRender() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    setTimeout(async () => {
      this.renderQueued = false;
      if (!this.alive()) return;
      if (this.needsRefresh) {
        this.needsRefresh = false;
        // A timer's promise has no one to catch it: a page left mid-refresh aborts the
        // fetch (AbortError, nothing to say); anything else but an API answer is shown.
        try { await this.refresh(); } catch (err) {
          if (!this.alive() || (err && err.name === "AbortError")) return;
          if (!(err instanceof ApiError)) { showError(err); return; }
        }
      }
      this.render();
    }, 250);
  }

  layout() {
    const sections = [
      ["timeline", "Timeline"], ["rounds", "Rounds and verdicts"], ["conversation", "Conversation"],
      ["calls", "Captured model calls"], ["trajectories", "Trajectory graph"],
      ["snapshots", "Snapshots and branches"], ["scheduler", "Scheduler measurements"],
    ];
    main.replaceChildren(
      el("h1", {}, el("span", { id: "run-name" }, this.name), " ", el("span", { id: "run-state" }), " ", el("span", { id: "live", class: "live" })),
      el("div", { id: "summary" }),
      el("nav", { class: "muted" }, sections.map(([id, title]) => [el("a", { href: "javascript:void 0", onclick: () => document.getElementById("sec-" + id).scrollIntoView() }, title), " · "])),
      ...sections.map(([id, title]) => el("section", { id: "sec-" + id }, el("h2", {}, title), el("div", { id: id + "-body" }))));
    const wrap = el("div", { id: "timeline-wrap" });
    document.getElementById("timeline-body").append(
      el("p", { class: "muted" }, "Simulated time against wall time; wheel to zoom, drag to pan, double-click to reset. ", el("span", { id: "timeline-counts" })),
      wrap, el("div", { class: "legend", id: "timeline-legend" }));
    const s = svg("svg", { id: "timeline" });
    wrap.append(s);
    this.bindTimeline(s);
  }

  render() {
    if (!this.alive() || !this.run) return;
    document.getElementById("run-state").replaceChildren(stateBadge(this.run.state));
    this.renderSummary();
    this.renderTimeline();
    this.renderRounds();
    this.renderConversation();
    this.renderCalls();
    this.renderTrajectories();
    this.renderSnapshots();
    this.renderScheduler();
    main.setAttribute("data-events", String(this.events.length));
  }

  renderSummary() {
    const r = this.run;
    const spec = r.spec;
    const labels = Object.entries(spec.labels || {}).map(([k, v]) => k + "=" + v).join(", ") || "–";
    const pairs = [
      ["benchmark", spec.benchmark.name], ["harness", spec.agent.harness], ["labels", labels],
      ["reason", r.reason || "–"], ["created", fmtWall(r.create_ns)], ["started", fmtWall(r.start_ns)],
      ["ended", fmtWall(r.end_ns)], ["simulated time", fmtSim(r.sim_ns)], ["events", String(this.events.length)],
      ["score", r.results && r.results.score !== undefined && r.results.score !== null ? Number(r.results.score).toFixed(3) : "–"],
    ];
    const dl = el("dl", { class: "kv" }, pairs.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    if (r.parent) dl.append(el("dt", {}, "parent"), el("dd", {}, runLink(r.parent)));
    if (r.history_expired) dl.append(el("dt", {}, "history"), el("dd", {}, "expired by retention"));
    document.getElementById("summary").replaceChildren(dl);
  }

  // -- the timeline ---------------------------------------------------------------------
  timelineData() {
    const fires = [], jumps = [], turns = [], memory = [];
    const prompts = [];
    // Wall time from the first fire, jump or turn to the last (a run's state events
    // come before admission and after its report: they would squeeze the plot).
    const timed = this.events.filter((e) => e.kind === "fire" || e.kind === "jump" || e.kind === "turn");
    const walls = (timed.length ? timed : this.events).map((e) => e.wall_ns);
    const origin = walls.length ? Math.min(...walls) : 0;
    const sims = this.events.filter((e) => e.kind === "fire" || e.kind === "jump" || e.kind === "turn").map((e) => e.sim_ns);
    for (const e of this.events) {
      const x = (e.wall_ns - origin) / 1e9;
      if (e.kind === "fire") {
        const kind = fireKind(e);
        fires.push({ x, sim: e.sim_ns, kind, cron: isCron(e), ev: e });
        if (kind === "deliver_prompt" || (e.payload.effects || []).includes("notify")) prompts.push({ x, sim: e.sim_ns });
      } else if (e.kind === "jump") {
        jumps.push({ x, from: e.payload.from_ns, to: e.payload.to_ns });
        sims.push(e.payload.from_ns);
      } else if (e.kind === "turn") {
        // A turn event comes when the turn ended; turns run one at a time, in the
        // order their prompts fired, so it began at the earliest unmatched prompt fire.
        const start = prompts.length ? prompts.shift() : { x, sim: e.sim_ns };
        turns.push({ x0: start.x, x1: x, sim: e.sim_ns, ev: e });
        if (e.payload.memory) memory.push({ x, ev: e });
      }
    }
    const xmax = walls.length ? Math.max(...walls.map((w) => (w - origin) / 1e9)) : 1;
    const simMin = sims.length ? Math.min(...sims) : 0;
    const simMax = sims.length ? Math.max(...sims) : 1;
    return { fires, jumps, turns, memory, origin, xmax: Math.max(xmax, 1e-3), simMin, simMax: Math.max(simMax, simMin + 1e9) };
  }

  renderTimeline() {
    const s = document.getElementById("timeline");
    const d = this.timelineData();
    this.tl = d;
    const W = s.clientWidth || 1000, H = 380;
    s.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const left = 90, right = 16, top = 12, lanes = [["turns", 24], ["cron", 16], ["memory", 16]];
    const laneH = lanes.reduce((a, [, h]) => a + h + 4, 0);
    const plotBottom = H - 26 - laneH;
    const [x0, x1] = this.view || [0, d.xmax * 1.02];
    const sx = (x) => left + ((x - x0) / (x1 - x0)) * (W - left - right);
    const sy = (ns) => plotBottom - ((ns - d.simMin) / (d.simMax - d.simMin)) * (plotBottom - top);
    const simLabel = (ns) => fmtSpan((ns - d.simMin) / 1e9);
    const g = [];
    // Axes and grid.
    const axis = svg("g", { class: "axis" });
    for (let i = 0; i <= 5; i++) {
      const ns = d.simMin + ((d.simMax - d.simMin) * i) / 5;
      axis.append(svg("line", { class: "grid", x1: left, x2: W - right, y1: sy(ns), y2: sy(ns) }),
        svg("text", { x: left - 6, y: sy(ns) + 4, "text-anchor": "end" }, "+" + simLabel(ns)));
    }
    for (let i = 0; i <= 8; i++) {
      const x = x0 + ((x1 - x0) * i) / 8;
      axis.append(svg("text", { x: sx(x), y: H - 8, "text-anchor": "middle" }, fmtSpan(x)));
    }
    axis.append(svg("text", { x: 4, y: top + 10 }, "sim"), svg("text", { x: W - right, y: H - 20, "text-anchor": "end" }, "wall →"));
    g.push(axis);
    const clip = svg("clipPath", { id: "tl-clip" }, svg("rect", { x: left, y: 0, width: W - left - right, height: H }));
    g.push(svg("defs", {}, clip));
    const body = svg("g", { "clip-path": "url(#tl-clip)" });
    // Simulated time against wall time: a line through the fires, jumps drawn as steps.
    const points = [...d.fires.map((f) => [f.x, f.sim]), ...d.jumps.flatMap((j) => [[j.x, j.from], [j.x, j.to]])]
      .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    if (points.length > 1) body.append(svg("polyline", { class: "simline", points: points.map(([x, y]) => sx(x) + "," + sy(y)).join(" ") }));
    for (const j of d.jumps) {
      body.append(svg("line", { class: "jump", x1: sx(j.x), x2: sx(j.x), y1: sy(j.from), y2: sy(j.to),
        "data-tip": `jump +${fmtSpan((j.to - j.from) / 1e9)} simulated\n${fmtSim(j.from)} → ${fmtSim(j.to)}\nat wall +${fmtSpan(j.x)}` }));
    }
    for (const f of d.fires) {
      const p = f.ev.payload;
      body.append(svg("circle", { class: "fire", "data-kind": f.kind, cx: sx(f.x), cy: sy(f.sim), r: 4.5, fill: kindColor(f.kind),
        "data-tip": `fire ${p.event_id}\neffects: ${(p.effects || []).join(", ") || "none"}\nsource: ${p.source}\nsimulated ${fmtSim(f.sim)} (due ${fmtSim(p.due_ns)})\nwall +${fmtSpan(f.x)}` }));
    }
    // Lanes: agent turns, cron jobs, memory jobs.
    let y = plotBottom + 10;
    const laneY = {};
    for (const [name, h] of lanes) {
      laneY[name] = [y, h];
      g.push(svg("text", { class: "lane-label", x: left - 6, y: y + h / 2 + 4, "text-anchor": "end" }, name));
      y += h + 4;
    }
    for (const t of d.turns) {
      const [ly, lh] = laneY.turns;
      const p = t.ev.payload;
      body.append(svg("rect", { class: "turn", x: sx(t.x0), y: ly, width: Math.max(2, sx(t.x1) - sx(t.x0)), height: lh,
        "data-tip": `turn${p.round_id ? " (round " + p.round_id + ")" : ""}${p.session ? " session " + p.session : ""}\nwall ${fmtSpan(t.x1 - t.x0)}\nreply: ${(p.reply || "").slice(0, 200)}${p.harness_error ? "\nerror: " + p.harness_error : ""}` }));
    }
    for (const f of d.fires.filter((f) => f.cron)) {
      const [ly, lh] = laneY.cron;
      body.append(svg("rect", { class: "cronjob", x: sx(f.x) - 2, y: ly, width: 4, height: lh, fill: kindColor(f.kind),
        "data-tip": `cron ${f.ev.payload.event_id}\n${fmtSim(f.sim)}` }));
    }
    for (const m of d.memory) {
      const [ly, lh] = laneY.memory;
      const mem = m.ev.payload.memory;
      body.append(svg("rect", { class: "memjob", x: sx(m.x) - 2, y: ly, width: 4, height: lh, "data-tip": "memory\n" + text(mem).slice(0, 400) }));
    }
    g.push(body);
    s.replaceChildren(...g);
    const kinds = {};
    for (const f of d.fires) kinds[f.kind] = (kinds[f.kind] || 0) + 1;
    document.getElementById("timeline-legend").replaceChildren(...Object.entries(kinds).map(([k, n]) =>
      el("span", {}, el("i", { style: "background:" + kindColor(k) }), `${k} (${n})`)),
      el("span", {}, `jumps (${d.jumps.length})`), el("span", {}, `turns (${d.turns.length})`));
    document.getElementById("timeline-counts").textContent =
      `${d.fires.length} fires, ${d.jumps.length} jumps, ${d.turns.length} turns`;
    s.setAttribute("data-fires", String(d.fires.length));
  }

  bindTimeline(s) {
    const toX = (clientX) => {
      const rect = s.getBoundingClientRect();
      const W = rect.width, left = 90 * (W / (s.viewBox.baseVal.width || W)), right = 16 * (W / (s.viewBox.baseVal.width || W));
      const [x0, x1] = this.view || [0, (this.tl ? this.tl.xmax : 1) * 1.02];
      return x0 + ((clientX - rect.left - left) / (W - left - right)) * (x1 - x0);
    };
    s.addEventListener("wheel", (e) => {
      e.preventDefault();
      const [x0, x1] = this.view || [0, this.tl.xmax * 1.02];
      const at = toX(e.clientX);
      const k = e.deltaY > 0 ? 1.25 : 0.8;
      this.view = [at - (at - x0) * k, at + (x1 - at) * k];
      this.renderTimeline();
    }, { passive: false });
    let drag = null;
    s.addEventListener("mousedown", (e) => { drag = { x: e.clientX, view: this.view || [0, this.tl.xmax * 1.02] }; s.classList.add("dragging"); });
    window.addEventListener("mouseup", () => { drag = null; s.classList.remove("dragging"); });
    s.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const rect = s.getBoundingClientRect();
      const [x0, x1] = drag.view;
      const dx = ((e.clientX - drag.x) / rect.width) * (x1 - x0);
      this.view = [x0 - dx, x1 - dx];
      this.renderTimeline();
    });
    s.addEventListener("dblclick", () => { this.view = null; this.renderTimeline(); });
  }

  // -- rounds -----------------------------------------------------------------------------
  renderRounds() {
    const rows = new Map();
    for (const r of (this.run.results && this.run.results.round_scores) || []) rows.set(r.round_id, { ...r });
    for (const e of this.events.filter((e) => e.kind === "verdict")) {
      const p = e.payload;
      rows.set(p.round_id, { ...(rows.get(p.round_id) || {}), round_id: p.round_id, graded: p.graded, score: p.graded ? p.score : null, reason: p.reason, sim: e.sim_ns });
    }
    const body = document.getElementById("rounds-body");
    if (!rows.size) { body.replaceChildren(el("p", { class: "muted" }, "No round graded yet.")); return; }
    body.replaceChildren(el("table", { id: "rounds" },
      el("thead", {}, el("tr", {}, ["round", "day", "kind", "graded", "score", "reason"].map((h) => el("th", {}, h)))),
      el("tbody", {}, [...rows.values()].map((r) => el("tr", { class: "round-row" },
        el("td", {}, r.round_id), el("td", {}, r.day ?? "–"), el("td", {}, r.kind ?? "–"),
        el("td", {}, r.graded ? "yes" : "no"), el("td", {}, r.score === null || r.score === undefined ? "–" : Number(r.score).toFixed(3)),
        el("td", {}, el("pre", { style: "margin:0;white-space:pre-wrap" }, r.reason || "")))))));
  }

  // -- the conversation -------------------------------------------------------------------
  renderConversation() {
    const body = document.getElementById("conversation-body");
    const turns = this.events.filter((e) => e.kind === "turn");
    if (!turns.length) { body.replaceChildren(el("p", { class: "muted" }, "No agent turn yet.")); return; }
    // Tool calls the model asked for, from the captured calls, in the turn they fell in:
    // a call's timings are on the sandbox's clock, the simulated one, as a turn's end is.
    const toolCalls = this.calls.flatMap((c) => toolCallsOf(c).map((t) => ({ ...t, at: c.timings ? c.timings.end_ns : 0 })));
    body.replaceChildren(...turns.map((e, i) => {
      const p = e.payload;
      const box = el("div", { class: "turnbox" },
        el("div", { class: "who" }, `turn ${i + 1}` + (p.round_id ? ` · round ${p.round_id}` : "") + (p.session ? ` · session ${p.session}` : "") + ` · ${fmtSim(e.sim_ns)}` + (p.delivery_delay_ms ? ` · delivered after ${Number(p.delivery_delay_ms).toFixed(1)} ms` : "")));
      if (p.prompt !== undefined) box.append(el("div", { class: "user" }, el("div", { class: "who" }, "delivered"), el("pre", {}, p.prompt + (p.prompt_truncated ? " …" : ""))));
      const tools = toolCalls.filter((t) => t.at <= e.sim_ns && (i === 0 || t.at > turns[i - 1].sim_ns));
      for (const t of tools) box.append(el("div", { class: "tool" }, el("div", { class: "who" }, "tool call " + t.name), el("pre", {}, t.args)));
      box.append(el("div", { class: "agent" }, el("div", { class: "who" }, "reply"), el("pre", {}, (p.reply || "") + (p.reply_truncated ? ` … (${p.reply_chars} characters)` : ""))));
      if (p.harness_error) box.append(el("p", { class: "error" }, p.harness_error));
      if (p.memory) box.append(el("details", {}, el("summary", {}, "memory"), el("pre", {}, text(p.memory))));
      return box;
    }));
  }

  // -- captured calls ---------------------------------------------------------------------
  renderCalls() {
    const body = document.getElementById("calls-body");
    if (this.captureError) { body.replaceChildren(el("p", { class: "muted" }, this.captureError)); return; }
    if (!this.calls.length) { body.replaceChildren(el("p", { class: "muted" }, "No model call captured.")); return; }
    const open = new Set([...body.querySelectorAll("details[open]")].map((d) => d.getAttribute("data-call")));
    const masks = lossMasks(this.samples);
    body.replaceChildren(el("p", { class: "muted" },
      "Token ids as the server returned them; sampled tokens shaded by probability (darker: more likely); " +
      "a dashed outline marks tokens the loss mask leaves out, an underline the ones trained on. " +
      "Text is the request and response the proxy recorded."),
    ...this.calls.map((c) => {
      const t = c.timings || {};
      const usage = c.usage || {};
      const comp = (c.completions || [])[0] || {};
      const summary = el("summary", {}, `${c.role}${c.component && c.component !== c.role ? " (" + c.component + ")" : ""} · ${c.api} · ${c.model || ""} · ` +
        `${fmtMs(t.end_ns - t.start_ns)} (first byte ${t.first_byte_ns ? fmtMs(t.first_byte_ns - t.start_ns) : "–"}) · ` +
        `prompt ${usage.prompt_tokens ?? (c.prompt_token_ids || []).length} / completion ${usage.completion_tokens ?? (comp.token_ids || []).length} tokens` +
        (c.error ? " · error" : "") + (c.complete ? "" : " · incomplete"));
      const d = el("details", { class: "call", "data-call": c.call_id, open: open.has(c.call_id) }, summary);
      d.append(el("dl", { class: "kv" },
        [["call", c.call_id], ["thread", c.thread + (c.turn !== null && c.turn !== undefined ? " turn " + c.turn : "")], ["status", c.status],
          ["started (sandbox clock)", fmtSim(t.start_ns)], ["finish", c.finish_reason || comp.finish_reason || "–"], ["error", c.error || "–"]]
          .map(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "–")])));
      d.append(el("div", { class: "who" }, "request"), el("pre", {}, requestText(c.request)));
      d.append(el("div", { class: "who" }, "response"), el("pre", {}, responseText(c.response)));
      if (c.prompt_token_ids) d.append(el("div", { class: "who" }, `prompt token ids (${c.prompt_token_ids.length})`), tokenRow(c.prompt_token_ids, null, null));
      for (const cp of c.completions || []) {
        if (!cp.token_ids) continue;
        const pieces = completionPieces(c.response, cp.index, cp.token_ids.length);
        d.append(el("div", { class: "who" }, `completion ${cp.index}: ${cp.token_ids.length} tokens` + (pieces ? " (text of each token from the response's logprobs)" : " (ids)")),
          tokenRow(cp.token_ids, cp.logprobs, masks.get(c.call_id), pieces));
      }
      return d;
    }));
  }

  // -- the trajectory graph ---------------------------------------------------------------
  renderTrajectories() {
    const body = document.getElementById("trajectories-body");
    if (!this.samples.length) { body.replaceChildren(el("p", { class: "muted" }, "No trajectory (no captured call with token ids).")); return; }
    // Nodes are calls; a sample is a root-to-leaf path through them. Shared prefixes merge.
    const nodes = new Map(), edges = new Map();
    const depthOf = new Map();
    for (const s of this.samples) {
      s.call_ids.forEach((id, i) => {
        if (!nodes.has(id)) nodes.set(id, { id, depth: i, samples: [] });
        nodes.get(id).samples.push(s);
        depthOf.set(id, Math.max(depthOf.get(id) || 0, i));
        if (i) edges.set(s.call_ids[i - 1] + ">" + id, { from: s.call_ids[i - 1], to: id, reason: i === s.call_ids.length - 1 ? s.branch_reason : "" });
      });
    }
    const rows = new Map();
    let rowCount = 0;
    for (const s of this.samples) for (const id of s.call_ids) if (!rows.has(id)) rows.set(id, rowCount++);
    const callById = new Map(this.calls.map((c) => [c.call_id, c]));
    const maxDepth = Math.max(...depthOf.values());
    const colW = 150, rowH = 34, W = Math.max(600, (maxDepth + 1) * colW + 40), H = rowCount * rowH + 20;
    const pos = (id) => [20 + depthOf.get(id) * colW, 10 + rows.get(id) * rowH];
    const g = svg("svg", { id: "trajgraph", viewBox: `0 0 ${W} ${H}`, height: H, preserveAspectRatio: "xMinYMin meet" });
    for (const e of edges.values()) {
      const [ax, ay] = pos(e.from), [bx, by] = pos(e.to);
      g.append(svg("path", { class: "edge", d: `M${ax + 120},${ay + 12} C${ax + 135},${ay + 12} ${bx - 15},${by + 12} ${bx},${by + 12}` }));
    }
    for (const n of nodes.values()) {
      const [x, y] = pos(n.id);
      const c = callById.get(n.id);
      const reasons = [...new Set(n.samples.map((s) => s.branch_reason).filter(Boolean))];
      const tip = `call ${n.id}\n${c ? c.role + " · thread " + c.thread : ""}\nsamples: ${n.samples.map((s) => s.sample_id).join(", ")}` +
        (reasons.length ? "\nbranch: " + reasons.join("; ") : "") +
        `\nrewards: ${n.samples.map((s) => s.reward === null ? "–" : Number(s.reward).toFixed(2)).join(", ")}`;
      g.append(svg("rect", { class: "node", x, y, width: 120, height: 24, rx: 4, "data-tip": tip }),
        svg("text", { x: x + 6, y: y + 16, "data-tip": tip }, (c ? c.role + " " : "") + n.id.slice(0, 12)));
      if (reasons.length) g.append(svg("circle", { class: "branch", cx: x + 120, cy: y + 4, r: 4, "data-tip": "branch: " + reasons.join("; ") }));
    }
    body.replaceChildren(g, el("table", {}, el("thead", {}, el("tr", {}, ["sample", "role", "thread", "calls", "tokens", "trained", "reward", "branch reason"].map((h) => el("th", {}, h)))),
      el("tbody", {}, this.samples.map((s) => el("tr", {}, el("td", {}, s.sample_id), el("td", {}, s.role), el("td", {}, s.thread), el("td", {}, s.call_ids.length),
        el("td", {}, s.response_ids.length), el("td", {}, s.loss_mask.reduce((a, b) => a + b, 0)),
        el("td", {}, s.reward === null ? "–" : Number(s.reward).toFixed(3)), el("td", {}, s.branch_reason || "–"))))));
  }

  // -- snapshots and branches -------------------------------------------------------------
  renderSnapshots() {
    const body = document.getElementById("snapshots-body");
    const d = this.detail;
    const parts = [];
    parts.push(el("p", {}, "parent: ", this.run.parent ? runLink(this.run.parent) : "none (an original run)"));
    if (d.children.length) parts.push(el("p", { id: "children" }, "branches: ", d.children.map((c) => [runLink(c.name), " ", stateBadge(c.state), " "])));
    else parts.push(el("p", { class: "muted" }, "No run branched from this one."));
    if (d.group.length) parts.push(el("p", {}, `group ${this.run.spec.group}: `, d.group.map((g) => [runLink(g.name), ` (#${g.index}) `])));
    if (d.snapshots.length) {
      parts.push(el("table", { id: "snapshots" }, el("thead", {}, el("tr", {}, ["snapshot", "created", "simulated", "journal", "image", "agent state"].map((h) => el("th", {}, h)))),
        el("tbody", {}, d.snapshots.map((s) => el("tr", {}, el("td", {}, s.name), el("td", {}, fmtWall(s.create_ns)), el("td", {}, fmtSim(s.sim_ns)),
          el("td", {}, s.journal_length), el("td", {}, s.image || "–"), el("td", {}, s.agent_state ? "yes" : "no"))))));
    } else parts.push(el("p", { class: "muted" }, "No snapshot."));
    body.replaceChildren(...parts);
  }

  renderScheduler() {
    const body = document.getElementById("scheduler-body");
    const sched = this.run.results && this.run.results.scheduler;
    if (!sched) {
      const counts = {};
      for (const e of this.events) counts[e.kind] = (counts[e.kind] || 0) + 1;
      body.replaceChildren(el("p", { class: "muted" }, "Measured when the run ends. Events so far: " +
        (Object.entries(counts).map(([k, n]) => `${k} ${n}`).join(", ") || "none")));
      return;
    }
    body.replaceChildren(el("dl", { class: "kv", id: "scheduler" }, Object.entries(sched).map(([k, v]) =>
      [el("dt", {}, k), el("dd", {}, typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(4)) : text(v))])));
  }
}

function toolCallsOf(call) {
  const out = [];
  const r = call.response;
  if (!r || typeof r !== "object") return out;
  for (const ch of r.choices || []) {
    for (const tc of (ch.message && ch.message.tool_calls) || []) out.push({ name: (tc.function || {}).name || "?", args: (tc.function || {}).arguments || "" });
  }
  for (const block of Array.isArray(r.content) ? r.content : []) if (block.type === "tool_use") out.push({ name: block.name, args: JSON.stringify(block.input) });
  for (const item of Array.isArray(r.output) ? r.output : []) if (item.type === "function_call") out.push({ name: item.name, args: item.arguments || "" });
  return out;
}

function requestText(req) {
  if (!req || typeof req !== "object") return text(req ?? "–");
  if (Array.isArray(req.messages)) {
    return req.messages.map((m) => `[${m.role}] ` + (typeof m.content === "string" ? m.content : text(m.content)) +
      (m.tool_calls ? "\n  tool calls: " + text(m.tool_calls) : "")).join("\n");
  }
  if (typeof req.prompt === "string") return req.prompt;
  if (req.input !== undefined) return text(req.input);
  return text(req);
}

function responseText(resp) {
  if (!resp || typeof resp !== "object") return text(resp ?? "–");
  if (Array.isArray(resp.choices)) {
    return resp.choices.map((c) => (c.message ? (c.message.content || "") + (c.message.tool_calls ? "\ntool calls: " + text(c.message.tool_calls) : "") : c.text || "")).join("\n---\n");
  }
  if (Array.isArray(resp.content)) return resp.content.map((b) => b.text || text(b)).join("\n");
  return text(resp);
}

// Per call: the loss mask of its sampled tokens in the trajectories (1: trained on).
function lossMasks(samples) {
  const out = new Map();
  for (const s of samples) {
    let start = 0;
    s.call_ids.forEach((id, i) => {
      const end = s.segment_ends[i] ?? s.response_ids.length;
      const mask = s.loss_mask.slice(start, end);
      const firstSampled = mask.indexOf(1);
      if (!out.has(id) && firstSampled >= 0) out.set(id, mask.slice(firstSampled));
      start = end;
    });
  }
  return out;
}

// The text of each sampled token, where the response carries it (OpenAI logprobs:
// chat's logprobs.content[].token, completions' logprobs.tokens); null otherwise.
function completionPieces(resp, index, count) {
  if (!resp || typeof resp !== "object" || !Array.isArray(resp.choices)) return null;
  const choice = resp.choices.find((c) => c.index === index) || resp.choices[index];
  const lp = choice && choice.logprobs;
  if (!lp) return null;
  const pieces = Array.isArray(lp.content) ? lp.content.map((t) => t.token) : Array.isArray(lp.tokens) ? lp.tokens : null;
  return pieces && pieces.length === count ? pieces : null;
}

function tokenRow(ids, logprobs, mask, pieces) {
  const row = el("div", { class: "tokens" });
  ids.forEach((id, i) => {
    const lp = logprobs ? logprobs[i] : null;
    const p = lp === null || lp === undefined ? null : Math.exp(lp);
    const m = mask ? mask[i] : undefined;
    const cls = m === 0 ? "masked" : m === 1 ? "trained" : "";
    row.append(el("span", { class: cls, style: p === null ? null : `background: rgba(47,111,214,${(0.08 + 0.6 * p).toFixed(2)})`,
      "data-tip": `token ${id}` + (pieces ? ` ${JSON.stringify(pieces[i])}` : "") + (lp === null || lp === undefined ? "" : `\nlogprob ${lp.toFixed(3)} (p ${p.toFixed(3)})`) + (m === undefined ? "" : `\nloss mask ${m}`) },
      pieces ? pieces[i] : id));
  });
  return row;
}

// -- routing ------------------------------------------------------------------------------
async function route() {
  pageGeneration += 1;
  if (pageAbort) pageAbort.abort();
  pageAbort = new AbortController();
  const gen = pageGeneration;
  tooltip.hidden = true;
  takeTokenFromFragment();
  showTokenForm(false);
  const hash = location.hash.replace(/^#\/?/, "") || "runs";
  const [path, query] = hash.split("?");
  try {
    const who = await api("whoami", pageAbort.signal);
    document.getElementById("tenant").textContent = "tenant " + who.tenant;
    if (path === "runs") await runsPage(query || "", gen);
    else if (/^runs\/[^/]+$/.test(path)) await new RunPage(decodeURIComponent(path), gen).load();
    else main.replaceChildren(el("p", { class: "notfound", id: "notfound" }, "No page " + path + "."));
  } catch (err) {
    if (gen === pageGeneration) showError(err);
  }
}
window.addEventListener("hashchange", route);
route();
