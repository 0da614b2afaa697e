// needle viz: the list of entries (schedules, captured steps) and their kernels; the
// selected schedule at each stage (Graphviz SVG drawn by the server), stepped with the
// arrow keys; a node's or a kernel's details; the kernel's code; a profiled step's
// timeline.  Plain DOM, no framework, nothing loaded from elsewhere.
"use strict";
const STAGES = ["autograd", "graph", "folded", "fused", "kernels"];
const TITLES = { autograd: "autograd", graph: "graph", folded: "after view folding", fused: "fused groups", kernels: "kernels" };
const TEXT_LANGUAGE = { autograd: "graph", graph: "graph", folded: "graph", fused: "graph", kernels: "kir" };
const $ = (id) => document.getElementById(id);
const esc = (s) => Highlight.escape(String(s === undefined || s === null ? "" : s));

let rec = null;                 // /api/recording
const stageData = {};           // "sid/stage" -> {text, nodes, ...}
const codeData = {};            // "sid/k" -> code
const sel = { item: null, shot: 0, stage: "fused", kernel: null, node: null, full: false, text: false, tab: "loop_ir", zoom: null,
  span: "step" };
let drawn = 0;                  // (a later picture request wins over an earlier one)

async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(url + ": " + r.status + " " + (await r.text()));
  return r.json();
}

// ---- state helpers -------------------------------------------------------------------------
const itemById = (id) => rec.items.find((it) => it.id === id);
const currentItem = () => itemById(sel.item);
const currentSid = () => currentItem().shots[sel.shot];
const currentShot = () => rec.shots[currentSid()];

function countText(it) {
  if (it.kind === "step") return it.count <= 1 ? "captured" : `1 capture + ${it.count - 1} replay${it.count === 2 ? "" : "s"}`;
  return `${it.count} run${it.count === 1 ? "" : "s"}`;
}

function kernelTime(shotIndex, call) {  // ms of a kernel in the item's profiled run, or null
  const tl = currentItem().timeline;
  if (!tl) return null;
  const seg = tl.segments.find((s) => s.lane === "kernels" && s.shot === shotIndex && s.call === call);
  return seg ? seg.dur : null;
}

const fmtMs = (ms) => (ms >= 1 ? ms.toFixed(2) + " ms" : (ms * 1000).toFixed(1) + " us");

// ---- the list ------------------------------------------------------------------------------
function renderList() {
  const nav = $("list");
  nav.innerHTML = "";
  for (const it of rec.items) {
    const div = document.createElement("div");
    div.className = "item" + (it.id === sel.item ? " selected" : "");
    div.dataset.item = it.id;
    const kernels = it.shots.reduce((n, sid) => n + rec.shots[sid].kernels.length, 0);
    div.innerHTML = `<span class="badge">${esc(countText(it))}</span><div class="title">${esc(it.title)}</div>` +
      (it.kind === "step" ? `<div class="muted">${it.shots.length} schedule${it.shots.length === 1 ? "" : "s"}, ${kernels} kernels</div>` : "") +
      `<div class="where" title="${esc(it.where)}">${esc(it.where)}</div>`;
    div.addEventListener("click", () => selectItem(it.id, 0));
    nav.appendChild(div);
    if (it.id !== sel.item) continue;
    if (it.shots.length > 1) {
      const shots = document.createElement("div");
      shots.className = "shots";
      it.shots.forEach((sid, s) => {
        const b = document.createElement("button");
        b.textContent = `schedule ${s + 1}`;
        b.disabled = s === sel.shot;
        b.addEventListener("click", () => selectItem(it.id, s));
        shots.appendChild(b);
      });
      nav.appendChild(shots);
    }
    const ul = document.createElement("ul");
    ul.className = "kernels";
    currentShot().kernels.forEach((k, i) => {
      const li = document.createElement("li");
      li.className = "kernel" + (i === sel.kernel ? " selected" : "");
      li.dataset.kernel = i;
      const t = kernelTime(sel.shot, i);
      li.innerHTML = `<span class="swatch" style="background:${k.color}"></span><span class="name" title="${esc(k.name)}">` +
        `${i}: ${esc(k.name)}</span><span class="time">${t === null ? "" : fmtMs(t)}</span>`;
      li.addEventListener("click", (e) => { e.stopPropagation(); selectKernel(i); });
      ul.appendChild(li);
    });
    nav.appendChild(ul);
  }
}

function selectItem(id, shot) {
  sel.item = id;
  sel.shot = shot || 0;
  sel.kernel = null;
  sel.node = null;
  renderList();
  renderTimeline();
  showKernelCode();
  $("details").innerHTML = '<p class="muted">Click a node of the picture, or a kernel in the list.</p>';
  showStage();
}

// ---- the stage -----------------------------------------------------------------------------
function renderStageBar() {
  const bar = $("stages");
  bar.innerHTML = "";
  STAGES.forEach((st, i) => {
    if (i) bar.insertAdjacentHTML("beforeend", '<span class="arrow">&rarr;</span>');
    const b = document.createElement("button");
    b.className = "stage" + (st === sel.stage ? " active" : "");
    b.dataset.stage = st;
    b.textContent = TITLES[st];
    b.addEventListener("click", () => { sel.stage = st; showStage(); });
    bar.appendChild(b);
  });
}

async function stageOf(sid, stage) {
  const key = sid + "/" + stage;
  if (!stageData[key]) stageData[key] = await getJSON(`/api/stage?shot=${sid}&stage=${stage}`);
  return stageData[key];
}

async function showStage() {
  renderStageBar();
  const sid = currentSid();
  const meta = currentShot().stages[sel.stage];
  const what = sel.stage === "autograd" ? "Tensors" : sel.stage === "kernels" ? "kernels" : "nodes";
  let info = `${meta.count} ${what}`;
  if (meta.collapsed && !(sel.full && meta.has_full)) info += sel.stage === "autograd" ? " (repeated modules as boxes)" : " (one box per kernel)";
  $("stageinfo").textContent = info;
  $("full").disabled = !meta.has_full;
  const ticket = ++drawn;
  sel.zoom = null;
  const graph = $("graph");
  graph.dataset.stage = sel.stage;
  graph.dataset.ready = "0";
  graph.innerHTML = '<div class="busy">drawing…</div>';
  const data = await stageOf(sid, sel.stage);
  if (ticket !== drawn) return;
  if (sel.text || !meta.has_picture) {
    graph.innerHTML = `<pre>${Highlight.html(data.text, TEXT_LANGUAGE[sel.stage])}</pre>`;
    graph.dataset.ready = "1";
    return;
  }
  const full = sel.full && meta.has_full ? "&full=1" : "";
  const r = await fetch(`/api/svg?shot=${sid}&stage=${sel.stage}${full}`);
  const svg = await r.text();
  if (ticket !== drawn) return;
  if (!r.ok) {
    graph.innerHTML = `<div class="busy">could not draw this stage: ${esc(svg)}</div>`;
    return;
  }
  graph.innerHTML = svg;
  wirePicture(graph.querySelector("svg"), data);
  graph.dataset.ready = "1";
}

function nodeIdOf(g) {
  const t = g.querySelector("title");
  return t ? t.textContent.trim() : "";
}

function wirePicture(svg, data) {
  if (!svg) return;
  // Graphviz puts each node's DOT id in its <title>: kept as data-node (the title itself
  // would show as a tooltip over the whole node)
  svg.querySelectorAll("g.node").forEach((g) => {
    g.dataset.node = nodeIdOf(g);
    const t = g.querySelector("title");
    if (t) t.remove();
  });
  applyZoom();
  svg.addEventListener("click", (e) => {
    const g = e.target.closest("g.node");
    if (g) showNode(g.dataset.node, data);
  });
  lightKernel();
  if (sel.node) markNode(sel.node);
}

function applyZoom() {
  const svg = $("graph").querySelector("svg");
  if (!svg) return;
  const vb = svg.viewBox && svg.viewBox.baseVal;
  if (!vb || !vb.width) return;
  // fit the width, but no smaller than a size labels can be read at (then scroll)
  if (sel.zoom === null) sel.zoom = Math.max(0.75, Math.min(1, ($("graph").clientWidth - 16) / vb.width)) || 1;
  svg.setAttribute("width", Math.max(50, vb.width * sel.zoom));
  svg.setAttribute("height", Math.max(50, vb.height * sel.zoom));
}

function markNode(id) {
  document.querySelectorAll("#graph g.node.selected").forEach((g) => g.classList.remove("selected"));
  const g = document.querySelector(`#graph g.node[data-node="${CSS.escape(id)}"]`);
  if (g) g.classList.add("selected");
}

function kernelsOfNode(id, data) {  // kernel groups of a node of the picture
  if (/^g\d+$/.test(id)) return [Number(id.slice(1))];
  const n = data.nodes[id];
  return n ? n.kernels || [] : [];
}

function lightKernel() {
  document.querySelectorAll("#graph g.node.lit").forEach((g) => g.classList.remove("lit"));
  if (sel.kernel === null) return;
  const group = currentShot().kernels[sel.kernel].group;
  const data = stageData[currentSid() + "/" + sel.stage];
  if (!data) return;
  let first = null;
  document.querySelectorAll("#graph g.node").forEach((g) => {
    const id = g.dataset.node;
    const hit = sel.stage === "kernels" ? id === "k" + sel.kernel : kernelsOfNode(id, data).includes(group);
    if (hit) { g.classList.add("lit"); first = first || g; }
  });
  if (first) first.scrollIntoView({ block: "nearest", inline: "nearest" });
}

// ---- details -------------------------------------------------------------------------------
function row(name, value, cls) {
  if (value === undefined || value === null || value === "" || (Array.isArray(value) && !value.length)) return "";
  return `<tr><td>${esc(name)}</td><td class="${cls || ""}">${value}</td></tr>`;
}

function splitType(type) {  // "f32[16,64]" -> ["(16, 64)", "f32"]
  const m = /^(\w+)\[([\d,]*)\]$/.exec(type || "");
  return m ? ["(" + m[2].split(",").filter((x) => x).join(", ") + (m[2].split(",").length === 1 && m[2] ? ",)" : ")"), m[1]] : [type, ""];
}

function kernelLinks(groups) {
  const shot = currentShot();
  const out = [];
  for (const g of groups) {
    const info = shot.groups[g];
    if (!info) continue;
    for (const call of info.calls) out.push(`<a data-kernel="${call}">${call}: ${esc(shot.kernels[call].name)}</a>`);
  }
  return out.join("<br>");
}

function groupRows(groups) {
  const shot = currentShot();
  const g = shot.groups[groups[0]];
  if (!g) return "";
  return row("fused ops", esc(g.ops.join(" + ")), "mono") + row("kernel", kernelLinks(groups), "mono") +
    row("kernel stores it", esc(g.reason), "reason");
}

function showNode(id, data) {
  sel.node = id;
  markNode(id);
  const d = $("details");
  if (/^k\d+$/.test(id)) return selectKernel(Number(id.slice(1)));
  const n = data.nodes[id];
  let html;
  if (/^g\d+$/.test(id)) {
    const k = Number(id.slice(1));
    const g = currentShot().groups[k];
    html = `<h3>kernel group ${k}: ${esc(g.name)}</h3><table>` + row("kind", esc(g.kind)) +
      row("fused ops", esc(g.ops.join(" + ")), "mono") + row("calls", kernelLinks([k]), "mono") +
      row("source lines", g.lines.map(esc).join("<br>"), "mono") + row("stored because", esc(g.reason), "reason") +
      row("notes", g.notes.map(esc).join("<br>")) + "</table>";
  } else if (!n) {
    const g = document.querySelector(`#graph g.node[data-node="${CSS.escape(id)}"]`);
    const text = g ? Array.from(g.querySelectorAll("text")).map((t) => t.textContent).join("\n") : id;
    html = `<h3>${esc(id)}</h3><pre class="mono">${esc(text)}</pre>`;
  } else if (sel.stage === "autograd") {
    const [shape, dtype] = splitType(n.type);
    html = `<h3>${esc(id.replace(/^t/, "%"))} ${esc(n.op)}</h3><table>` + row("op", esc(n.op), "mono") +
      row("shape", esc(shape), "mono") + row("dtype", esc(dtype), "mono") +
      row("requires_grad", n.requires_grad ? "yes" : "no") + row("module", esc(n.module), "mono") +
      row("value", esc(n.value), "mono") + row("grad", esc(n.grad), "mono") +
      row("source line", esc(n.line), "mono") + groupRows(n.kernels) + "</table>";
  } else {
    const [shape, dtype] = splitType(n.type);
    html = `<h3>${esc(id.replace(/^n/, "%"))} ${esc(n.op)}</h3><table>` + row("op", esc(n.op), "mono") +
      row("shape", esc(shape), "mono") + row("dtype", esc(dtype), "mono") + row("argument", esc(n.arg), "mono") +
      row("frontend op", esc(n.origin), "mono") + row("source line", esc(n.line), "mono") +
      row(sel.stage === "fused" ? "fusion" : "why", esc(n.reason), "reason") + groupRows(n.kernels) + "</table>";
  }
  d.innerHTML = html;
  d.querySelectorAll("a[data-kernel]").forEach((a) => a.addEventListener("click", () => selectKernel(Number(a.dataset.kernel))));
}

function selectKernel(i, shot) {
  if (shot !== undefined && shot !== sel.shot) {
    sel.shot = shot;
    sel.kernel = i;
    renderList();
    showStage();
  }
  sel.kernel = i;
  const s = currentShot();
  const k = s.kernels[i];
  const g = k.group === null ? null : s.groups[k.group];
  const t = kernelTime(sel.shot, i);
  const it = currentItem();
  $("details").innerHTML = `<h3>kernel ${i}: ${esc(k.name)}</h3><table>` +
    row("group", g ? esc(`${k.group} (${g.kind})`) : "") +
    row("fused ops", g ? esc(g.ops.join(" + ")) : "", "mono") +
    row("source lines", g ? g.lines.map(esc).join("<br>") : "", "mono") +
    row("time", t === null ? "" : esc(`${fmtMs(t)} (${it.timeline.what})`)) +
    row("launches", esc(it.kind === "step" ? `once per call (${countText(it)})` : `once per run (${countText(it)})`)) +
    row("buffers", k.buffers.map(esc).join("<br>"), "mono") + row("threads", esc(k.parallel), "mono") +
    row("stored because", g ? esc(g.reason) : "", "reason") + row("notes", g ? g.notes.map(esc).join("<br>") : "") +
    "</table>";
  document.querySelectorAll("#list .kernel").forEach((li) => li.classList.toggle("selected", Number(li.dataset.kernel) === i));
  const li = document.querySelector(`#list .kernel[data-kernel="${i}"]`);
  if (li) li.scrollIntoView({ block: "nearest" });
  lightKernel();
  showKernelCode();
  markTimeline();
}

// ---- code ----------------------------------------------------------------------------------
async function showKernelCode() {
  const pre = $("code");
  const language = rec && currentItem() ? currentShot().code_language : "llvm";
  $("codetab").textContent = language === "cuda" ? "CUDA C" : "LLVM IR";
  document.querySelectorAll(".codetab").forEach((b) => b.classList.toggle("active", b.dataset.tab === sel.tab));
  if (sel.kernel === null) {
    $("codetitle").textContent = "no kernel selected";
    pre.innerHTML = "";
    pre.dataset.kernel = "";
    return;
  }
  const sid = currentSid();
  const i = sel.kernel;
  const k = currentShot().kernels[i];
  $("codetitle").textContent = `kernel ${i}: ${k.name}`;
  pre.dataset.kernel = String(i);
  pre.dataset.tab = sel.tab;
  if (sel.tab === "loop_ir") {
    pre.innerHTML = Highlight.html(k.loop_ir, "kir");
    return;
  }
  const key = sid + "/" + i;
  if (codeData[key] === undefined) {
    pre.innerHTML = '<span class="muted">rendering…</span>';
    codeData[key] = (await getJSON(`/api/code?shot=${sid}&kernel=${i}`)).code;
  }
  if (sel.kernel === i && sel.tab === "code" && currentSid() === sid) pre.innerHTML = Highlight.html(codeData[key], language);
}

// ---- timeline ------------------------------------------------------------------------------
const LANES = ["host", "schedule", "kernels"];
const LANE_COLOR = { host: "#c9d3e3", schedule: "#e8e1c8" };

function renderTimeline() {
  const box = $("timeline");
  const it = currentItem();
  const tl = it.timeline;
  if (!tl || !tl.segments.length) {
    $("timelinetitle").textContent = "timeline";
    box.innerHTML = '<p class="muted">No profiled run of this entry.</p>';
    return;
  }
  $("timelinetitle").textContent = `timeline of ${tl.what}: ${fmtMs(tl.total)}`;
  document.querySelectorAll("button.span").forEach((b) => b.classList.toggle("active", b.dataset.span === sel.span));
  // "step": from the host work before the run; "run": the run's own span (its launches)
  const run = tl.segments.filter((s) => s.lane === "schedule");
  const from = sel.span === "run" && run.length ? Math.min(...run.map((s) => s.start)) : 0;
  const to = sel.span === "run" && run.length ? Math.max(...run.map((s) => s.start + s.dur)) : tl.total;
  const width = Math.max(300, box.clientWidth - 12);
  const left = 62, laneH = 22, top = 16;
  const scale = (width - left - 8) / Math.max(to - from, 1e-6);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${top + LANES.length * laneH + 6}">`];
  const step = niceStep((to - from) / 6);
  for (let x = Math.ceil(from / step) * step; x <= to + 1e-9; x += step) {
    const px = left + (x - from) * scale;
    parts.push(`<line x1="${px}" x2="${px}" y1="${top - 4}" y2="${top + LANES.length * laneH}" stroke="#e3e3e8"/>`);
    parts.push(`<text x="${px + 2}" y="10">${+x.toFixed(3)} ms</text>`);
  }
  LANES.forEach((lane, j) => parts.push(`<text x="2" y="${top + j * laneH + 14}">${lane}</text>`));
  const shots = it.shots.map((sid) => rec.shots[sid]);
  tl.segments.forEach((s, n) => {
    if (s.start + s.dur < from || s.start > to) return;
    const j = LANES.indexOf(s.lane);
    const x = left + (Math.max(s.start, from) - from) * scale;
    const w = Math.max(1, (Math.min(s.start + s.dur, to) - Math.max(s.start, from)) * scale);
    let fill = LANE_COLOR[s.lane] || "#999";
    let cls = "seg";
    let title = `${s.name}: ${fmtMs(s.dur)}`;
    if (s.lane === "kernels" && s.shot !== null && shots[s.shot] && shots[s.shot].kernels[s.call]) {
      fill = shots[s.shot].kernels[s.call].color;
      cls = "seg kernel";
      title = `kernel ${s.call}: ${s.name}: ${fmtMs(s.dur)}` + (it.shots.length > 1 ? ` (schedule ${s.shot + 1})` : "");
    }
    parts.push(`<rect class="${cls}" data-seg="${n}" x="${x}" y="${top + j * laneH}" width="${w}" height="${laneH - 6}" ` +
      `fill="${fill}" stroke="#667" stroke-width="0.3"><title>${esc(title)}</title></rect>`);
  });
  parts.push("</svg>");
  box.innerHTML = parts.join("");
  box.querySelectorAll("rect.kernel").forEach((r) => r.addEventListener("click", () => {
    const s = tl.segments[Number(r.dataset.seg)];
    selectKernel(s.call, s.shot);
  }));
  markTimeline();
}

function niceStep(x) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(x, 1e-6))));
  for (const m of [1, 2, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

function markTimeline() {
  const tl = currentItem() && currentItem().timeline;
  document.querySelectorAll("#timeline rect.selected").forEach((r) => r.classList.remove("selected"));
  if (!tl || sel.kernel === null) return;
  document.querySelectorAll("#timeline rect.kernel").forEach((r) => {
    const s = tl.segments[Number(r.dataset.seg)];
    if (s.shot === sel.shot && s.call === sel.kernel) r.classList.add("selected");
  });
}

// ---- keys and tools ------------------------------------------------------------------------
function onKey(e) {
  if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA")) return;
  const i = STAGES.indexOf(sel.stage);
  if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
    sel.stage = STAGES[(i + (e.key === "ArrowRight" ? 1 : STAGES.length - 1)) % STAGES.length];
    showStage();
  } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    const n = currentShot().kernels.length;
    const k = sel.kernel === null ? (e.key === "ArrowDown" ? 0 : n - 1) : (sel.kernel + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
    selectKernel(k);
  } else {
    return;
  }
  e.preventDefault();
}

function zoomBy(f) {
  sel.zoom = (sel.zoom || 1) * f;
  applyZoom();
}

async function init() {
  rec = await getJSON("/api/recording");
  $("program").textContent = `${rec.program}: ${rec.items.length} entr${rec.items.length === 1 ? "y" : "ies"}`;
  document.addEventListener("keydown", onKey);
  $("full").addEventListener("change", (e) => { sel.full = e.target.checked; sel.zoom = null; showStage(); });
  $("astext").addEventListener("click", () => { sel.text = !sel.text; $("astext").classList.toggle("codetab", true); $("astext").classList.toggle("active", sel.text); showStage(); });
  $("zoomin").addEventListener("click", () => zoomBy(1.25));
  $("zoomout").addEventListener("click", () => zoomBy(0.8));
  $("zoomfit").addEventListener("click", () => { sel.zoom = null; applyZoom(); });
  document.querySelectorAll("button.span").forEach((b) => b.addEventListener("click", () => { sel.span = b.dataset.span; renderTimeline(); }));
  document.querySelectorAll(".codetab[data-tab]").forEach((b) => b.addEventListener("click", () => { sel.tab = b.dataset.tab; showKernelCode(); }));
  window.addEventListener("resize", () => renderTimeline());
  if (!rec.items.length) {
    $("graph").innerHTML = '<div class="busy">This recording is empty.</div>';
    return;
  }
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("stage") && STAGES.includes(hash.get("stage"))) sel.stage = hash.get("stage");
  let first = rec.items.reduce((a, b) => (b.count * b.shots.length > a.count * a.shots.length ? b : a));
  if (hash.get("item") && itemById(Number(hash.get("item")))) first = itemById(Number(hash.get("item")));
  selectItem(first.id, 0);
  if (hash.get("kernel")) selectKernel(Number(hash.get("kernel")));
  document.body.dataset.ready = "1";
}

init().catch((e) => { document.body.innerHTML = `<pre>needle viz: ${esc(e.stack || e)}</pre>`; });
