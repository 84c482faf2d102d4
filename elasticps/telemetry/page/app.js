// The elasticps status page: fetches /api/status and draws everything from it (no library).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fde", "#1f9d55", "#d98a00", "#d64545", "#7a4fd6", "#0f9bb0"];
const TRAINER_COLORS = ["#8fb3f0", "#8fd1ab", "#f0c27a", "#eaa0a0", "#bba6ea", "#8fd3de"];
const ROW_STATES = {  // a row's state -> its dot: running and done are fine, the rest is not
  running: "up", serving: "up", finished: "done", stopped: "done",
  left: "warn", down: "down", failed: "down",
};
const OVER = ["succeeded", "failed", "interrupted"];
let timer = null;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                      : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "\u2013";
  if (digits !== undefined) return Number(v).toFixed(digits);
  return Math.round(v).toLocaleString("en-US");
}

function bytes(v) {
  if (v === null || v === undefined) return "\u2013";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + units[i];
}

function duration(s) {
  if (s === null || s === undefined) return "\u2013";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const two = (x) => String(x).padStart(2, "0");
  return h ? `${h}:${two(m)}:${two(sec)}` : `${m}:${two(sec)}`;
}

function natural(a, b) {
  return a.localeCompare(b, "en", { numeric: true });
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

// -- charts ---------------------------------------------------------------------------------

function niceTicks(lo, hi, count) {
  if (hi === lo) { hi = lo + 1; }
  const span = hi - lo, step0 = span / count;
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => span / s <= count) || mag * 10;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(v);
  return ticks;
}

// series: [{name, color, width, points: [[x, y], ...]}];
// opts: {xFormat, yFormat, markers, labels, xInt, zero, empty}
function lineChart(svg, series, opts) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  drawLegend(svg.nextElementSibling, series.length > 1 || opts.legend ? series : []);
  const width = svg.clientWidth || 400, height = svg.clientHeight || 220;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const pts = series.flatMap((s) => s.points);
  svg.dataset.points = String(pts.length);
  if (!pts.length) {
    svg.appendChild(el("svg:text", { x: width / 2, y: height / 2, "text-anchor": "middle",
                                      class: "empty" }, opts.empty || "no data yet"));
    return;
  }
  const m = { l: 56, r: 12, t: 10, b: 40 };
  let xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const xmin = x0, xmax = x1;
  if (y0 === 0 && y1 === 0) y1 = 1;  // all zero: a flat line at the bottom, not mid-chart
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (opts.markers) { const padX = (x1 - x0) * 0.06; x0 -= padX; x1 += padX; }
  if (opts.zero && y0 > 0) y0 = 0;
  const pad = (y1 - y0) * 0.08 || Math.abs(y1) * 0.1 || 1;
  y1 += pad; if (!(opts.zero && y0 === 0)) y0 -= pad;
  const X = (x) => m.l + (x - x0) / (x1 - x0) * (width - m.l - m.r);
  const Y = (y) => height - m.b - (y - y0) / (y1 - y0) * (height - m.t - m.b);
  const yLabels = new Set();
  for (const v of niceTicks(y0, y1, 4)) {
    const label = (opts.yFormat || String)(v);
    if (yLabels.has(label)) continue;
    yLabels.add(label);
    svg.appendChild(el("svg:line", { x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v), class: "grid" }));
    svg.appendChild(el("svg:text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" }, label));
  }
  let xticks = niceTicks(x0, x1, 5);
  // whole passes, and only those with data (no "pass 0" beside the first pass)
  if (opts.xInt) xticks = xticks.filter((v) => Number.isInteger(v) && v >= xmin && v <= xmax);
  const shown = new Set();  // a short span gives ticks that read alike: each label once
  for (const v of xticks) {
    const label = (opts.xFormat || String)(v);
    if (shown.has(label)) continue;
    shown.add(label);
    svg.appendChild(el("svg:text", { x: X(v), y: height - m.b + 16, "text-anchor": "middle" },
                       label));
  }
  svg.appendChild(el("svg:line", { x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b,
                                   class: "axis" }));
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    if (s.points.length > 1) {
      svg.appendChild(el("svg:polyline", {
        points: s.points.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" "),
        fill: "none", stroke: color, "stroke-width": s.width || 2, "stroke-linejoin": "round",
        "data-series": s.name }));
    }
    if (opts.markers || s.points.length === 1) {
      for (const p of s.points) {
        const text = `${s.name}: ${(opts.yFormat || String)(p[1])}`;
        const dot = el("svg:circle", { cx: X(p[0]), cy: Y(p[1]), r: 3.5, fill: color });
        dot.appendChild(el("svg:title", {}, text));
        svg.appendChild(dot);
        if (opts.labels && s.points.length <= 12) {  // a value beside each of a few points
          const right = X(p[0]) < width / 2;
          svg.appendChild(el("svg:text", { x: X(p[0]) + (right ? 7 : -7), y: Y(p[1]) - 6,
                                            "text-anchor": right ? "start" : "end",
                                            class: "value-label", fill: color }, text));
        }
      }
    }
  });
}

// The chart's legend, below it in HTML (it wraps however many series there are).
function drawLegend(box, series) {
  if (!box) return;
  while (box.firstChild) box.removeChild(box.firstChild);
  series.forEach((s, i) => {
    const item = el("span", { class: "item" });
    item.appendChild(el("span", { class: "swatch",
                                  style: `background:${s.color || COLORS[i % COLORS.length]}` }));
    item.appendChild(document.createTextNode(s.name));
    box.appendChild(item);
  });
}

function drawCharts(doc) {
  const series = doc.series || [];
  const t0 = doc.started || (series.length ? series[0].t : 0);
  const over = (key) => series.filter((p) => p[key] !== null && p[key] !== undefined)
                              .map((p) => [p.t - t0, p[key]]);
  // each trainer's own series (the document carries them for up to 16 trainers)
  const perTrainer = (key) => {
    const names = new Set();
    series.forEach((p) => Object.keys(p[key] || {}).forEach((n) => names.add(n)));
    return [...names].sort(natural).map((n, i) => ({
      name: n, width: 1.2, color: TRAINER_COLORS[i % TRAINER_COLORS.length],
      points: series.filter((p) => p[key] && typeof p[key][n] === "number")
                    .map((p) => [p.t - t0, p[key][n]]),
    }));
  };
  const timeAxis = { xFormat: duration,
                     empty: doc.live ? "collecting samples\u2026" : "no samples were recorded" };
  const speedByTrainer = perTrainer("trainer_samples_per_s");
  lineChart($("chart-speed"), [{ name: "job", points: over("samples_per_s") },
                               ...(speedByTrainer.length > 1 ? speedByTrainer : [])],
            { ...timeAxis, zero: true,
              yFormat: (v) => (v >= 100 ? num(v) : String(Number(v.toPrecision(2)))) });
  const lossByTrainer = perTrainer("trainer_loss");
  lineChart($("chart-loss"), [{ name: "mean", color: COLORS[3], points: over("loss") },
                              ...(lossByTrainer.length > 1 ? lossByTrainer : [])],
            { ...timeAxis, yFormat: (v) => Number(v).toPrecision(3) });
  const passes = doc.pass_metrics || [];
  const keys = new Set();
  passes.forEach((p) => Object.keys(p).forEach((k) => keys.add(k)));
  const skip = new Set(["pass", "samples", "test_samples", "test_eval_s", "cost", "test_cost"]);
  let names = [...keys].filter((k) => k.startsWith("test_") && !skip.has(k)).sort();
  if (!names.length) names = [...keys].filter((k) => !skip.has(k)).sort();
  lineChart($("chart-pass"), names.map((k) => ({
    name: k, points: passes.filter((p) => typeof p[k] === "number").map((p) => [p.pass + 1, p[k]]),
  })), { markers: true, labels: true, legend: true, xInt: true, xFormat: (v) => "pass " + v,
         yFormat: (v) => Number(v).toPrecision(3), empty: "no pass has ended yet" });
}

// A stream's progressive validation: each partition's AUC over its partition time (its index
// where partitions have no time); a partition still training is drawn apart, as it moves.
function drawProgressive(doc) {
  const scores = (doc.progressive || []).filter((p) => typeof p.auc === "number");
  $("progressive-card").hidden = !(doc.progressive || []).length;
  if ($("progressive-card").hidden) return;
  const timed = scores.every((p) => typeof p.time === "number");
  const x = (p, i) => (timed ? p.time : i + 1);
  const at = scores.map((p, i) => [x(p, i), p.auc, p.final]);
  const day = (t) => new Date(t * 1000).toISOString().slice(5, 16).replace("T", " ");
  lineChart($("chart-progressive"), [
    { name: "trained partitions", points: at.filter((p) => p[2]).map((p) => [p[0], p[1]]) },
    { name: "training", color: COLORS[2], points: at.filter((p) => !p[2]).map((p) => [p[0], p[1]]) },
  ], { markers: true, legend: true, xFormat: timed ? day : (v) => "partition " + v,
       yFormat: (v) => Number(v).toPrecision(3), empty: "no partition was scored yet" });
}

// -- tables ---------------------------------------------------------------------------------

function fillTable(id, rows, cells, rowClass) {
  const body = $(id).tBodies[0];
  const labels = [...$(id).tHead.rows[0].cells].map((c) => c.textContent);
  while (body.firstChild) body.removeChild(body.firstChild);
  for (const row of rows) {
    const tr = el("tr", rowClass ? { class: rowClass(row) } : {});
    for (const [i, [value, cls]] of cells(row).entries()) {
      const td = el("td", { "data-label": labels[i], ...(cls ? { class: cls } : {}) });
      if (value instanceof Node) td.appendChild(value); else td.textContent = value;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  if (!rows.length) {
    const tr = el("tr");
    tr.appendChild(el("td", { colspan: $(id).tHead.rows[0].cells.length, class: "muted" }, "none"));
    body.appendChild(tr);
  }
}

function rowState(name, stage) {
  const span = el("span", { class: "row-state" });
  span.appendChild(el("span", { class: "dot " + (ROW_STATES[name] || "down") }));
  span.appendChild(document.createTextNode(stage ? `${name}: ${stage}` : name));
  return span;
}

function ms(v) {
  return v === null || v === undefined ? "\u2013" : Number(v).toFixed(v < 10 ? 2 : 1);
}

function drawTables(doc) {
  fillTable("trainers", doc.trainers || [], (t) => [
    [t.name], [t.process], [rowState(t.state, t.stage)],
    [t.tasks && t.tasks.length ? t.tasks.join(", ") : "\u2013"],
    [num(t.samples), "num"], [num(t.samples_per_s), "num"],
    [t.loss === null || t.loss === undefined ? "\u2013" : num(t.loss, 4), "num"],
    [num(t.restarts), "num"],
    [t.last_seen_s === null || t.last_seen_s === undefined ? "\u2013" : duration(t.last_seen_s) + " ago", "num"],
  ], (t) => (t.state === "running" ? "" : "gone"));
  fillTable("pservers", doc.pservers || [], (p) => [
    [p.name], [p.address || "\u2013"], [rowState(p.state)],
    [num(p.rows), "num"], [bytes(p.bytes), "num"],
    [ms(p.push_ms), "num"], [ms(p.pull_ms), "num"],
    [p.cpu_percent === null || p.cpu_percent === undefined ? "\u2013" : num(p.cpu_percent) + "%", "num"],
    [bytes(p.memory_bytes), "num"],
    [p.checkpoint_age_s === null || p.checkpoint_age_s === undefined ? "\u2013" : duration(p.checkpoint_age_s), "num"],
    [num(p.push_rate, 1), "num"], [num(p.duplicates), "num"], [num(p.restarts), "num"],
  ], (p) => (p.state === "serving" ? "" : "gone"));
  fillTable("failed", doc.failure_log || [], (f) => [[f.pass + 1], [f.task], [f.reason, "wrap"]]);
  const list = $("events");
  while (list.firstChild) list.removeChild(list.firstChild);
  const events = (doc.events || []).slice().reverse();
  for (const e of events) {
    const li = el("li");
    li.appendChild(el("time", { datetime: new Date(e.time * 1000).toISOString() }, clock(e.time)));
    const ended = e.kind === "job" && /^the job (failed|interrupted)/.test(e.message);
    li.appendChild(el("span", { class: "kind " + e.kind + (ended ? " bad" : "") },
                      e.kind.replace("_", " ")));
    li.appendChild(el("span", {}, e.message));
    list.appendChild(li);
  }
  if (!events.length) list.appendChild(el("li", { class: "muted" }, "nothing has happened yet"));
}

// -- summary --------------------------------------------------------------------------------

function drawSummary(doc) {
  document.title = `${doc.job} \u00b7 ${doc.state} \u00b7 elasticps`;
  $("job").textContent = doc.job;
  const badge = $("state");
  // every pass is done, but trainers' scripts go on (export, scoring): the job is not over
  const finishing = doc.live && doc.state === "succeeded" && (doc.live_trainers || []).length;
  badge.textContent = finishing ? "training done" : doc.state;
  badge.className = "badge " + (finishing ? "running" : doc.state);
  const live = $("live");
  live.textContent = doc.live ? "live" : "finished job (saved " + clock(doc.updated) + ")";
  live.className = "live" + (doc.live ? " on" : "");
  const parts = [];
  if (doc.master) parts.push("master " + doc.master);
  if (doc.dataset) parts.push("dataset " + doc.dataset);
  if (doc.updated) parts.push("updated " + clock(doc.updated));
  $("subtitle").textContent = parts.join(" \u00b7 ");
  const p = doc.progress || {};
  $("pass").textContent = doc.pass === null || doc.pass === undefined ? "\u2013"
    : `${Math.min(doc.pass + 1, doc.num_passes || doc.pass + 1)} / ${doc.num_passes}`;
  $("tasks").textContent = p.tasks_total ? `${p.tasks_done} / ${p.tasks_total}` : "\u2013";
  $("speed").textContent = num(doc.samples_per_s);
  $("loss").textContent = doc.loss === null || doc.loss === undefined ? "\u2013" : num(doc.loss, 4);
  $("ntrainers").textContent = String((doc.live_trainers || []).length);
  $("elapsed").textContent = duration(p.elapsed_s);
  $("eta").textContent = doc.state === "succeeded" ? "done"
    : OVER.includes(doc.state) ? "\u2013" : duration(p.eta_s);
  const activity = $("activity");
  activity.hidden = !doc.activity;
  activity.textContent = doc.activity || "";
  const pct = Math.round(1000 * (p.fraction || 0)) / 10;
  $("bar").style.width = pct + "%";
  $("pct").textContent = pct + "%";
  const c = doc.counts || {};
  $("counts").textContent = doc.counts
    ? `todo ${c.todo || 0} \u00b7 pending ${c.pending || 0} \u00b7 done ${c.done || 0} \u00b7 failed ${c.failed || 0}`
      + ` \u00b7 ${num(doc.samples_total)} samples trained \u00b7 ${num(doc.failures_total)} failed attempts`
      + (doc.reconciling ? " \u00b7 reconciling with the pservers" : "")
      + streamLine(doc.stream)
    : "waiting for a trainer to name the dataset";
  drawFailure(doc);
  const footer = $("footer");
  while (footer.firstChild) footer.removeChild(footer.firstChild);
  footer.appendChild(document.createTextNode("JSON: "));
  footer.appendChild(el("a", { href: "api/status" }, "api/status"));
  if (doc.live) {
    footer.appendChild(document.createTextNode(" \u00b7 Prometheus: "));
    footer.appendChild(el("a", { href: "metrics" }, "metrics"));
  }
  const urls = doc.metrics_urls || {};
  const count = Object.values(urls).reduce((n, byName) => n + Object.keys(byName).length, 0);
  if (count) footer.appendChild(document.createTextNode(` \u00b7 ${count} role metrics endpoints (metrics_urls)`));
}

// A stream's progress: partitions appended, the newest trained through and its age (the lag),
// those waiting, and whether it ended.
function streamLine(stream) {
  if (!stream) return "";
  const lag = stream.lag_s === null || stream.lag_s === undefined ? ""
    : ` (lag ${duration(stream.lag_s)})`;
  return ` \u00b7 stream: ${stream.partitions} partitions`
    + (stream.trained_through ? `, trained through ${stream.trained_through}${lag}` : "")
    + `, ${stream.waiting} waiting`
    + (stream.ended ? ", ended" : stream.end_marker ? ", end marker seen" : "")
    + (stream.error ? ` \u00b7 ${stream.error}` : "");
}

// Why a job failed: the reason, and the failing process's last traceback (from its log).
function drawFailure(doc) {
  const box = $("failure");
  const failure = doc.failure || {};
  const reason = doc.job_failed_reason || failure.reason;
  box.hidden = !(OVER.includes(doc.state) && doc.state !== "succeeded" && reason);
  $("failure-reason").textContent = `The job ${doc.state}: ${reason || ""}`
    + (failure.log ? ` \u00b7 last lines of ${failure.log}:` : "");
  $("traceback").textContent = failure.traceback || "";
  $("traceback").hidden = !failure.traceback;
  $("banner").hidden = true;
}

// The job's result (job/result: the script's own, or the last pass's metrics), labelled.
const FIRST = ["auc", "best_auc", "rmse", "accuracy", "perplexity", "test_auc", "test_rmse",
               "test_accuracy", "test_perplexity"];
function drawResult(doc) {
  const result = doc.result || {};
  const keys = Object.keys(result).filter((k) => {
    const v = result[k];
    return typeof v === "number" || (typeof v === "string" && v.length <= 200)
      || (Array.isArray(v) && v.length && v.every((x) => typeof x === "number"));
  });
  keys.sort((a, b) => (FIRST.includes(a) ? FIRST.indexOf(a) : 99)
                      - (FIRST.includes(b) ? FIRST.indexOf(b) : 99) || a.localeCompare(b));
  $("result-card").hidden = !keys.length;
  const list = $("result");
  while (list.firstChild) list.removeChild(list.firstChild);
  const show = (v) => (typeof v !== "number" ? v
    : Number.isInteger(v) ? v.toLocaleString("en-US") : Number(v).toPrecision(4));
  for (const k of keys) {
    const v = result[k];
    const item = el("div", { class: "metric" + (FIRST.includes(k) ? " headline" : "") });
    item.appendChild(el("dt", {}, k.replaceAll("_", " ")));
    item.appendChild(el("dd", {}, Array.isArray(v) ? v.map(show).join(", ") : show(v)));
    list.appendChild(item);
  }
}

// A local job's role logs: a button per process, the chosen one's last lines.
let logChosen = null;
let logNames = null;
async function drawLogs(doc) {
  if (logNames === null || doc.live) {
    try {
      const response = await fetch("api/logs", { cache: "no-store" });
      logNames = response.ok ? (await response.json()).logs || [] : [];
    } catch (err) {
      logNames = [];
    }
  }
  $("logs-card").hidden = !logNames.length;
  if (!logNames.length) return;
  if (!logChosen || !logNames.includes(logChosen)) {
    const failed = ((doc.failure || {}).process || "").replace(" ", "-");
    logChosen = logNames.includes(failed) ? failed : logNames[0];
  }
  const box = $("log-names");
  while (box.firstChild) box.removeChild(box.firstChild);
  for (const name of logNames) {
    const button = el("button", { type: "button", class: name === logChosen ? "chosen" : "" },
                      name);
    button.addEventListener("click", () => { logChosen = name; drawLogs({ ...doc, live: false }); });
    box.appendChild(button);
  }
  try {
    const response = await fetch("api/logs/" + encodeURIComponent(logChosen),
                                 { cache: "no-store" });
    $("log").textContent = response.ok ? await response.text() : "";
  } catch (err) {
    $("log").textContent = "";
  }
}

function render(doc) {
  drawSummary(doc);
  drawResult(doc);
  drawCharts(doc);
  drawProgressive(doc);
  drawTables(doc);
  drawLogs(doc);
  document.body.dataset.state = doc.state;
  document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
}

async function refresh() {
  let doc = null;
  try {
    const response = await fetch("api/status", { cache: "no-store" });
    if (response.ok) doc = await response.json();
  } catch (err) {
    doc = null;
  }
  if (doc === null) {
    const banner = $("banner");
    banner.hidden = false;
    banner.textContent = "The status server does not answer; the job may have ended. "
      + "A finished job's page: elasticps ui --workdir WORKDIR";
    clearInterval(timer);  // ask again, less often
    timer = setInterval(refresh, 10000);
    return;
  }
  render(doc);
  if (!doc.live || doc.done) {
    clearInterval(timer);
    timer = null;
  }
}

window.addEventListener("resize", () => refresh());
refresh();
timer = setInterval(refresh, 2000);
