// The elasticps status page: fetches /api/status and draws everything from it (no library).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fde", "#1f9d55", "#d98a00", "#d64545", "#7a4fd6", "#0f9bb0"];
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

// series: [{name, color, points: [[x, y], ...]}]; opts: {xFormat, yFormat, markers, xInt}
function lineChart(svg, series, opts) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
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
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (opts.markers) { const padX = (x1 - x0) * 0.06; x0 -= padX; x1 += padX; }
  if (opts.zero && y0 > 0) y0 = 0;
  const pad = (y1 - y0) * 0.08 || Math.abs(y1) * 0.1 || 1;
  y1 += pad; if (!(opts.zero && y0 === 0)) y0 -= pad;
  const X = (x) => m.l + (x - x0) / (x1 - x0) * (width - m.l - m.r);
  const Y = (y) => height - m.b - (y - y0) / (y1 - y0) * (height - m.t - m.b);
  for (const v of niceTicks(y0, y1, 4)) {
    svg.appendChild(el("svg:line", { x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v), class: "grid" }));
    svg.appendChild(el("svg:text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" },
                       (opts.yFormat || String)(v)));
  }
  let xticks = niceTicks(x0, x1, 5);
  if (opts.xInt) xticks = xticks.filter((v) => Number.isInteger(v));
  for (const v of xticks) {
    svg.appendChild(el("svg:text", { x: X(v), y: height - m.b + 16, "text-anchor": "middle" },
                       (opts.xFormat || String)(v)));
  }
  svg.appendChild(el("svg:line", { x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b,
                                   class: "axis" }));
  series.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    if (s.points.length > 1) {
      svg.appendChild(el("svg:polyline", {
        points: s.points.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" "),
        fill: "none", stroke: color, "stroke-width": 2, "stroke-linejoin": "round",
        "data-series": s.name }));
    }
    if (opts.markers || s.points.length === 1) {
      for (const p of s.points) {
        const dot = el("svg:circle", { cx: X(p[0]), cy: Y(p[1]), r: 3.5, fill: color });
        dot.appendChild(el("svg:title", {}, `${s.name}: ${(opts.yFormat || String)(p[1])}`));
        svg.appendChild(dot);
      }
    }
  });
  if (series.length > 1 || opts.legend) {
    let x = m.l;
    series.forEach((s, i) => {
      const color = s.color || COLORS[i % COLORS.length];
      svg.appendChild(el("svg:rect", { x, y: height - 14, width: 10, height: 10, fill: color }));
      const label = el("svg:text", { x: x + 14, y: height - 5 }, s.name);
      svg.appendChild(label);
      x += 24 + 7 * s.name.length;
    });
  }
}

function drawCharts(doc) {
  const series = doc.series || [];
  const t0 = doc.started || (series.length ? series[0].t : 0);
  const over = (key) => series.filter((p) => p[key] !== null && p[key] !== undefined)
                              .map((p) => [p.t - t0, p[key]]);
  const timeAxis = { xFormat: duration, empty: "collecting samples\u2026" };
  lineChart($("chart-speed"), [{ name: "samples/s", points: over("samples_per_s") }],
            { ...timeAxis, zero: true, yFormat: (v) => num(v) });
  lineChart($("chart-loss"), [{ name: "loss", color: COLORS[3], points: over("loss") }],
            { ...timeAxis, yFormat: (v) => Number(v).toPrecision(3) });
  const passes = doc.pass_metrics || [];
  const keys = new Set();
  passes.forEach((p) => Object.keys(p).forEach((k) => keys.add(k)));
  const skip = new Set(["pass", "samples", "test_samples", "test_eval_s", "cost", "test_cost"]);
  let names = [...keys].filter((k) => k.startsWith("test_") && !skip.has(k)).sort();
  if (!names.length) names = [...keys].filter((k) => !skip.has(k)).sort();
  lineChart($("chart-pass"), names.map((k) => ({
    name: k, points: passes.filter((p) => typeof p[k] === "number").map((p) => [p.pass + 1, p[k]]),
  })), { markers: true, legend: true, xInt: true, xFormat: (v) => "pass " + v,
         yFormat: (v) => Number(v).toPrecision(3), empty: "no pass has ended yet" });
}

// -- tables ---------------------------------------------------------------------------------

function fillTable(id, rows, cells, rowClass) {
  const body = $(id).tBodies[0];
  while (body.firstChild) body.removeChild(body.firstChild);
  for (const row of rows) {
    const tr = el("tr", rowClass ? { class: rowClass(row) } : {});
    for (const [value, cls] of cells(row)) {
      const td = el("td", cls ? { class: cls } : {});
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

function state(up, text) {
  const span = el("span");
  span.appendChild(el("span", { class: "dot " + (up ? "up" : "down") }));
  span.appendChild(document.createTextNode(text));
  return span;
}

function drawTables(doc) {
  fillTable("trainers", doc.trainers || [], (t) => [
    [t.name], [t.process], [state(t.live, t.live ? "running" : "gone")],
    [t.tasks && t.tasks.length ? t.tasks.join(", ") : "\u2013"],
    [num(t.samples), "num"], [num(t.samples_per_s), "num"],
    [t.loss === null || t.loss === undefined ? "\u2013" : num(t.loss, 4), "num"],
    [num(t.restarts), "num"],
    [t.last_seen_s === null || t.last_seen_s === undefined ? "\u2013" : duration(t.last_seen_s) + " ago", "num"],
  ], (t) => (t.live ? "" : "gone"));
  fillTable("pservers", doc.pservers || [], (p) => [
    [p.name], [p.address || "\u2013"], [state(p.up, p.up ? "serving" : "down")],
    [num(p.rows), "num"], [bytes(p.bytes), "num"],
    [p.checkpoint_age_s === null || p.checkpoint_age_s === undefined ? "\u2013" : duration(p.checkpoint_age_s), "num"],
    [num(p.push_rate, 1), "num"], [num(p.duplicates), "num"], [num(p.restarts), "num"],
  ], (p) => (p.up ? "" : "gone"));
  fillTable("failed", doc.failure_log || [], (f) => [[f.pass + 1], [f.task], [f.reason, "wrap"]]);
  const list = $("events");
  while (list.firstChild) list.removeChild(list.firstChild);
  const events = (doc.events || []).slice().reverse();
  for (const e of events) {
    const li = el("li");
    li.appendChild(el("time", { datetime: new Date(e.time * 1000).toISOString() }, clock(e.time)));
    li.appendChild(el("span", { class: "kind " + e.kind }, e.kind.replace("_", " ")));
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
  badge.textContent = doc.state;
  badge.className = "badge " + doc.state;
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
  $("eta").textContent = doc.done ? "done" : duration(p.eta_s);
  const pct = Math.round(1000 * (p.fraction || 0)) / 10;
  $("bar").style.width = pct + "%";
  $("pct").textContent = pct + "%";
  const c = doc.counts || {};
  $("counts").textContent = doc.counts
    ? `todo ${c.todo || 0} \u00b7 pending ${c.pending || 0} \u00b7 done ${c.done || 0} \u00b7 failed ${c.failed || 0}`
      + ` \u00b7 ${num(doc.samples_total)} samples trained \u00b7 ${num(doc.failures_total)} failed attempts`
      + (doc.reconciling ? " \u00b7 reconciling with the pservers" : "")
    : "waiting for a trainer to name the dataset";
  const banner = $("banner");
  if (doc.job_failed_reason) {
    banner.hidden = false;
    banner.textContent = "The job failed: " + doc.job_failed_reason;
  } else {
    banner.hidden = true;
  }
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

function render(doc) {
  drawSummary(doc);
  drawCharts(doc);
  drawTables(doc);
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
