// Herald dashboard: polls the admin API (same origin; the login cookie authenticates) and
// draws on canvases. No framework and no external resources: the page works offline and
// every value from the server is inserted as text (textContent), never as HTML.
"use strict";
const C = { ok: "#3fb950", warn: "#d29922", bad: "#f85149", line: "#263040", muted: "#8795a6", accent: "#58a6ff" };
const state = { updates: 0, postCurves: {}, postFetched: {} };
window.herald = state;

async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  if (r.status === 401) { location.href = "/"; throw new Error("signed out"); }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

const fmt = (n) => n == null ? "–" : Number(n).toLocaleString("en-US");
const secs = (s) => s == null ? "–" : s < 120 ? s + " s" : s < 7200 ? Math.round(s / 60) + " min" : (s / 3600).toFixed(1) + " h";
const ms = (m) => m == null ? "–" : (m / 1000).toFixed(m < 10000 ? 2 : 0) + " s";
function text(id, v) { const e = document.getElementById(id); if (e) e.textContent = v; }
function el(tag, cls, txt) { const e = document.createElement(tag); if (cls) e.className = cls; if (txt != null) e.textContent = txt; return e; }

function fillTable(id, rows, cells) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map((r) => {
    const tr = el("tr");
    for (const [v, cls] of cells(r)) tr.appendChild(el("td", cls || "", v));
    return tr;
  }));
  if (!rows.length) { const tr = el("tr"); const td = el("td", "muted", "none"); td.colSpan = 9; tr.appendChild(td); body.appendChild(tr); }
}

// Sizes a canvas for the device pixel ratio and returns its 2D context and CSS size.
function prep(canvas) {
  // The CSS fixes the displayed size; the backing store follows it (sharp on HiDPI screens).
  const dpr = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  return { g, w, h };
}

function axis(g, w, h, pad, max, label) {
  g.strokeStyle = C.line; g.fillStyle = C.muted; g.font = "11px system-ui, sans-serif"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + (h - pad.t - pad.b) * (1 - i / 4);
    g.beginPath(); g.moveTo(pad.l, y + 0.5); g.lineTo(w - pad.r, y + 0.5); g.stroke();
    g.fillText(fmt(Math.round(max * i / 4)) + (i === 4 && label ? " " + label : ""), 4, y + 4);
  }
}

// Stacked bars (delivered, deferred, failed) per point; returns the number of non-empty points.
function drawRates(canvas, pts) {
  const { g, w, h } = prep(canvas), pad = { l: 52, r: 8, t: 8, b: 18 };
  const max = Math.max(5, ...pts.map((p) => p.delivered + p.deferred + p.failed));
  axis(g, w, h, pad, max, "/s");
  const bw = (w - pad.l - pad.r) / Math.max(pts.length, 1), ph = h - pad.t - pad.b;
  let nonEmpty = 0;
  pts.forEach((p, i) => {
    let y = h - pad.b;
    for (const [v, c] of [[p.delivered, C.ok], [p.deferred, C.warn], [p.failed, C.bad]]) {
      if (!v) continue;
      const bh = v / max * ph; g.fillStyle = c;
      g.fillRect(pad.l + i * bw, y - bh, Math.max(bw - 1, 1), bh); y -= bh;
    }
    if (p.delivered + p.deferred + p.failed > 0) nonEmpty++;
  });
  g.fillStyle = C.muted;
  if (pts.length) {
    const t0 = new Date(pts[0].sec * 1000), t1 = new Date(pts[pts.length - 1].sec * 1000);
    g.fillText(t0.toLocaleTimeString(), pad.l, h - 4);
    const s = t1.toLocaleTimeString(); g.fillText(s, w - pad.r - g.measureText(s).width, h - 4);
  }
  canvas.dataset.points = nonEmpty;
  return nonEmpty;
}

// A post's curve: rate bars (per second) and the cumulative deliveries as a line (right scale).
function drawCurve(canvas, rep) {
  const { g, w, h } = prep(canvas), pad = { l: 44, r: 40, t: 8, b: 16 };
  const curve = rep.curve || [];
  const last = curve.length ? curve[curve.length - 1].second + 1 : 1;
  const span = Math.max(last, 5), ph = h - pad.t - pad.b, pw = w - pad.l - pad.r;
  const maxRate = Math.max(1, ...curve.map((p) => p.delivered + p.failed));
  const total = Math.max(1, rep.recipients || 0, rep.delivered + rep.failed);
  axis(g, w, h, pad, maxRate, "/s");
  const bw = Math.max(pw / span - 2, 1);
  g.fillStyle = C.accent;
  g.fillText("100%", w - pad.r + 4, pad.t + 4); g.fillText("0%", w - pad.r + 4, h - pad.b);
  let cum = 0; const line = [];
  for (const p of curve) {
    const x = pad.l + p.second / span * pw;
    g.fillStyle = C.ok; g.fillRect(x, h - pad.b - p.delivered / maxRate * ph, bw, p.delivered / maxRate * ph);
    if (p.failed) { g.fillStyle = C.bad; g.fillRect(x, h - pad.b - (p.delivered + p.failed) / maxRate * ph, bw, p.failed / maxRate * ph); }
    cum += p.delivered; line.push([x + bw, h - pad.b - cum / total * ph]);
  }
  g.strokeStyle = C.accent; g.lineWidth = 2; g.beginPath(); g.moveTo(pad.l, h - pad.b);
  for (const [x, y] of line) g.lineTo(x, y);
  g.stroke();
  g.fillStyle = C.muted; g.fillText("0 s", pad.l, h - 3);
  const end = secs(span); g.fillText(end, w - pad.r - g.measureText(end).width, h - 3);
  canvas.dataset.points = curve.length; canvas.dataset.cumulative = cum;
}

function postCard(p) {
  const card = el("div", "post"); card.dataset.post = p.post;
  const head = el("div", "head");
  head.append(el("span", "id", p.post), el("span", "muted", p.list));
  const total = Math.max(1, (p.recipients || 0) - p.already_done);
  const bar = el("div", "bar"), ok = el("i", "ok"), bad = el("i", "bad");
  ok.style.width = (p.delivered / total * 100) + "%"; bad.style.width = (p.failed / total * 100) + "%";
  bar.append(ok, bad);
  const facts = el("div", "muted facts",
    `${fmt(p.delivered)} delivered · ${fmt(p.failed)} failed · ${fmt(p.pending)} pending · t50 ${ms(p.t50_ms)} · t95 ${ms(p.t95_ms)} · t100 ${ms(p.t100_ms)}` + (p.complete ? " · complete" : ""));
  const canvas = el("canvas"); canvas.height = 120; canvas.className = "curve";
  card.append(head, bar, facts, canvas);
  card.dataset.delivered = p.delivered; card.dataset.failed = p.failed;
  return card;
}

async function refreshPosts(posts) {
  const box = document.getElementById("posts");
  if (!posts.length) return;
  const shown = posts.slice(0, 4);
  box.replaceChildren(...shown.map(postCard));
  for (const p of shown) {
    const fresh = !state.postFetched[p.post] || Date.now() - state.postFetched[p.post] > 2000;
    if (fresh && !(p.complete && state.postCurves[p.post] && state.postCurves[p.post].completed_at_ms)) {
      state.postFetched[p.post] = Date.now();
      try { state.postCurves[p.post] = await api("/api/v1/reports/post/" + p.post); } catch (e) { /* not flushed yet */ }
    }
    const rep = state.postCurves[p.post];
    const canvas = box.querySelector(`[data-post="${p.post}"] canvas`);
    if (rep && canvas) drawCurve(canvas, rep);
  }
}

async function tick() {
  const t = await api("/api/v1/top");
  const pts = t.rates;
  const last15 = pts.slice(-15).reduce((a, p) => a + p.delivered + p.failed, 0) / 15;
  text("s-rate", fmt(Math.round(last15)));
  text("s-delivered", fmt(t.totals.delivered)); text("s-deferred", fmt(t.totals.deferred));
  text("s-failed", fmt(t.totals.failed)); text("s-queued", fmt(t.queued)); text("s-conns", fmt(t.connections));
  const rss = t.process.rss_bytes ? (t.process.rss_bytes / 1048576).toFixed(0) + " MB" : "–";
  let cpu = "–";
  if (t.process.cpu_secs != null && state.lastCpu) {
    cpu = Math.round((t.process.cpu_secs - state.lastCpu.cpu) / ((t.now_ms - state.lastCpu.at) / 1000) * 100) + "%";
  }
  state.lastCpu = { cpu: t.process.cpu_secs, at: t.now_ms };
  text("s-cpu", cpu + " · " + rss);
  drawRates(document.getElementById("rate-chart"), pts);
  fillTable("queue", t.destinations, (d) => [[d.destination], [fmt(d.ready)], [fmt(d.waiting)], [fmt(d.connections)]]);
  fillTable("down", t.down, (d) => [[d.destination], [secs(d.down_for_secs)], [d.last_error || "", "err"]]);
  await refreshPosts(t.posts);
  state.updates++;
  document.body.dataset.updates = state.updates;
  text("updated", "updated " + new Date(t.now_ms).toLocaleTimeString() + " · up " + secs(t.uptime_secs));
}

async function slow() {
  const [lists, strag, hourly, status] = await Promise.all([
    api("/api/v1/lists"), api("/api/v1/stragglers?limit=10"),
    api("/api/v1/reports/hourly").catch(() => []),
    api("/api/v1/status").catch(() => ({ nodes: [] })),
  ]);
  // Cluster nodes: every node sharing the store, with heartbeat age.
  fillTable("nodes", status.nodes || [], (n) => [[n.node_id + (n.this_node ? " (this)" : "")], [n.address], [n.state, n.state === "alive" ? "" : "err"], [(n.heartbeat_age_ms / 1000).toFixed(1) + " s"], [n.version]]);
  const members = lists.reduce((a, l) => a + l.members.total, 0);
  text("summary", `${lists.length} list${lists.length === 1 ? "" : "s"} · ${fmt(members)} members`);
  fillTable("lists", lists, (l) => [[l.address], [fmt(l.members.total)], [fmt(l.members.enabled)], [fmt(l.members.disabled)], [fmt(l.complaints || 0)]]);
  fillTable("stragglers", strag.recipients, (s) => [[s.key], [fmt(s.pending)], [secs(s.oldest_secs)], [s.last_error, "err"]]);
  fillTable("hourly", hourly.slice().reverse(), (r) => {
    const d = new Date(r.hour_ms);
    return [[d.toISOString().slice(0, 13).replace("T", " ") + "h"], [fmt(r.delivered)], [fmt(r.delivered_hosts)], [fmt(r.failed)], [fmt(r.failed_hosts)], [fmt(r.deferred)]];
  });
  state.slowDone = (state.slowDone || 0) + 1;
}

function loop(fn, every) {
  const run = async () => {
    try { await fn(); } catch (e) { text("updated", "error: " + e.message); }
    setTimeout(run, every);
  };
  run();
}
loop(tick, 1000);
loop(slow, 5000);
