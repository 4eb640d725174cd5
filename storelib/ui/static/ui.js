// The store browser's pages: plots (plotly.js, served by the server itself) and small helpers.
"use strict";

function data(id) {
  const el = document.getElementById(id);
  return el ? JSON.parse(el.textContent) : null;
}

const PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac"];
const LAYOUT = { margin: { l: 70, r: 70, t: 40, b: 50 }, legend: { orientation: "h" } };
const CONFIG = { displaylogo: false, responsive: true };

function plot(id, traces, layout) {
  const el = document.getElementById(id);
  if (!el) return;
  if (typeof Plotly === "undefined") {
    el.textContent = "plotly.js is not installed (pip install the pinned plotly of requirements.txt)";
    return;
  }
  if (layout.height) el.style.height = layout.height + "px";
  Plotly.newPlot(el, traces, Object.assign({}, LAYOUT, layout), CONFIG).then(() => { el.dataset.ready = "1"; });
}

function timeline() {
  const rows = data("timeline-data");
  if (!rows) return;
  const x = rows.map(b => b.committed);
  const label = rows.map(b => `${b.batch_seq}: ${b.batch_id} (${b.operation})`);
  plot("timeline", [
    { type: "bar", name: "messages", x, y: rows.map(b => b.messages), text: label, marker: { color: PALETTE[0] } },
    { type: "scatter", mode: "lines+markers", name: "bytes", x, y: rows.map(b => b.bytes), yaxis: "y2",
      text: label, marker: { color: PALETTE[1] } },
  ], { title: { text: "messages and bytes per batch" }, xaxis: { title: { text: "committed" } },
       yaxis: { title: { text: "messages" }, rangemode: "tozero" },
       yaxis2: { title: { text: "bytes" }, overlaying: "y", side: "right", rangemode: "tozero" } });
}

function queueSeries() {
  const s = data("queue-data");
  if (!s) return;
  plot("queue-time", [{ type: "scatter", mode: "lines+markers", name: "queue offset",
                        x: s.sampled.map(p => p.store_time), y: s.sampled.map(p => p.offset) }],
       { title: { text: `${s.topic}/${s.queue_id}: queue offset by store time (${s.sampled.length} samples)` },
         xaxis: { title: { text: "store time" } }, yaxis: { title: { text: "queue offset" } } });
  plot("queue-batches", [{ type: "scatter", mode: "lines+markers", line: { shape: "hv" }, name: "next offset",
                           x: s.per_batch.map(p => p.batch), y: s.per_batch.map(p => p.next_offset),
                           text: s.per_batch.map(p => p.operation) }],
       { title: { text: "next offset after each batch" }, xaxis: { title: { text: "batch" }, type: "category" },
         yaxis: { title: { text: "next offset" } } });
}

function segmentMap() {
  const segs = data("segments-data");
  if (!segs) return;
  const byBatch = new Map();
  segs.forEach(s => s.spans.forEach(p => {
    const key = `${p.batch_seq}: ${p.batch_id} (${p.operation})`;
    if (!byBatch.has(key)) byBatch.set(key, { base: [], x: [], y: [] });
    const t = byBatch.get(key);
    t.base.push(p.start); t.x.push(p.end - p.start); t.y.push(s.path);
  }));
  const traces = [...byBatch.entries()].map(([name, t], i) => ({
    type: "bar", orientation: "h", name, base: t.base, x: t.x, y: t.y,
    marker: { color: PALETTE[i % PALETTE.length] },
    hovertemplate: "%{y}<br>bytes %{base} – %{x}<extra>" + name + "</extra>" }));
  traces.push({ type: "scatter", mode: "markers", name: "valid end", x: segs.map(s => s.valid_bytes),
                y: segs.map(s => s.path), marker: { symbol: "line-ns-open", size: 18, color: "#000" } });
  plot("segment-map", traces, { title: { text: "which batch wrote which bytes of each segment" }, barmode: "overlay",
       xaxis: { title: { text: "byte offset in the segment" }, range: [0, segs[0].file_size] },
       yaxis: { autorange: "reversed", type: "category", automargin: true },
       margin: { l: 190, r: 30, t: 40, b: 50 }, legend: { orientation: "h", y: -0.35 },
       height: Math.max(300, 160 + 45 * segs.length) });
  const zx = [], lo = [], hi = [], names = [];
  segs.forEach(s => s.zones.forEach(z => { zx.push(s.base_offset + z.start); lo.push(z.min_store_time); hi.push(z.max_store_time); names.push(s.path); }));
  if (zx.length) {
    plot("zone-times", [
      { type: "scatter", mode: "markers", name: "earliest store time", x: zx, y: lo, text: names },
      { type: "scatter", mode: "markers", name: "latest store time", x: zx, y: hi, text: names }],
      { title: { text: "zone map: store times of each zone" }, xaxis: { title: { text: "commitlog offset of the zone" } },
        yaxis: { title: { text: "store time" } } });
  } else {
    document.getElementById("zone-times").remove();
  }
}

function findForm() {
  const form = document.getElementById("find-form");
  if (!form) return;
  const update = () => {
    const mode = form.querySelector("input[name=mode]:checked").value;
    form.querySelectorAll("label[data-modes]").forEach(l => {
      const on = l.dataset.modes.split(" ").includes(mode);
      l.classList.toggle("off", !on);
      l.querySelectorAll("input").forEach(i => { i.disabled = !on; });
    });
  };
  form.querySelectorAll("input[name=mode]").forEach(r => r.addEventListener("change", update));
  update();
}

function messageBody() {
  const pre = document.getElementById("body-text");
  if (pre) {
    const bin = atob(pre.dataset.b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    pre.textContent = new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes);
  }
  const show = (text) => {
    document.getElementById("body-text-box").hidden = !text;
    document.getElementById("body-hex-box").hidden = text;
  };
  const t = document.getElementById("show-text"), h = document.getElementById("show-hex");
  if (t) t.addEventListener("click", e => { e.preventDefault(); show(true); });
  if (h) h.addEventListener("click", e => { e.preventDefault(); show(false); });
}

document.addEventListener("DOMContentLoaded", () => {
  timeline(); queueSeries(); segmentMap(); findForm(); messageBody();
  document.body.dataset.ready = "1";
});
