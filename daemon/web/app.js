/* app.js — bfd's dashboard (docs/http.md): views drawn from the JSON API
 * under /api/v1/, routed by the address's #fragment:
 *   #/            jobs            #/job/J        a job: trials, curves, parallel coordinates,
 *                                                 its Pareto front, its S2S stage graph
 *   #/trial/T     a trial         #/cluster      slots, GPUs, agents, running attempts
 *   #/compare/A/B two jobs side by side (A the baseline; /grouped: seed groups)
 * Live updates come from /api/v1/jobs/J/stream (Server-Sent Events). Text
 * from the store is only ever set as textContent, never parsed as HTML. */
"use strict";

const API = "/api/v1/";
const PAGE_ROWS = 100;     /* trial table rows shown at once */
const CURVE_TRIALS = 20;   /* trials overlaid on the curves */
const CURVE_POINTS = 1000; /* points per trial asked of the server */
let view = null;           /* the current view's teardown (streams, timers) */

/* An element: el("td", {class: "num"}, "text", child, [more, ...], ...). */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat(Infinity)) if (k !== null && k !== undefined)
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function status(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = bad ? "error" : "";
}

async function get(path) {
  const r = await fetch(API + path, {credentials: "same-origin"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return {body, next: r.headers.get("X-Next-After")};
}

/* Every record of a paged list, page after page. */
async function getAll(path, onPage) {
  const sep = path.includes("?") ? "&" : "?";
  let out = [], after = null;
  for (;;) {
    const {body, next} = await get(path + sep + "limit=10000" + (after !== null ? "&after=" + after : ""));
    out = out.concat(body);
    if (onPage) onPage(out.length);
    if (!next) return out;
    after = next;
  }
}

async function post(path) {
  const r = await fetch(API + path, {method: "POST", credentials: "same-origin"});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function fmt(v) {
  if (typeof v === "number" && !Number.isInteger(v)) return Math.abs(v) >= 1e4 || Math.abs(v) < 1e-3 ? v.toExponential(3) : String(Number(v.toPrecision(4)));
  return v === null || v === undefined ? "" : String(v);
}

function age(t) {
  const s = Date.now() / 1000 - t;
  return s < 120 ? Math.round(s) + " s" : s < 7200 ? Math.round(s / 60) + " min" : s < 172800 ? Math.round(s / 3600) + " h" : Math.round(s / 86400) + " d";
}

const DONE = ["COMPLETED", "FAILED", "CANCELLED", "STOPPED"];

/* ------------------------------------------------------------------ jobs */

async function showJobs(main) {
  const jobs = await getAll("jobs");
  const t = el("table", {id: "jobs"}, el("tr", {}, ...["job", "name", "method", "trials", "states", "progress", "best", "objective", "age"].map(h => el("th", {}, h))));
  for (const j of jobs.reverse()) {
    const done = DONE.reduce((a, s) => a + (j.states[s] || 0), 0);
    const pct = j.n_trials ? Math.round(100 * done / j.n_trials) : 0;
    const states = Object.entries(j.states).map(([s, n]) => el("span", {class: "state " + s}, s + " " + n + " "));
    t.append(el("tr", {"data-job": j.id},
      el("td", {}, el("a", {href: "#/job/" + j.id}, j.id)), el("td", {}, j.name), el("td", {}, j.method),
      el("td", {class: "num"}, j.n_trials), el("td", {}, ...states),
      el("td", {}, el("span", {class: "bar"}, el("span", {style: "width:" + pct + "%"})), " " + pct + "%"),
      el("td", {class: "num"}, fmt(j.best)), el("td", {}, j.metric + " (" + j.goal + ")"), el("td", {}, age(j.submitted))));
  }
  main.append(el("h1", {}, "Jobs"), jobs.length ? t : el("p", {class: "muted"}, "No jobs yet: bfctl submit SWEEP.yaml"));
  const timer = setInterval(() => route(), 5000);
  return () => clearInterval(timer);
}

/* ------------------------------------------------------------------- job */

/* The trial table: every trial in memory, sorted and filtered there, one
 * page of rows in the DOM (100,000 trials stay quick). */
function trialTable(job, trials, onChange) {
  const box = el("div", {});
  const cols = ["id", "idx", "state", "attempts"];
  const keys = new Set();
  for (const t of trials) for (const k of Object.keys(t)) keys.add(k);
  const params = [...keys].filter(k => k.startsWith("params.")).sort();
  const objs = [...keys].filter(k => k.startsWith("objective.")).sort();
  const metrics = [...keys].filter(k => k.startsWith("metrics.")).sort();
  const all = cols.concat(params, objs, metrics, ["reason"]);
  let sortKey = "idx", asc = true, page = 0, filter = "";
  const filterBox = el("input", {id: "filter", placeholder: "filter: text, or key=value (state=RUNNING)", size: 40});
  const info = el("span", {class: "muted"});
  const prev = el("button", {onclick: () => { page = Math.max(0, page - 1); draw(); }}, "\u2190");
  const nextB = el("button", {onclick: () => { page++; draw(); }}, "\u2192");
  filterBox.addEventListener("input", () => { filter = filterBox.value.trim(); page = 0; draw(); });
  const table = el("table", {id: "trials"});
  box.append(el("div", {class: "controls"}, filterBox, prev, nextB, info), table);
  function matches(t) {
    if (!filter) return true;
    const eq = filter.indexOf("=");
    if (eq > 0) {
      const k = filter.slice(0, eq), v = filter.slice(eq + 1);
      const key = k in t ? k : "params." + k in t ? "params." + k : k;
      return String(t[key]) === v;
    }
    return all.some(k => t[k] !== undefined && String(t[k]).includes(filter));
  }
  function view() {
    const rows = trials.filter(matches);
    rows.sort((a, b) => {
      const x = a[sortKey], y = b[sortKey];
      if (x === y) return a.idx - b.idx;
      if (x === undefined || x === null) return 1;
      if (y === undefined || y === null) return -1;
      return (x < y ? -1 : 1) * (asc ? 1 : -1);
    });
    return rows;
  }
  function draw() {
    const rows = view();
    const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));
    page = Math.min(page, pages - 1);
    info.textContent = rows.length + " of " + trials.length + " trials, page " + (page + 1) + " of " + pages;
    table.replaceChildren(el("tr", {}, ...all.map(k => el("th", {
      class: k === sortKey ? (asc ? "sorted-asc" : "sorted-desc") : "",
      onclick: () => { asc = k === sortKey ? !asc : true; sortKey = k; draw(); }
    }, k.replace(/^(params|metrics)\./, "")))));
    for (const t of rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS))
      table.append(el("tr", {"data-trial": t.id, "data-state": t.state}, ...all.map(k => {
        if (k === "id") return el("td", {}, el("a", {href: "#/trial/" + t.id}, "t" + t.id));
        if (k === "state") return el("td", {class: "state " + t.state}, t.state);
        if (k === "reason") return el("td", {class: "reason"}, t.state === "RUNNING" || t.state === "PENDING" ? "" : t.reason || "");
        return el("td", {class: typeof t[k] === "number" ? "num" : ""}, fmt(t[k]));
      })));
    if (onChange) onChange(rows);
  }
  draw();
  return {box, draw, visible: view};
}

/* Curves of the given trials' metric: dygraphs, overlaid, smoothing and
 * log-y, grown live by addPoints. */
function curves(main, job, metricsList) {
  const box = el("div", {});
  const sel = el("select", {id: "metric"}, ...metricsList.map(m => el("option", {value: m}, m)));
  const smooth = el("input", {type: "range", min: 0, max: 0.99, step: 0.01, value: 0, id: "smooth"});
  const logy = el("input", {type: "checkbox", id: "logy"});
  const div = el("div", {class: "curve", id: "curve", "data-points": 0});
  box.append(el("div", {class: "controls"}, el("label", {}, "metric ", sel), el("label", {}, "smoothing ", smooth), el("label", {}, logy, " log y")), div);
  let series = new Map(), graph = null, trialIds = [], npts = 0;
  function data() {
    const ids = [...series.keys()];
    const steps = new Map();
    ids.forEach((id, i) => {
      const alpha = Number(smooth.value);
      let ema = null;
      for (const [step, v] of [...series.get(id).entries()].sort((a, b) => a[0] - b[0])) {
        ema = ema === null || alpha === 0 ? v : alpha * ema + (1 - alpha) * v;
        if (!steps.has(step)) steps.set(step, new Array(ids.length).fill(null));
        steps.get(step)[i] = ema;
      }
    });
    const rows = [...steps.entries()].sort((a, b) => a[0] - b[0]).map(([s, vs]) => [s, ...vs]);
    return {rows, labels: ["step", ...ids.map(id => "t" + id)]};
  }
  function draw() {
    const {rows, labels} = data();
    div.setAttribute("data-points", npts);
    if (!rows.length) { div.textContent = "no points of " + sel.value + " yet"; graph = null; return; }
    const opts = {labels, logscale: logy.checked, connectSeparatedPoints: true, legend: "follow", strokeWidth: 1.2, xlabel: "step", ylabel: sel.value};
    if (typeof Dygraph === "undefined") { div.textContent = "dygraphs is missing (libjs-dygraphs)"; return; }
    if (!div.isConnected) { setTimeout(draw, 50); return; } /* dygraphs measures its div */
    if (!graph || graph.numColumns() !== labels.length) { div.textContent = ""; graph = new Dygraph(div, rows, opts); }
    else graph.updateOptions(Object.assign({file: rows}, opts));
  }
  async function load(ids) {
    trialIds = ids.slice(0, CURVE_TRIALS);
    series = new Map(trialIds.map(id => [id, new Map()]));
    npts = 0;
    if (!sel.value || !trialIds.length) { draw(); return; }
    const {body} = await get("jobs/" + job + "/points?metric=" + encodeURIComponent(sel.value) + "&max_points=" + CURVE_POINTS + "&trials=" + trialIds.join(","));
    for (const p of body) { series.get(p.trial).set(p.step, p.value); npts++; }
    draw();
  }
  function addPoints(pts) {
    let n = 0;
    for (const p of pts) {
      if (!series.has(p.trial)) { if (series.size >= CURVE_TRIALS) continue; series.set(p.trial, new Map()); }
      series.get(p.trial).set(p.step, p.value);
      n++;
    }
    npts += n;
    if (n) draw();
  }
  smooth.addEventListener("input", draw);
  logy.addEventListener("change", draw);
  return {box, load, addPoints, metric: () => sel.value, select: sel, ids: () => trialIds};
}

/* Parallel coordinates (d3 v3): one axis per swept parameter, then the
 * objective; a line per trial, coloured by the objective. */
function parallel(rows, job) {
  const box = el("div", {id: "parallel"});
  if (typeof d3 === "undefined") { box.textContent = "d3 is missing (libjs-d3)"; return box; }
  const obj = "objective." + job.metric;
  const dims = Object.keys(rows[0] || {}).filter(k => k.startsWith("params.")).concat([obj]);
  const data = rows.filter(r => r[obj] !== undefined);
  if (!data.length) { box.append(el("p", {class: "muted"}, "no trial has " + job.metric + " yet")); return box; }
  const w = Math.max(500, 160 * dims.length), h = 360, m = {t: 30, r: 40, b: 20, l: 40};
  const x = d3.scale.ordinal().domain(dims).rangePoints([0, w - m.l - m.r]);
  const y = {};
  for (const d of dims) {
    const vals = data.map(r => r[d]);
    y[d] = vals.every(v => typeof v === "number")
      ? d3.scale.linear().domain(d3.extent(vals)).range([h - m.t - m.b, 0]).nice()
      : d3.scale.ordinal().domain([...new Set(vals.map(String))].sort()).rangePoints([h - m.t - m.b, 0]);
  }
  const ext = d3.extent(data, r => r[obj]);
  const color = d3.scale.linear().domain(job.goal === "max" ? [ext[0], ext[1]] : [ext[1], ext[0]]).range(["#d32f2f", "#2e7d32"]);
  const svg = d3.select(box).append("svg").attr("class", "pc").attr("width", w).attr("height", h)
    .append("g").attr("transform", "translate(" + m.l + "," + m.t + ")");
  const line = d3.svg.line();
  svg.selectAll(".line").data(data).enter().append("path").attr("class", "line")
    .attr("d", r => line(dims.map(d => [x(d), y[d](typeof r[d] === "number" ? r[d] : String(r[d]))])))
    .attr("stroke", r => color(r[obj])).append("title").text(r => "t" + r.id + ": " + fmt(r[obj]));
  const g = svg.selectAll(".dim").data(dims).enter().append("g").attr("class", "axis").attr("transform", d => "translate(" + x(d) + ")");
  g.each(function (d) { d3.select(this).call(d3.svg.axis().orient("left").scale(y[d]).ticks(6)); });
  g.append("text").attr("y", -10).attr("text-anchor", "middle").text(d => d.replace(/^(params|objective)\./, ""));
  return box;
}

/* ---------------------------------------------------------- pareto front */

/* A d3 v3 linear scale over the values with a twentieth of their range
 * to spare on each side (marks off the axes), some when they are all equal. */
function spread(vals, range) {
  let [lo, hi] = d3.extent(vals);
  const d = lo === hi ? (Math.abs(lo) > 0 ? Math.abs(lo) * 0.05 : 1) : (hi - lo) / 20;
  return d3.scale.linear().domain([lo - d, hi + d]).range(range);
}

/* The Pareto front of two of the job's objectives (d3 v3), chosen when
 * there are more: a mark per completed trial that has every objective.
 * The ranks are bfd's (jobs/J/pareto: bfctl results' rule and ranking,
 * over all the objectives), not worked out here: the front (rank 1)
 * marked and joined in the order of x, the rest dimmed. Hover names the
 * trial, a click opens it. */
async function paretoView(job, byId) {
  const box = el("div", {id: "pareto"});
  const objs = job.objectives || [];
  if (objs.length < 2) {
    box.append(el("p", {class: "muted"}, "This job has one objective (" + job.metric + "): a Pareto front needs two or more (metric: a list in the sweep, docs/sweeps.md)."));
    return box;
  }
  if (typeof d3 === "undefined") { box.textContent = "d3 is missing (libjs-d3)"; return box; }
  const {body: pts} = await get("jobs/" + job.id + "/pareto");
  const names = objs.map(o => o.name), goal = new Map(objs.map(o => [o.name, o.goal]));
  const pick = (id, v) => { const s = el("select", {id}, ...names.map(n => el("option", {value: n}, n))); s.value = v; return s; };
  const xs = pick("pareto-x", names[0]), ys = pick("pareto-y", names[1]);
  const nfront = pts.filter(p => p.pareto).length;
  const info = el("div", {id: "pareto-info", class: "muted"}, "hover a mark for its trial; click to open it");
  const plot = el("div", {});
  box.append(el("div", {class: "controls"}, names.length > 2 ? [el("label", {}, "x ", xs), el("label", {}, "y ", ys)] : null,
    el("span", {class: "muted"}, pts.length + " completed trials, " + nfront + " on the Pareto front" +
      (names.length > 2 ? " of all " + names.length + " objectives (a front mark may look dominated in two of them)" : "")),
    el("span", {class: "legend"}, el("span", {class: "dot front"}), " front (rank 1) ", el("span", {class: "dot dominated"}), " dominated")),
    plot, info);
  if (!pts.length) { plot.append(el("p", {class: "muted"}, "no completed trial has every objective yet")); return box; }
  function describe(p) {
    const t = byId.get(p.id) || {};
    const params = Object.keys(t).filter(k => k.startsWith("params.")).map(k => k.slice(7) + "=" + (typeof t[k] === "object" ? JSON.stringify(t[k]) : fmt(t[k]))).join(" ");
    return "t" + p.id + " (index " + p.idx + "): " + names.map(n => n + " " + fmt(p["objective." + n])).join(", ") +
      "; rank " + p.rank + (p.pareto ? " (front)" : "") + (params ? "; " + params : "");
  }
  function draw() {
    plot.replaceChildren();
    const X = "objective." + xs.value, Y = "objective." + ys.value;
    const W = 780, H = 460, m = {t: 20, r: 30, b: 50, l: 80};
    const x = spread(pts.map(p => p[X]), [0, W - m.l - m.r]), y = spread(pts.map(p => p[Y]), [H - m.t - m.b, 0]);
    const svg = d3.select(plot).append("svg").attr("class", "pareto").attr("width", W).attr("height", H)
      .append("g").attr("transform", "translate(" + m.l + "," + m.t + ")");
    const label = (n, up, down) => n + " (" + goal.get(n) + ", better " + (goal.get(n) === "max" ? up : down) + ")";
    svg.append("g").attr("class", "axis").attr("transform", "translate(0," + (H - m.t - m.b) + ")").call(d3.svg.axis().scale(x).orient("bottom").ticks(8));
    svg.append("g").attr("class", "axis").call(d3.svg.axis().scale(y).orient("left").ticks(8));
    svg.append("text").attr("x", (W - m.l - m.r) / 2).attr("y", H - m.t - 12).attr("text-anchor", "middle").text(label(xs.value, "\u2192", "\u2190"));
    svg.append("text").attr("transform", "rotate(-90)").attr("x", -(H - m.t - m.b) / 2).attr("y", -m.l + 16).attr("text-anchor", "middle").text(label(ys.value, "\u2191", "\u2193"));
    const front = pts.filter(p => p.pareto).sort((a, b) => a[X] - b[X] || a[Y] - b[Y]);
    svg.append("path").attr("class", "front-line").attr("d", d3.svg.line().x(p => x(p[X])).y(p => y(p[Y]))(front));
    const order = pts.filter(p => !p.pareto).concat(front); /* the front drawn on top */
    svg.selectAll(".pt").data(order).enter().append("circle")
      .attr("class", p => "pt " + (p.pareto ? "front" : "dominated")).attr("data-trial", p => p.id).attr("data-rank", p => p.rank)
      .attr("cx", p => x(p[X])).attr("cy", p => y(p[Y])).attr("r", p => p.pareto ? 6 : 4.5)
      .on("mouseover", function (p) { d3.select(this).classed("hover", true); info.textContent = describe(p); })
      .on("mouseout", function () { d3.select(this).classed("hover", false); })
      .on("click", p => { location.hash = "#/trial/" + p.id; })
      .append("title").text(describe);
  }
  xs.addEventListener("change", draw);
  ys.addEventListener("change", draw);
  draw();
  return box;
}

/* ---------------------------------------------------------- stage graph */

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

/* The job's shared stages (jobs/J/stages): one column per stage of the
 * chain, one box per stage key (its state, runner, the trials sharing it),
 * an edge from each to its parent; then who does what: which trial runs
 * which stage and who waits on whom. */
async function stageGraph(id) {
  const {body: g} = await get("jobs/" + id + "/stages");
  const box = el("div", {id: "stage-graph"});
  if (!g.stages.length) { box.append(el("p", {class: "muted"}, "This job's pipeline runs no shared stages (S2S does).")); return box; }
  const W = 180, H = 58, GX = 36, GY = 18, cols = [], pos = new Map();
  for (const s of g.stages) (cols[s.stage] = cols[s.stage] || []).push(s);
  /* each column in its parents' order (a stable sort), so edges do not cross needlessly */
  const row = new Map();
  cols.forEach((c, x) => {
    c.sort((a, b) => (row.get(a.parent) ?? 0) - (row.get(b.parent) ?? 0));
    c.forEach((s, y) => { row.set(s.key, y); pos.set(s.key, {x: 10 + x * (W + GX), y: 10 + y * (H + GY)}); });
  });
  const width = 20 + cols.length * (W + GX), height = 20 + Math.max(...cols.map(c => c ? c.length : 0)) * (H + GY);
  const pic = svg("svg", {class: "stages", width: width, height: height});
  for (const s of g.stages) {
    const a = pos.get(s.parent), b = pos.get(s.key);
    if (a) pic.append(svg("line", {x1: a.x + W, y1: a.y + H / 2, x2: b.x, y2: b.y + H / 2, class: "edge"}));
  }
  const waiters = new Map();
  for (const t of g.trials) if (t.doing === "waits") (waiters.get(t.at) || waiters.set(t.at, []).get(t.at)).push(t.id);
  for (const s of g.stages) {
    const p = pos.get(s.key), w = waiters.get(s.key) || [];
    pic.append(svg("g", {class: "stage " + s.state, "data-key": s.key, transform: "translate(" + p.x + "," + p.y + ")"},
      svg("rect", {width: W, height: H, rx: 4}),
      svg("text", {x: 8, y: 16, class: "name"}, s.name + " " + s.key.slice(0, 8)),
      svg("text", {x: 8, y: 32}, s.state + (s.runner ? " by t" + s.runner : "") + (s.attempts ? ", " + s.attempts + " att." : "")),
      svg("text", {x: 8, y: 48}, "shared by " + s.trials.map(t => "t" + t).join(" ") + (s.other_jobs_trials ? " +" + s.other_jobs_trials + " other" : "") + (w.length ? "; waiting: " + w.map(t => "t" + t).join(" ") : ""))));
  }
  const doing = {runs: "runs", waits: "waits for", next: "runs next", reused: "reuses every stage", done: "ended"};
  const stageOf = new Map(g.stages.map(s => [s.key, s]));
  box.append(pic, el("h2", {}, "Who waits on what"),
    el("table", {id: "stage-trials"}, el("tr", {}, ...["trial", "state", "doing", "stage", "on", "chain"].map(h => el("th", {}, h))),
      ...g.trials.map(t => { const s = stageOf.get(t.at);
        return el("tr", {"data-trial": t.id}, el("td", {}, el("a", {href: "#/trial/" + t.id}, "t" + t.id)), el("td", {class: "state " + t.state}, t.state),
          el("td", {}, doing[t.doing] || t.doing), el("td", {}, s ? s.name + " " + t.at.slice(0, 8) : ""),
          el("td", {}, t.on ? el("a", {href: "#/trial/" + t.on}, "t" + t.on) : ""),
          el("td", {class: "muted"}, t.chain.map(k => (stageOf.get(k) || {name: "?"}).name + ":" + k.slice(0, 6)).join(" \u2192 "))); })));
  return box;
}

async function showJob(main, id) {
  const {body: job} = await get("jobs/" + id);
  status("loading trials\u2026");
  const trials = await getAll("jobs/" + id + "/trials", n => status("loaded " + n + " trials"));
  const byId = new Map(trials.map(t => [t.id, t]));
  status(trials.length + " trials");
  const {body: metricNames} = await get("jobs/" + id + "/metrics");
  /* seed groups, as bfctl results --group-by-seed ranks them: the default
   * view when some trials differ only in train.seed */
  const groups = trials.some(t => "params.train.seed" in t) ? await getAll("jobs/" + id + "/groups").catch(() => null) : null;
  const folds = !!groups && groups.length < trials.length;
  const head = el("div", {class: "controls"},
    el("h1", {}, "Job " + job.id + ": " + job.name),
    el("span", {}, job.pipeline + ", " + job.method + ", " + job.n_trials + " trials, " + (job.objectives || [{name: job.metric, goal: job.goal}]).map(o => o.name + " (" + o.goal + ")").join(", ")),
    el("label", {}, "max_parallel ", el("input", {id: "max-parallel", type: "number", min: 0, value: job.max_parallel, style: "width:5em"}),
      el("button", {id: "set-parallel", onclick: async () => {
        try { const r = await post("jobs/" + id + "/edit?max_parallel=" + document.getElementById("max-parallel").value); status("max_parallel " + r.max_parallel + " (was " + r.was + ")"); }
        catch (e) { status(e.message, true); } }}, "set")),
    el("label", {}, "add to axis ", el("input", {id: "edit-add", placeholder: "KEY=V1,V2", size: 18}),
      el("button", {id: "add-values", onclick: async () => {
        try { const r = await post("jobs/" + id + "/edit?add=" + encodeURIComponent(document.getElementById("edit-add").value)); status(r.added + " trials added to " + r.axis); route(); }
        catch (e) { status(e.message, true); } }}, "add")),
    el("label", {}, "drop pending ", el("input", {id: "edit-drop", placeholder: "KEY=VALUE", size: 14}),
      el("button", {id: "drop-pending", onclick: async () => {
        try { const r = await post("jobs/" + id + "/edit?drop_pending=" + encodeURIComponent(document.getElementById("edit-drop").value)); status(r.dropped + " pending trials dropped"); route(); }
        catch (e) { status(e.message, true); } }}, "drop")),
    el("button", {id: "cancel-job", class: "danger", onclick: async () => {
      if (!confirm("Cancel job " + id + ": its pending and running trials?")) return;
      try { const r = await post("jobs/" + id + "/cancel"); status(r.cancelled + " trials cancelled"); }
      catch (e) { status(e.message, true); } }}, "cancel job"),
    el("a", {href: "#/compare/" + id, id: "compare-link"}, "compare with another job"));
  let tab = location.hash.split("/")[3] || (folds ? "groups" : "trials");
  const cv = curves(main, id, metricNames);
  if (metricNames.includes(job.metric)) cv.select.value = job.metric;
  const table = trialTable(id, trials, rows => { if (tab === "curves") cv.load(rows.map(r => r.id)); });
  const body = el("div", {});
  const tabs = el("div", {class: "tabs"}, ...(groups ? ["groups"] : []).concat(["trials", "curves", "parallel", "pareto", "stages"]).map(t =>
    el("button", {id: "tab-" + t, class: t === tab ? "on" : "", onclick: () => { location.hash = "#/job/" + id + "/" + t; }}, t)));
  main.append(head, tabs, body);
  const gc = groups ? groupCurves(job, groups, folds) : null;
  if (tab === "trials") body.append(table.box);
  else if (tab === "groups" && groups) body.append(groupTable(job, groups));
  else if (tab === "curves") {
    body.append(cv.box);
    /* the bands under the metric's controls, above the trials' curves */
    if (gc) { cv.box.insertBefore(gc.box, cv.box.children[1]); gc.load(cv.metric()); gc.check.addEventListener("change", () => gc.load(cv.metric())); } await cv.load(table.visible().map(r => r.id));
  }
  else if (tab === "stages") body.append(await stageGraph(id));
  else if (tab === "pareto") body.append(await paretoView(job, byId));
  else body.append(parallel(table.visible(), job));
  /* live: state changes and new points of the shown metric */
  let es = null;
  function openStream() {
    if (es) es.close();
    es = new EventSource(API + "jobs/" + id + "/stream?metric=" + encodeURIComponent(cv.metric() || job.metric));
    es.addEventListener("state", ev => {
      const e = JSON.parse(ev.data);
      /* a state change reads "FROM -> TO: why" (kinds state, preempt) */
      const m = /(?:^|\s)([A-Z]+) -> ([A-Z]+)(?::\s*(.*))?/.exec(e.message || "");
      const t = byId.get(e.trial);
      if (t && m) {
        t.state = m[2]; if (m[3]) t.reason = m[3];
        if (tab === "trials") table.draw();
        else if (tab === "pareto" && m[2] === "COMPLETED") route(); /* a new mark */
      }
      else if (!t && e.trial && e.kind === "propose") route(); /* a new trial (tpe): read the table again */
      status(e.kind + (e.trial ? " t" + e.trial : "") + ": " + (e.message || ""));
    });
    es.addEventListener("points", ev => cv.addPoints(JSON.parse(ev.data)));
    es.onerror = () => status("stream interrupted; retrying", true);
  }
  openStream();
  cv.select.addEventListener("change", async () => { if (gc) gc.load(cv.metric()); await cv.load(table.visible().map(r => r.id)); openStream(); });
  return () => { if (es) es.close(); };
}

/* ------------------------------------------------ seed groups, compare */

/* A value with its spread: "0.8123 ± 0.0100" (the ± part when std is a number). */
function pm(mean, std) {
  if (mean === null || mean === undefined) return "";
  return fmt(mean) + (typeof std === "number" ? " \u00b1 " + fmt(std) : "");
}

/* A swept value as text: a list as [a, b]. */
function pfmt(v) { return Array.isArray(v) ? JSON.stringify(v).replace(/,/g, ", ") : fmt(v); }

/* A record's swept values as "k=v k=v" (skip: a text of them to leave out). */
function paramsText(r, skip) {
  return Object.keys(r).filter(k => k.startsWith("params.") && !(skip || "").split(" ").includes(k.slice(7) + "=" + JSON.stringify(r[k])))
    .sort().map(k => k.slice(7) + "=" + pfmt(r[k])).join(" ");
}

/* The objectives of a job record, [{name, goal}]. */
function objectivesOf(job) {
  return job.objectives && job.objectives.length ? job.objectives : [{name: job.metric, goal: job.goal}];
}

/* The seed groups of a job (jobs/J/groups, ranked by bfd as `bfctl results
 * --group-by-seed` ranks them): one row per group, mean ± std and n per
 * objective, the Pareto front marked; 100 rows a page. */
function groupTable(job, groups) {
  const objs = objectivesOf(job);
  const params = [...new Set(groups.flatMap(g => Object.keys(g).filter(k => k.startsWith("params."))))].sort();
  const table = el("table", {id: "groups"});
  const info = el("span", {class: "muted"});
  let page = 0;
  const pages = Math.max(1, Math.ceil(groups.length / PAGE_ROWS));
  const prev = el("button", {onclick: () => { page = Math.max(0, page - 1); draw(); }}, "\u2190");
  const nextB = el("button", {onclick: () => { page = Math.min(pages - 1, page + 1); draw(); }}, "\u2192");
  function draw() {
    info.textContent = groups.length + " seed groups (trials that differ only in train.seed), ranked on the means; \u2605 the Pareto front; page " + (page + 1) + " of " + pages;
    table.replaceChildren(el("tr", {}, el("th", {}, "\u2605"), el("th", {}, "rank"), el("th", {}, "trials"), el("th", {}, "n"), el("th", {}, "states"),
      ...params.map(k => el("th", {}, k.slice(7))), ...objs.map(o => el("th", {}, o.name + " (" + o.goal + ")")), el("th", {}, "crowding")));
    for (const g of groups.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS)) {
      const states = Object.keys(g).filter(k => k.startsWith("states.")).map(k => el("span", {class: "state " + k.slice(7)}, k.slice(7) + " " + g[k] + " "));
      table.append(el("tr", {"data-group": g.trials[0], "data-rank": g.rank === null ? "" : g.rank, class: g.pareto ? "front" : ""},
        el("td", {class: "front-mark"}, g.pareto ? "\u2605" : ""), el("td", {class: "num"}, g.rank === null ? "-" : g.rank),
        el("td", {class: "trials"}, ...g.trials.flatMap((t, i) => [i ? " " : "", el("a", {href: "#/trial/" + t}, "t" + t)])),
        el("td", {class: "num n"}, g.n), el("td", {}, ...states),
        ...params.map(k => el("td", {class: typeof g[k] === "number" ? "num" : ""}, pfmt(g[k]))),
        ...objs.map(o => { const m = g["objectives." + o.name + ".mean"], sd = g["objectives." + o.name + ".std"];
          return el("td", {class: "num obj", "data-objective": o.name, "data-mean": m === null ? "" : m, "data-std": sd === null ? "" : sd}, pm(m, sd)); }),
        el("td", {class: "num"}, fmt(g.crowding))));
    }
  }
  draw();
  return el("div", {}, el("div", {class: "controls"}, prev, nextB, info), table);
}

/* One curve per entry of sets ({label, job, trials, dashed}): the mean of
 * the trials' metric at each step with a band of ± one std
 * (jobs/J/band), drawn by dygraphs' customBars; into div. */
async function bandGraph(div, sets, metric) {
  const answers = await Promise.all(sets.map(s => get("jobs/" + s.job + "/band?metric=" + encodeURIComponent(metric) +
    "&max_points=" + CURVE_POINTS + "&trials=" + s.trials.join(",")).then(r => r.body)));
  const steps = new Map();
  answers.forEach((pts, i) => { for (const p of pts) {
    if (!steps.has(p.step)) steps.set(p.step, sets.map(() => null));
    const sd = typeof p.std === "number" ? p.std : 0;
    steps.get(p.step)[i] = [p.mean - sd, p.mean, p.mean + sd];
  } });
  const rows = [...steps.entries()].sort((a, b) => a[0] - b[0]).map(([s, vs]) => [s, ...vs]);
  div.setAttribute("data-points", rows.length);
  if (!rows.length) { div.textContent = "no points of " + metric + " yet"; return; }
  if (typeof Dygraph === "undefined") { div.textContent = "dygraphs is missing (libjs-dygraphs)"; return; }
  const series = {};
  for (const s of sets) if (s.dashed) series[s.label] = {strokePattern: [6, 3]};
  div.textContent = "";
  const legend = el("div", {class: "legend"}), plot = el("div", {class: "plot"});
  div.append(plot, legend);
  new Dygraph(plot, rows, {labels: ["step", ...sets.map(s => s.label)], customBars: true, connectSeparatedPoints: true,
    legend: "always", labelsDiv: legend, labelsSeparateLines: false, strokeWidth: 1.4, xlabel: "step", ylabel: metric, series,
    axes: {y: {axisLabelFormatter: v => String(Number(v.toPrecision(5))), axisLabelWidth: 60}}});
}

/* The curves tab's seed-group view: the first groups' mean curves with
 * their ± std bands, above the trials' curves. */
function groupCurves(job, groups, on) {
  const box = el("div", {});
  const check = el("input", {type: "checkbox", id: "curve-groups"});
  check.checked = on;
  const div = el("div", {class: "curve", id: "band", "data-points": 0});
  const shown = groups.filter(g => g.n > 0 || g.trials.length > 1).slice(0, CURVE_TRIALS);
  async function load(metric) {
    div.style.display = check.checked ? "" : "none";
    if (!check.checked || !metric) return;
    if (!div.isConnected) { setTimeout(() => load(metric), 50); return; }
    try {
      await bandGraph(div, shown.map(g => ({label: (paramsText(g) || "every seed") + " (t" + g.trials.join("+t") + ")", job: job.id, trials: g.trials})), metric);
    } catch (e) { div.textContent = e.message; }
  }
  box.append(el("div", {class: "controls"}, el("label", {}, check, " seed groups: mean \u00b1 std of the first " + shown.length + " groups (each trial below)")), div);
  return {box, load, check};
}

/* A form to pick a baseline job and another to compare it with. */
function compareForm(jobs, a, b) {
  const opt = j => el("option", {value: j.id}, j.id + " " + j.name);
  const base = el("select", {id: "compare-base"}, ...jobs.map(opt)), other = el("select", {id: "compare-other"}, ...jobs.map(opt));
  if (a) base.value = a;
  if (b) other.value = b; else if (jobs.length > 1) other.value = jobs[jobs.length > 1 && base.value == jobs[0].id ? 1 : 0].id;
  const grouped = el("input", {type: "checkbox", id: "compare-grouped"});
  grouped.checked = location.hash.endsWith("/grouped");
  return el("div", {class: "controls"}, el("label", {}, "baseline ", base), el("label", {}, "against ", other),
    el("label", {}, grouped, " seed groups"),
    el("button", {id: "compare-go", onclick: () => { location.hash = "#/compare/" + base.value + "/" + other.value + (grouped.checked ? "/grouped" : ""); }}, "compare"));
}

/* Two jobs side by side (compare?jobs=A,B, matched as `bfctl results A B`
 * matches them: by the values of the keys both sweep): per match, the
 * baseline's rows beside the other's, each objective and the difference
 * (other - baseline; a baseline shown again for a second row is dimmed),
 * then their curves on the same axes (the baseline dashed). */
async function showCompare(main, a, b, grouped) {
  const {body: jobs} = await get("jobs?limit=10000");
  main.append(el("h1", {}, "Compare jobs"), compareForm(jobs, a, b));
  if (!a || !b) { main.append(el("p", {class: "muted"}, "Pick a baseline job and a job to compare with it: their trials are matched by the values of the keys both sweep.")); return null; }
  const ja = jobs.find(j => j.id === a), jb = jobs.find(j => j.id === b);
  if (!ja || !jb) throw new Error("no job " + (ja ? b : a));
  const rows = await getAll("compare?jobs=" + a + "," + b + (grouped ? "&group_by_seed=1" : ""));
  const objs = objectivesOf(ja);
  const matches = new Map();
  for (const r of rows) {
    if (!matches.has(r.match)) matches.set(r.match, {a: [], b: []});
    matches.get(r.match)[r.job === a ? "a" : "b"].push(r);
  }
  const val = (r, o) => r ? r["objectives." + o.name + (grouped ? ".mean" : "")] : null;
  const who = r => r ? (grouped ? r.trials : [r.id]) : [];
  const cellsOf = (r, dim) => {
    const ids = who(r);
    return [el("td", {class: "trial" + (dim ? " muted" : ""), "data-trials": ids.join(","), "data-job": r ? r.job : ""}, ...ids.flatMap((t, i) => [i ? " " : "", el("a", {href: "#/trial/" + t}, "t" + t)]), r && r.pareto ? " \u2605" : "",
      r ? el("span", {class: "muted"}, " " + paramsText(r, r.match)) : ""),
      ...objs.map(o => el("td", {class: "num" + (dim ? " muted" : ""), "data-objective": o.name, "data-value": r && val(r, o) !== null ? val(r, o) : ""},
        r ? (grouped ? pm(val(r, o), r["objectives." + o.name + ".std"]) : fmt(val(r, o))) : ""))];
  };
  const head = el("tr", {}, el("th", {}, "matched by"), el("th", {}, "job " + a + " (baseline)"), ...objs.map(o => el("th", {}, o.name)),
    el("th", {}, "job " + b), ...objs.map(o => el("th", {}, o.name)), ...objs.map(o => el("th", {}, "\u0394 " + o.name + " (" + o.goal + ")")));
  const table = el("table", {id: "compare"}, head);
  const pairs = [];
  for (const [m, g] of matches) {
    const n = Math.max(g.a.length, g.b.length);
    for (let i = 0; i < n; i++) {
      const ra = g.a[i] || g.a[0], rb = g.b[i], dim = !g.a[i];
      pairs.push([ra, rb]);
      table.append(el("tr", {"data-match": m}, el("td", {class: "muted"}, i ? "" : m || "(no shared key)"), ...cellsOf(ra, dim), ...cellsOf(rb, false),
        ...objs.map(o => { const x = val(ra, o), y = val(rb, o);
          const d = typeof x === "number" && typeof y === "number" ? y - x : null;
          const better = d === null || d === 0 ? "" : (d > 0) === (o.goal === "max") ? "COMPLETED" : "FAILED";
          return el("td", {class: "num delta " + better, "data-objective": o.name, "data-delta": d === null ? "" : d}, d === null ? "" : (d > 0 ? "+" : "") + fmt(d)); })));
    }
  }
  status(rows.length + " rows of jobs " + a + " and " + b);
  const {body: metricNames} = await get("jobs/" + a + "/metrics");
  const sel = el("select", {id: "compare-metric"}, ...metricNames.map(m => el("option", {value: m}, m)));
  if (metricNames.includes(objs[0].name)) sel.value = objs[0].name;
  const div = el("div", {class: "curve", id: "compare-curve", "data-points": 0});
  main.append(el("p", {class: "muted"}, rows.length + " rows of jobs " + ja.name + " and " + jb.name + " matched by the values of the keys both sweep; \u0394 is job " + b + " minus the baseline (green: better)"),
    table, el("h2", {}, "Curves"), el("div", {class: "controls"}, el("label", {}, "metric ", sel), el("span", {class: "muted"}, "the first " + CURVE_TRIALS + " rows; baseline dashed" + (grouped ? "; mean \u00b1 std of each seed group" : ""))), div);
  const sets = [], seen = new Set();
  for (const [ra, rb] of pairs) for (const [r, job] of [[ra, a], [rb, b]]) {
    const ids = who(r), label = "j" + job + ":t" + ids.join("+t");
    if (!r || seen.has(label) || sets.length >= CURVE_TRIALS) continue;
    seen.add(label);
    sets.push({label, job, trials: ids, dashed: job === a});
  }
  const draw = () => bandGraph(div, sets, sel.value).catch(e => { div.textContent = e.message; });
  sel.addEventListener("change", draw);
  setTimeout(draw, 0); /* once the view is in the document: dygraphs measures its div */
  return null;
}

/* ----------------------------------------------------------------- trial */

/* A download link to a file of trial id's folder. */
function fileLink(id, rel, label) {
  return el("a", {href: API + "trials/" + id + "/file?path=" + encodeURIComponent(rel), download: ""}, label);
}

/* The trial's TensorBoard run and its last and best checkpoints. */
function runLinks(t) {
  const dl = el("dl", {id: "run-links"}), c = t.checkpoints || {}, tb = t.tensorboard;
  const set = ck => ck.rel === "" ? ck.files.map(f => fileLink(t.id, f.name, f.name + " (" + f.size + " B)"))
                                  : ck.files.map(f => ck.dir + "/" + f.name);
  const spaced = items => items.flatMap((x, i) => i ? [" \u00b7 ", x] : [x]);
  if (tb) dl.append(el("dt", {}, "TensorBoard run"), el("dd", {id: "tb-run"}, el("code", {}, tb.run),
    tb.exists ? "" : " (not written: tensorboard is off in bfd.yaml, or the trial has logged nothing yet)",
    el("br"), el("code", {class: "muted"}, "tensorboard --logdir " + tb.logdir)));
  dl.append(el("dt", {}, "last checkpoint"), el("dd", {id: "ckpt-last"}, c.last
    ? ["step " + (c.last.step === null ? "?" : c.last.step) + ": ", ...spaced(set(c.last))] : "none yet"));
  const b = c.best;
  dl.append(el("dt", {}, "best checkpoint"), el("dd", {id: "ckpt-best"}, !b ? "no value of the metric yet"
    : [b.metric + " " + fmt(b.value) + " at step " + b.step + ": ",
       ...(b.checkpoint ? spaced(set(b.checkpoint)) : ["not kept (a run keeps one set, overwritten at each save" + (c.last && c.last.step !== null ? "; the last is of step " + c.last.step : "") + ")"])]));
  return dl;
}

/* Clone: a one-trial job from trial id's resolved config with changes
 * (KEY=VALUE, one a line), as `bfctl clone tID --set ...`; opens the new job. */
function cloneForm(id) {
  const sets = el("textarea", {id: "clone-sets", rows: 2, cols: 36, placeholder: "KEY=VALUE, one a line (train.lr=0.001)"});
  return el("div", {class: "controls"}, sets, el("button", {id: "clone-trial", onclick: async () => {
    const q = sets.value.split("\n").map(l => l.trim()).filter(l => l).map(l => "set=" + encodeURIComponent(l)).join("&");
    try { const r = await post("trials/" + id + "/clone" + (q ? "?" + q : "")); status("job " + r.job + ": a clone of t" + id); location.hash = "#/job/" + r.job + "/trials"; }
    catch (e) { status(e.message, true); } }}, "clone"), el("span", {class: "muted"}, "a new one-trial job from this trial's config, with these changes (bfctl clone)"));
}

async function showTrial(main, id) {
  const {body: t} = await get("trials/" + id);
  const act = (what, label, cls) => el("button", {id: what + "-trial", class: cls || "", onclick: async () => {
    try { await post("trials/" + id + "/" + what); status(label + " t" + id); route(); } catch (e) { status(e.message, true); } }}, label);
  main.append(el("h1", {}, "Trial t" + t.id + " ", el("span", {class: "state " + t.state}, t.state)),
    el("p", {}, el("a", {href: "#/job/" + t.job}, "job " + t.job), " \u00b7 index " + t.idx + " \u00b7 attempts " + t.attempts + " \u00b7 " + t.dir,
      t.source ? [" \u00b7 cloned from ", el("a", {href: "#/trial/" + t.source, id: "source"}, "t" + t.source)] : ""),
    el("div", {class: "controls"}, act("stop", "stop"), act("resume", "resume"), act("cancel", "cancel", "danger")),
    cloneForm(id),
    el("h2", {}, "Parameters"), el("dl", {}, ...Object.entries(t.params).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, fmt(v))])),
    el("h2", {}, "Metrics (latest)"),
    el("table", {}, el("tr", {}, ...["metric", "step", "value", "min", "max"].map(h => el("th", {}, h))),
      ...t.metrics.map(m => el("tr", {}, el("td", {}, m.name), el("td", {class: "num"}, m.step), el("td", {class: "num"}, fmt(m.value)), el("td", {class: "num"}, fmt(m.min)), el("td", {class: "num"}, fmt(m.max))))),
    el("h2", {}, "Attempts"),
    el("table", {id: "attempts"}, el("tr", {}, ...["n", "started", "ended", "outcome", "message"].map(h => el("th", {}, h))),
      ...t.attempt_list.map(a => el("tr", {}, el("td", {}, a.n), el("td", {}, new Date(a.started * 1000).toLocaleString()),
        el("td", {}, a.ended ? new Date(a.ended * 1000).toLocaleString() : ""), el("td", {class: "state " + (a.outcome || "")}, a.outcome || ""), el("td", {class: "reason"}, a.message || "")))),
    el("h2", {}, "TensorBoard and checkpoints"), runLinks(t),
    el("h2", {}, "Files"),
    el("table", {id: "files"}, el("tr", {}, el("th", {}, "file"), el("th", {}, "bytes"), el("th", {}, "modified")),
      ...t.files.map(f => el("tr", {}, el("td", {}, fileLink(id, f.path, f.path)), el("td", {class: "num"}, f.size), el("td", {}, new Date(f.mtime * 1000).toLocaleString())))),
    el("h2", {}, "Log"));
  const log = el("pre", {class: "log", id: "log"});
  main.append(log, el("h2", {}, "Config"), el("pre", {}, t.config));
  let offset = 0, busy = false;
  async function tail() {
    if (busy) return;
    busy = true;
    try {
      for (let i = 0; i < 8; i++) {
        const {body} = await get("trials/" + id + "/log?offset=" + offset);
        if (body.size > offset + 262144 && offset === 0) offset = body.size - 65536; /* start near the end */
        else { log.textContent += body.data; offset = body.next; }
        if (body.next >= body.size) break;
      }
      log.scrollTop = log.scrollHeight;
    } catch (e) { status(e.message, true); }
    busy = false;
  }
  await tail();
  const timer = setInterval(tail, 2000);
  return () => clearInterval(timer);
}

/* --------------------------------------------------------------- cluster */

async function showCluster(main) {
  const {body: s} = await get("cluster");
  const running = s.running || [];
  main.append(el("h1", {}, "Cluster"),
    el("dl", {}, el("dt", {}, "launcher"), el("dd", {}, s.launcher), el("dt", {}, "slots"), el("dd", {}, (s.slots - s.slots_free) + " of " + s.slots + " in use"),
      el("dt", {}, "GPUs"), el("dd", {}, (s.gpus || []).length ? (s.gpus.length - (s.gpus_free || []).length) + " of " + s.gpus.length + " in use (" + s.gpus.join(", ") + ")" : "none"),
      el("dt", {}, "bfd"), el("dd", {}, "pid " + s.pid + ", " + s.home + ", up " + age(s.started))),
    el("h2", {}, "Running attempts"),
    el("table", {id: "running"}, el("tr", {}, ...["trial", "job", "attempt", "ranks", "gpus", "where"].map(h => el("th", {}, h))),
      ...running.map(r => el("tr", {}, el("td", {}, el("a", {href: "#/trial/" + r.trial}, "t" + r.trial)), el("td", {}, el("a", {href: "#/job/" + r.job}, r.job)),
        el("td", {}, r.attempt), el("td", {}, r.slots), el("td", {}, (r.gpus || []).join(", ")), el("td", {}, r.slurm_job || r.agent || r.pid || "")))));
  if (s.agents && s.agents.length)
    main.append(el("h2", {}, "Agents"), el("table", {}, el("tr", {}, ...Object.keys(s.agents[0]).map(k => el("th", {}, k))),
      ...s.agents.map(a => el("tr", {}, ...Object.values(a).map(v => el("td", {}, typeof v === "object" ? JSON.stringify(v) : fmt(v)))))));
  main.append(el("h2", {}, "Raw status"), el("pre", {}, JSON.stringify(s, null, 2)));
  const timer = setInterval(() => route(), 5000);
  return () => clearInterval(timer);
}

/* ----------------------------------------------------------------- route */

let routes = 0; /* route() calls so far: only the latest one's view is shown */

async function route() {
  const mine = ++routes;
  if (view) { view(); view = null; }
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const fresh = el("main", {id: "main"});
  let v = null;
  try {
    if (parts[0] === "job" && parts[1]) v = await showJob(fresh, Number(parts[1]));
    else if (parts[0] === "trial" && parts[1]) v = await showTrial(fresh, Number(parts[1]));
    else if (parts[0] === "cluster") v = await showCluster(fresh);
    else if (parts[0] === "compare") v = await showCompare(fresh, Number(parts[1]) || 0, Number(parts[2]) || 0, parts[3] === "grouped");
    else v = await showJobs(fresh);
  } catch (e) {
    fresh.append(el("p", {class: "error"}, e.message));
  }
  /* a later route (the address changed while this one loaded) wins */
  if (mine !== routes) { if (v) v(); return; }
  view = v;
  document.getElementById("main").replaceWith(fresh);
  document.body.setAttribute("data-view", parts[0] || "jobs");
}

window.addEventListener("hashchange", route);
route();
