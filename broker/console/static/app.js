// The broker console: a small single-page app over the broker's /api (no framework, no CDN: works offline).
"use strict";

const main = () => document.getElementById("main");
let session = { aclEnabled: false, signedIn: true, admin: true, accessKey: null };

// ---- helpers ------------------------------------------------------------------------------------
function esc(value) {
  return String(value === null || value === undefined ? "" : value)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}
const enc = encodeURIComponent;
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
function when(ms) {
  if (!ms) return "–";
  const d = new Date(Number(ms));
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:` +
    `${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
// Date-time fields are plain text in 24-hour form (a browser's datetime-local picker follows its locale and may
// show AM/PM): "YYYY-MM-DD HH:MM[:SS]", local time.
const DATETIME_PATTERN = "\\d{4}-\\d{2}-\\d{2}[ T]\\d{2}:\\d{2}(:\\d{2})?";
function dateTimeInput(name, ms, extra) {
  return `<input name="${esc(name)}" class="datetime" type="text" inputmode="numeric" size="19" ` +
    `pattern="${DATETIME_PATTERN}" placeholder="YYYY-MM-DD HH:MM:SS" title="local time, 24-hour: YYYY-MM-DD HH:MM:SS" ` +
    `value="${esc(ms ? when(ms) : "")}"${extra || ""}>`;
}
function parseWhen(text) {
  const m = /^\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2}))?\s*$/.exec(text || "");
  if (!m) return NaN;
  const [, y, mo, d, h, mi, s] = m.map(Number);
  if (h > 23 || mi > 59 || (s || 0) > 59) return NaN;
  return new Date(y, mo - 1, d, h, mi, s || 0).getTime();
}
function duration(seconds) {
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600), m = Math.floor(seconds % 3600 / 60);
  return d ? `${d}d ${h}h ${m}m` : h ? `${h}h ${m}m` : `${m}m ${seconds % 60}s`;
}
function perm(p) { return (p & 4 ? "R" : "-") + (p & 2 ? "W" : "-") + (p & 1 ? "I" : "-"); }
function kindBadge(kind) { return kind && kind !== "normal" ? ` <span class="badge ${esc(kind)}">${esc(kind)}</span>` : ""; }

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, options = {}) {
  const init = { method: options.method || "GET", headers: {}, credentials: "same-origin" };
  if (options.body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch("/api/" + path, init);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    if (response.status === 401 && path !== "login") { location.hash = "#/login"; }
    throw new ApiError(response.status, (data && data.error) || `HTTP ${response.status}`);
  }
  return data;
}

function flash(message, isError) {
  const box = document.getElementById("flash");
  box.textContent = message;
  box.className = "flash" + (isError ? " error" : "");
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { box.className = "flash hidden"; }, isError ? 10000 : 5000);
}

function table(columns, rows, emptyText, id) {
  const head = columns.map((c) => `<th class="${c.num ? "num" : ""}">${esc(c.label)}</th>`).join("");
  const body = rows.length ? rows.map((r) => "<tr>" + columns.map((c) =>
    `<td class="${c.num ? "num" : ""}">${c.html ? c.html(r) : esc(c.value ? c.value(r) : r[c.key])}</td>`).join("") +
    "</tr>").join("") : `<tr><td colspan="${columns.length}" class="muted">${esc(emptyText || "Nothing here.")}</td></tr>`;
  return `<table${id ? ` id="${esc(id)}"` : ""}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function cards(items) {
  return `<div class="cards">${items.map(([label, value, id]) =>
    `<div class="card"><div class="label">${esc(label)}</div><div class="value"${id ? ` id="${esc(id)}"` : ""}>` +
    `${esc(value)}</div></div>`).join("")}</div>`;
}

// Axis ticks at round values (1, 2, 2.5 or 5 times a power of ten; whole numbers only when `whole`): [top, step].
function niceScale(max, whole) {
  if (!(max > 0)) return whole ? [4, 1] : [1, 0.25];
  const raw = max / 4, mag = Math.pow(10, Math.floor(Math.log10(raw))), r = raw / mag;
  const factors = whole ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
  let step = factors.find((f) => r <= f + 1e-9) * mag;
  if (whole) step = Math.max(1, Math.round(step));
  const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
  return [top, step];
}
function tickLabel(v, step) {
  let decimals = 0;
  while (decimals < 6 && Math.abs(step * Math.pow(10, decimals) - Math.round(step * Math.pow(10, decimals))) > 1e-6) decimals++;
  return decimals ? v.toFixed(decimals) : Math.round(v).toLocaleString("en-US");
}

// An SVG line chart of points [{t, <key>...}] for the given series [{key, label, cls}]; `whole`: the values are
// counts, so the axis has whole-number ticks only.
function lineChart(points, series, id, whole) {
  const W = 900, H = 220, L = 56, R = 12, T = 12, B = 28;
  if (!points.length) {
    return `<div class="panel muted" id="${esc(id)}">No samples yet: the chart fills in as the broker runs.</div>`;
  }
  const t1 = points[points.length - 1].t, t0 = Math.min(points[0].t, t1 - 60e3);  // at least a minute wide
  let max = 0;
  for (const p of points) for (const s of series) max = Math.max(max, Number(p[s.key]) || 0);
  const [top, step] = niceScale(max, whole);
  max = top;
  const x = (t) => L + (t - t0) / (t1 - t0) * (W - L - R);
  const y = (v) => H - B - v / max * (H - T - B);
  let svg = `<svg class="chart" id="${esc(id)}" viewBox="0 0 ${W} ${H}" preserveAspectRatio="xMidYMid meet" role="img">`;
  for (let i = 0; i * step <= top + step * 1e-9; i++) {
    const v = i * step, yy = y(v);
    svg += `<line class="grid" x1="${L}" x2="${W - R}" y1="${yy}" y2="${yy}"/>`;
    svg += `<text class="tick" x="${L - 6}" y="${yy + 4}" text-anchor="end">${esc(tickLabel(v, step))}</text>`;
  }
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (t1 - t0) * i / 4, d = new Date(t), pad = (v) => String(v).padStart(2, "0");
    const label = `${pad(d.getHours())}:${pad(d.getMinutes())}` + (t1 - t0 < 600e3 ? `:${pad(d.getSeconds())}` : "");
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    svg += `<text x="${x(t)}" y="${H - 8}" text-anchor="${anchor}">${label}</text>`;
  }
  svg += `<line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>`;
  for (const s of series) {
    const d = points.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(Number(p[s.key]) || 0).toFixed(1)}`)
      .join(" ");
    svg += `<path class="line ${esc(s.cls)}" d="${d}"/>`;
    if (points.length <= 90) {  // few samples: each one is marked
      for (const p of points) {
        svg += `<circle class="dot ${esc(s.cls)}" r="3" cx="${x(p.t).toFixed(1)}" cy="${y(Number(p[s.key]) || 0).toFixed(1)}"/>`;
      }
    }
  }
  svg += "</svg>";
  const legend = series.map((s) => `<span class="sw ${esc(s.cls)}"></span>${esc(s.label)}`).join("");
  return svg + `<div class="legend">${legend}</div>`;
}

function adminOnly(html) { return session.admin ? html : ""; }

// ---- pages --------------------------------------------------------------------------------------
async function overviewPage() {
  const [o, rates] = await Promise.all([api("overview"), session.admin ? api("rates") : null]);
  if (o.restricted) {  // not an admin: the broker-wide figures are not shown (as GET_BROKER_RUNTIME_INFO)
    return `<h1>Overview</h1>` + cards([
      ["Broker", o.brokerName, "ov-broker"], ["Cluster", o.clusterName], ["Address", o.brokerAddr],
      ["Role", o.brokerRole], ["Version", o.version, "ov-version"], ["Uptime", duration(o.uptimeSeconds)],
    ]) + `<p class="muted" id="ov-restricted">Broker-wide figures are shown to admin accounts; the topics and groups
      pages list what this account may use.</p><h2>Brokers</h2>` +
      table([{ label: "Cluster", key: "cluster" }, { label: "Broker", key: "brokerName" },
        { label: "Id", key: "brokerId", num: true }, { label: "Address", key: "addr" }], o.brokers, "", "brokers");
  }
  const last = rates.points.length ? rates.points[rates.points.length - 1] : { in: 0, out: 0 };
  return `<h1>Overview</h1>` + cards([
    ["Broker", o.brokerName, "ov-broker"], ["Cluster", o.clusterName], ["Address", o.brokerAddr],
    ["Role", o.brokerRole], ["Version", o.version, "ov-version"], ["Uptime", duration(o.uptimeSeconds)],
    ["Disk used", o.diskUsedRatio === null ? "–" : (o.diskUsedRatio * 100).toFixed(1) + " %", "ov-disk"],
    ["Messages in", num(o.messagesIn), "ov-in"], ["Messages out", num(o.messagesOut), "ov-out"],
    ["In / s now", num(last.in)], ["Out / s now", num(last.out)],
    ["Topics", num(o.topicCount)], ["Groups online", num(o.consumerGroupCount)],
    ["Connections", num(o.connectionCount)],
  ]) + `<h2>Messages per second, last hour</h2><div class="panel">` +
    lineChart(rates.points, [{ key: "in", label: "in (put)", cls: "in" }, { key: "out", label: "out (pulled)", cls: "out" }],
      "rates-chart") + `</div><h2>Brokers</h2>` +
    table([{ label: "Cluster", key: "cluster" }, { label: "Broker", key: "brokerName" },
      { label: "Id", key: "brokerId", num: true }, { label: "Address", key: "addr" }], o.brokers, "", "brokers") +
    `<p class="muted">Store ${esc(o.storePath)} · ${esc(o.flushDiskType)} · commit log ${num(o.commitLogMinOffset)}` +
    ` … ${num(o.commitLogMaxOffset)} bytes · booted ${esc(when(o.bootTimestamp))}</p>`;
}

// a topic's 5.x message type (its attribute message.type): what its producers may send
function typeSelect(current) {
  return `<select name="messageType">${["NORMAL", "FIFO", "DELAY", "TRANSACTION"].map((v) =>
    `<option value="${v}"${v === current ? " selected" : ""}>${v}</option>`).join("")}</select>`;
}

async function topicsPage(params) {
  const showAll = params.get("all") === "1";
  const data = await api("topics");
  const rows = data.topics.filter((t) => showAll || t.kind === "normal");
  const create = adminOnly(`<h2>Create or update a topic</h2><form class="inline panel" id="topic-form">
    <label>Topic<input name="topic" required maxlength="127" id="new-topic"></label>
    <label>Read queues<input name="readQueueNums" type="number" min="1" max="1024" value="4"></label>
    <label>Write queues<input name="writeQueueNums" type="number" min="1" max="1024" value="4"></label>
    <label>Permission<select name="perm"><option value="6">read + write</option><option value="4">read only</option>
      <option value="2">write only</option></select></label>
    <label>Message type${typeSelect("NORMAL")}</label>
    <button type="submit" id="topic-save">Save</button></form>`);
  return `<h1>Topics</h1><div class="toolbar"><a href="#/topics${showAll ? "" : "?all=1"}">` +
    `${showAll ? "Hide" : "Show"} retry, dead-letter and system topics</a>` +
    `<span class="muted">${rows.length} of ${data.topics.length}</span></div>` +
    table([
      { label: "Topic", html: (t) => `<a href="#/topic/${enc(t.topic)}">${esc(t.topic)}</a>${kindBadge(t.kind)}` },
      { label: "Read / write queues", value: (t) => `${t.readQueueNums} / ${t.writeQueueNums}` },
      { label: "Perm", value: (t) => perm(t.perm) },
      { label: "Message type", value: (t) => t.messageType },
      { label: "Messages", value: (t) => num(t.messages), num: true },
      { label: "In / s", value: (t) => num(t.inPerSecond), num: true },
    ], rows, "No topics yet.", "topics") + create;
}

function bindTopicForm() {
  const form = document.getElementById("topic-form");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = new FormData(form);
    try {
      await api("topics", { method: "POST", body: { topic: f.get("topic"), readQueueNums: Number(f.get("readQueueNums")),
        writeQueueNums: Number(f.get("writeQueueNums")), perm: Number(f.get("perm")),
        messageType: f.get("messageType") } });
      flash(`Topic ${f.get("topic")} saved.`);
      const target = `#/topic/${enc(f.get("topic"))}`;
      if (location.hash === target) route(); else location.hash = target;
    } catch (e) { flash(e.message, true); }
  });
}

async function topicPage(name) {
  const t = await api("topics/" + enc(name));
  const manage = adminOnly(`<h2>Change</h2><form class="inline panel" id="topic-form">
    <input type="hidden" name="topic" value="${esc(t.topic)}">
    <label>Read queues<input name="readQueueNums" type="number" min="1" max="1024" value="${t.readQueueNums}"></label>
    <label>Write queues<input name="writeQueueNums" type="number" min="1" max="1024" value="${t.writeQueueNums}"></label>
    <label>Permission<select name="perm">${[[6, "read + write"], [4, "read only"], [2, "write only"]].map(([v, l]) =>
      `<option value="${v}"${v === (t.perm & 6) ? " selected" : ""}>${l}</option>`).join("")}</select></label>
    <label>Message type${typeSelect(t.messageType)}</label>
    <button type="submit">Save</button>
    <button type="button" class="danger" id="topic-delete">Delete topic</button></form>`);
  return `<h1>Topic ${esc(t.topic)}${kindBadge(t.kind)}</h1>` + cards([
    ["Read queues", t.readQueueNums], ["Write queues", t.writeQueueNums], ["Permission", perm(t.perm)],
    ["Filter", t.topicFilterType], ["Ordered", t.order ? "yes" : "no"], ["Message type", t.messageType],
    ["Messages", num(t.queues.reduce((a, q) => a + q.maxOffset - q.minOffset, 0)), "topic-messages"],
  ]) + `<h2>Route</h2>` + table([{ label: "Broker", key: "brokerName" }, { label: "Address", key: "addr" },
    { label: "Read queues", key: "readQueueNums", num: true }, { label: "Write queues", key: "writeQueueNums", num: true },
    { label: "Perm", value: (r) => perm(r.perm) }], t.route) +
    `<h2>Queues</h2>` + table([{ label: "Queue", key: "queueId", num: true },
      { label: "Min offset", key: "minOffset", num: true }, { label: "Max offset", key: "maxOffset", num: true },
      { label: "Messages", value: (q) => num(q.maxOffset - q.minOffset), num: true },
      { label: "Last stored", value: (q) => when(q.lastUpdateTimestamp) }], t.queues, "", "queues") +
    `<h2>Consumer groups</h2>` + (t.consumerGroups.length ? t.consumerGroups.map((g) =>
      `<a class="badge" href="#/group/${enc(g)}">${esc(g)}</a>`).join(" ") : `<p class="muted">None.</p>`) +
    `<p><a href="#/messages?topic=${enc(t.topic)}">Browse its messages of the last hour</a></p>` + manage;
}

function bindTopicDelete(name) {
  const button = document.getElementById("topic-delete");
  if (!button) return;
  button.addEventListener("click", async () => {
    if (!confirm(`Delete topic ${name}, its queues and its consumer offsets?`)) return;
    try {
      await api("topics/" + enc(name), { method: "DELETE", body: {} });
      flash(`Topic ${name} deleted.`);
      location.hash = "#/topics";
    } catch (e) { flash(e.message, true); }
  });
}

async function groupsPage(params) {
  const showAll = params.get("all") === "1";
  const data = await api("groups");
  const rows = data.groups.filter((g) => showAll || !g.system);
  return `<h1>Consumer groups</h1><div class="toolbar"><a href="#/groups${showAll ? "" : "?all=1"}">` +
    `${showAll ? "Hide" : "Show"} system groups</a></div>` +
    table([
      { label: "Group", html: (g) => `<a href="#/group/${enc(g.group)}">${esc(g.group)}</a>` },
      { label: "Online", value: (g) => g.online, num: true },
      { label: "Model", value: (g) => g.messageModel || "–" },
      { label: "Topics", value: (g) => g.topics.join(", ") },
      { label: "Lag", value: (g) => num(g.lag), num: true },
      { label: "Retry", value: (g) => num(g.retry), num: true },
      { label: "Dead letters", html: (g) => g.dlq ? `<a href="#/dlq/${enc(g.group)}" title="${num(g.dlq)} stored, ` +
        `${num(g.dlqResent)} resent">${num(Math.max(0, g.dlq - (g.dlqResent || 0)))}</a>` +
        (g.dlqResent ? ` <span class="muted">(${num(g.dlqResent)} resent)</span>` : "") : "0", num: true },
    ], rows, "No consumer groups yet.", "groups");
}

async function groupPage(name) {
  const g = await api("groups/" + enc(name));
  const topics = g.topics.filter((t) => !t.startsWith("%RETRY%"));
  const reset = adminOnly(`<h2>Reset offsets by time</h2><form class="inline panel" id="reset-form">
    <label>Topic<select name="topic">${topics.map((t) => `<option>${esc(t)}</option>`).join("")}</select></label>
    <label>To the first message stored at or after${dateTimeInput("when", Date.now() - 3600e3, " required")}</label>
    <button type="submit" id="reset-submit"${topics.length ? "" : " disabled"}>Reset</button>
    <span class="muted">Online consumers are told and resume there.</span></form>`);
  return `<h1>Consumer group ${esc(g.group)}</h1>` + cards([
    ["Online clients", g.clients.length, "group-online"], ["Model", g.messageModel || "–"],
    ["Total lag", num(g.lag), "group-lag"], ["Consume / s", num(g.consumeTps)],
    ["Retry messages", num(g.retry)], ["Dead letters", num(g.dlq), "group-dlq"],
    ["Dead letters resent", num(g.dlqResent || 0), "group-dlq-resent"],
    ["Max retries", g.retryMaxTimes === null ? "–" : g.retryMaxTimes],
  ]) + (g.dlq ? `<p><a href="#/dlq/${enc(g.group)}" id="dlq-link">Open its ${num(g.dlq)} dead letter(s)</a></p>` : "") +
    `<h2>Lag, last hour</h2><div class="panel">` + lineChart(g.lagHistory, [{ key: "lag", label: "lag", cls: "lag" }],
      "lag-chart", true) + `</div><h2>Lag per queue</h2>` +
    table([{ label: "Topic", key: "topic" }, { label: "Queue", key: "queueId", num: true },
      { label: "Broker offset", key: "brokerOffset", num: true }, { label: "Consumer offset", key: "consumerOffset", num: true },
      { label: "Lag", value: (q) => num(q.lag), num: true }, { label: "Last consumed", value: (q) => when(q.lastTimestamp) }],
    g.queues, "No offsets yet.", "lag-table") +
    `<h2>Online clients</h2>` + table([{ label: "Client id", key: "clientId" }, { label: "Address", key: "addr" },
      { label: "Language", key: "language" }, { label: "Version", key: "version", num: true }], g.clients,
    "Nobody of this group is online.", "clients") +
    `<h2>Subscriptions</h2>` + table([{ label: "Topic", key: "topic" }, { label: "Type", key: "type" },
      { label: "Expression", html: (s) => `<code>${esc(s.expression)}</code>` }], g.subscriptions, "None reported.") + reset;
}

function bindResetForm(group) {
  const form = document.getElementById("reset-form");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = new FormData(form);
    const timestamp = parseWhen(f.get("when"));
    if (Number.isNaN(timestamp)) { flash("Give the time as YYYY-MM-DD HH:MM:SS (24-hour, local time).", true); return; }
    try {
      const r = await api(`groups/${enc(group)}/reset`, { method: "POST", body: { topic: f.get("topic"), timestamp } });
      flash(`Offsets of ${group} on ${r.topic} reset (${r.offsets.map((o) => `q${o.queueId}→${o.offset}`).join(", ")});` +
        ` ${r.consumersTold} consumer(s) told.`);
      route();
    } catch (e) { flash(e.message, true); }
  });
}

function messagesTable(messages, id) {
  return table([
    { label: "Message id", html: (m) => `<a href="#/message/${m.commitLogOffset}"><code>${esc(m.msgId)}</code></a>` },
    { label: "Topic", html: (m) => esc(m.topic) },
    { label: "Queue", value: (m) => `${m.queueId} @ ${m.queueOffset}` },
    { label: "Tags", key: "tags" }, { label: "Keys", key: "keys" },
    { label: "Stored", value: (m) => when(m.storeTimestamp) },
    { label: "Body", html: (m) => `<span class="mono">${esc(m.bodyPreview)}</span>` },
  ], messages, "No message found.", id);
}

async function messagesPage(params) {
  const topic = params.get("topic") || "", key = params.get("key") || "", id = params.get("id") || "";
  const now = Date.now();
  const begin = Number(params.get("begin")) || now - 3600e3, end = Number(params.get("end")) || now;
  let results = "";
  let query = null;
  if (id) query = `id=${enc(id)}${topic ? `&topic=${enc(topic)}` : ""}`;
  else if (key) query = `topic=${enc(topic)}&key=${enc(key)}`;
  else if (topic) query = `topic=${enc(topic)}&begin=${begin}&end=${end}`;
  if (query) {
    const r = await api("messages?" + query);
    results = `<h2>${r.messages.length} message(s)${r.truncated ? " (more exist: narrow the range)" : ""}</h2>` +
      messagesTable(r.messages, "results");
  }
  return `<h1>Messages</h1><div class="row">
    <form class="inline panel" id="search-id"><label>Message id (UNIQ_KEY or offset id)
      <input name="id" value="${esc(id)}" size="34"></label>
      <label>Topic (optional)<input name="topic" value="${esc(id ? topic : "")}"></label>
      <button type="submit">Find by id</button></form>
    <form class="inline panel" id="search-key"><label>Topic<input name="topic" value="${esc(key ? topic : "")}" required></label>
      <label>Key<input name="key" value="${esc(key)}" required></label><button type="submit">Find by key</button></form>
  </div><form class="inline panel" id="search-time"><label>Topic<input name="topic" value="${esc(!id && !key ? topic : "")}" required></label>
    <label>From${dateTimeInput("begin", begin)}</label>
    <label>To${dateTimeInput("end", end)}</label>
    <button type="submit">Find by time</button></form>
  <form class="inline panel" id="search-trace"><label>Message trace: message id
    <input name="msgId" size="34" required id="trace-id"></label><button type="submit" id="trace-submit">Show trace</button></form>` +
    results;
}

function bindSearchForms() {
  const go = (form, build) => form && form.addEventListener("submit", (event) => {
    event.preventDefault();
    const f = new FormData(form);
    location.hash = "#/messages?" + build(f);
  });
  go(document.getElementById("search-id"), (f) => `id=${enc(f.get("id").trim())}&topic=${enc(f.get("topic").trim())}`);
  go(document.getElementById("search-key"), (f) => `topic=${enc(f.get("topic").trim())}&key=${enc(f.get("key").trim())}`);
  const timeForm = document.getElementById("search-time");
  if (timeForm) timeForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const f = new FormData(timeForm);
    const begin = parseWhen(f.get("begin")), end = parseWhen(f.get("end")) + 999;  // "To" includes its second
    if (Number.isNaN(begin) || Number.isNaN(end)) { flash("Give times as YYYY-MM-DD HH:MM:SS (24-hour, local time).", true); return; }
    location.hash = `#/messages?topic=${enc(f.get("topic").trim())}&begin=${begin}&end=${end}`;
  });
  const traceForm = document.getElementById("search-trace");
  if (traceForm) traceForm.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = "#/trace/" + enc(new FormData(traceForm).get("msgId").trim());
  });
}

async function messagePage(offset) {
  const m = await api("messages/" + enc(offset));
  const body = m.body;
  const views = [["text", body.text], ["json", body.json], ["hex", body.hex]].filter(([, v]) => v !== null);
  const first = body.json !== null ? "json" : body.text !== null ? "text" : "hex";
  const tabs = views.map(([name]) => `<button type="button" class="plain${name === first ? " active" : ""}" ` +
    `data-view="${name}">${name.toUpperCase()}</button>`).join("");
  const panes = views.map(([name, value]) => `<pre id="body-${name}" class="${name === first ? "" : "hidden"}">` +
    `${esc(value)}</pre>`).join("");
  return `<h1>Message <code>${esc(m.msgId)}</code></h1>` + cards([
    ["Topic", m.topic, "msg-topic"], ["Queue", `${m.queueId} @ ${m.queueOffset}`], ["Tags", m.tags || "–"],
    ["Keys", m.keys || "–"], ["Stored", when(m.storeTimestamp)], ["Born", when(m.bornTimestamp)],
    ["Reconsume times", m.reconsumeTimes], ["Body size", `${num(body.size)} B`],
  ]) + `<p class="muted">Offset id <code>${esc(m.offsetMsgId)}</code> · commit-log offset ${num(m.commitLogOffset)} · ` +
    `born at ${esc(m.bornHost)} · stored at ${esc(m.storeHost)} · ` +
    `<a href="#/trace/${enc(m.msgId)}" id="trace-link">message trace</a></p>` +
    `<h2>Body</h2><div class="tabs" id="body-tabs">${tabs}</div><div class="panel">${panes}` +
    `${body.truncated ? `<p class="muted">Only the first 256 KiB are shown.</p>` : ""}</div>` +
    `<h2>Properties</h2>` + table([{ label: "Name", html: (p) => `<code>${esc(p[0])}</code>` },
      { label: "Value", html: (p) => `<code>${esc(p[1])}</code>` }], Object.entries(m.properties), "", "properties") +
    `<h2>Retry history</h2>` + table([
      { label: "Stored", value: (h) => when(h.storeTimestamp) },
      { label: "Topic", html: (h) => `${esc(h.topic)}${kindBadge(h.kind)}` },
      { label: "Reconsume times", key: "reconsumeTimes", num: true },
      { label: "Delay level", key: "delayLevel" },
      { label: "", html: (h) => h.commitLogOffset === m.commitLogOffset ? "this copy" :
        `<a href="#/message/${h.commitLogOffset}">open</a>` },
    ], m.history, "Never retried.", "history");
}

function bindBodyTabs() {
  const tabs = document.getElementById("body-tabs");
  if (!tabs) return;
  tabs.addEventListener("click", (event) => {
    const view = event.target.getAttribute("data-view");
    if (!view) return;
    for (const b of tabs.querySelectorAll("button")) b.classList.toggle("active", b === event.target);
    for (const pre of document.querySelectorAll("pre[id^=body-]")) pre.classList.toggle("hidden", pre.id !== "body-" + view);
  });
}

async function dlqPage(group) {
  const d = await api("dlq/" + enc(group));
  const resendAll = adminOnly(d.total ? `<button type="button" id="resend-all">Resend all ${num(d.total)} to ${esc(group)}</button>` : "");
  const resent = (r) => r ? `${when(r.at)} by ${r.by}` + (r.count > 1 ? ` (${r.count} times)` : "") : "";
  return `<h1>Dead letters of ${esc(group)}</h1>` + cards([
    ["Dead letters", num(d.total), "dlq-total"], ["Resent", num(d.resent), "dlq-resent"],
    ["Not resent yet", num(d.awaiting), "dlq-awaiting"]]) +
    `<p class="muted">Topic <code>${esc(d.topic)}</code>: ${num(d.total)} message(s). ` +
    `Resending puts a copy in <code>%RETRY%${esc(group)}</code>: only this group consumes it again. ` +
    `A letter resent before is resent again only after you confirm.</p>` +
    `<div class="toolbar">${resendAll}</div>` +
    table([
      { label: "Message id", html: (m) => `<a href="#/message/${m.commitLogOffset}"><code>${esc(m.msgId)}</code></a>` },
      { label: "Original topic", key: "originalTopic" },
      { label: "Reconsume times", key: "reconsumeTimes", num: true },
      { label: "Stored", value: (m) => when(m.storeTimestamp) },
      { label: "Body", html: (m) => `<span class="mono">${esc(m.bodyPreview)}</span>` },
      { label: "Last resent", html: (m) => m.lastResent ? `<span class="resent">${esc(resent(m.lastResent))}</span>` +
        ` <span class="muted">to ${esc(m.lastResent.target)}</span>` : `<span class="muted">never</span>` },
      { label: "", html: (m) => adminOnly(`<button type="button" class="plain resend" data-offset="${m.commitLogOffset}">Resend</button>`) },
    ], d.messages, "No dead letters.", "dead-letters") +
    (d.truncated ? `<p class="muted">Only the first ${d.messages.length} are listed.</p>` : "");
}

function bindResend(group) {
  const resend = async (body, what) => {
    try {
      let r;
      try {
        r = await api(`dlq/${enc(group)}/resend`, { method: "POST", body });
      } catch (e) {
        if (e.status !== 409) throw e;  // some were resent before: resending again delivers them again
        if (!confirm(`${e.message}.\n\nResend again? The group will receive these messages once more.`)) {
          flash("Nothing resent.");
          return;
        }
        r = await api(`dlq/${enc(group)}/resend`, { method: "POST", body: Object.assign({ confirm: true }, body) });
      }
      const failed = r.results.filter((x) => !x.ok);
      await route();  // counts and "last resent" now include this resend
      flash(`Resent ${r.resent} of ${r.results.length} ${what} to ${group}.` +
        (failed.length ? ` Failed: ${failed.map((x) => x.error).join("; ")}` : ""), failed.length > 0);
    } catch (e) { flash(e.message, true); }
  };
  for (const button of document.querySelectorAll("button.resend")) {
    button.addEventListener("click", () => resend({ offsets: [Number(button.getAttribute("data-offset"))] }, "message(s)"));
  }
  const all = document.getElementById("resend-all");
  if (all) all.addEventListener("click", () => {
    if (confirm(`Resend every dead letter of ${group}?`)) resend({ all: true }, "dead letter(s)");
  });
}

async function producersPage() {
  const p = await api("producers");
  const rows = [];
  for (const g of p.groups) for (const c of g.clients) rows.push(Object.assign({ group: g.group }, c));
  return `<h1>Producers</h1><p class="muted">Producer groups with a live connection to this broker ` +
    `(their clients' heartbeats): ${num(p.groups.length)} group(s).</p>` +
    table([{ label: "Producer group", key: "group" }, { label: "Client id", key: "clientId" },
      { label: "Address", key: "addr" }, { label: "Language", key: "language" },
      { label: "Version", key: "version", num: true },
      { label: "Last heartbeat", value: (c) => when(c.lastUpdateTimestamp) }], rows, "No producer is connected.",
    "producers");
}

async function configPage(params) {
  const c = await api("config");
  const filter = (params.get("q") || "").toLowerCase();
  const rows = c.entries.filter((e) => !filter || e.key.toLowerCase().includes(filter) ||
    String(e.value).toLowerCase().includes(filter));
  return `<h1>Broker configuration</h1><form class="inline panel" id="config-filter"><label>Filter` +
    `<input name="q" value="${esc(filter)}" id="config-q"></label><button type="submit">Filter</button>` +
    `<span class="muted">${rows.length} of ${c.entries.length} keys · secrets are masked</span></form>` +
    table([{ label: "Key", html: (e) => `<code>${esc(e.key)}</code>` },
      { label: "Value", html: (e) => e.masked ? `<span class="masked">${esc(e.value)}</span>` : `<code>${esc(e.value)}</code>` }],
    rows, "No key matches.", "config");
}

function bindConfigFilter() {
  const form = document.getElementById("config-filter");
  if (form) form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = "#/config?q=" + enc(new FormData(form).get("q").trim());
  });
}

async function tracePage(msgId) {
  const t = await api("traces/" + enc(msgId));
  let html = `<h1>Trace of <code>${esc(t.msgId)}</code></h1><p class="muted">From the trace topic ` +
    `<code>${esc(t.traceTopic)}</code>. Times are local, 24-hour.</p><h2>Sent</h2>` +
    table([{ label: "Producer group", key: "producerGroup" }, { label: "Topic", key: "topic" },
      { label: "Sent", value: (s) => when(s.time) }, { label: "Cost", value: (s) => `${s.costMs} ms`, num: true },
      { label: "Status", html: (s) => `<span class="badge ${s.status === "success" ? "ok" : "dlq"}">${esc(s.status)}</span>` },
      { label: "Stored at", key: "storeHost" }, { label: "Type", key: "msgType" }, { label: "Tags", key: "tags" },
      { label: "Keys", key: "keys" }, { label: "Client", key: "clientHost" }],
    t.sends, "No send recorded (the producer did not trace it, or its trace has not arrived yet).", "trace-sends");
  if (t.transactions.length) {
    html += `<h2>Transaction</h2>` + table([{ label: "Producer group", key: "producerGroup" },
      { label: "Time", value: (e) => when(e.time) }, { label: "State", key: "state" },
      { label: "From a check", value: (e) => (e.fromCheck ? "yes" : "no") }], t.transactions, "", "trace-transactions");
  }
  html += `<h2>Consumed</h2>`;
  if (!t.consumers.length) html += `<p class="muted" id="trace-consumers">No consumption recorded.</p>`;
  for (const g of t.consumers) {
    html += `<h3>${esc(g.consumerGroup)}</h3>` + table([
      { label: "Consumer group", key: "consumerGroup" },
      { label: "Began", value: (c) => when(c.time) },
      { label: "Cost", value: (c) => (c.costMs === null ? "–" : `${c.costMs} ms`), num: true },
      { label: "Status", html: (c) => `<span class="badge ${c.status === "success" ? "ok" : "dlq"}">${esc(c.status)}</span>` },
      { label: "Result", value: (c) => c.result || "–" },
      { label: "Retry", key: "retryTimes", num: true }, { label: "Client", key: "clientHost" }],
    g.consumptions, "", "trace-group-" + g.consumerGroup.replace(/[^A-Za-z0-9_-]/g, "_"));
  }
  return html;
}

function loginPage() {
  return `<div class="login panel"><h1>Sign in</h1><p class="muted">ACL is on: use an account of the broker's ACL file.
    Admin accounts may change things; the others may look.</p><form id="login-form">
    <label>Access key<input name="accessKey" autocomplete="username" required id="login-key"></label>
    <label>Secret key<input name="secretKey" type="password" autocomplete="current-password" required id="login-secret"></label>
    <button type="submit" id="login-submit">Sign in</button></form></div>`;
}

function bindLogin() {
  const form = document.getElementById("login-form");
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = new FormData(form);
    try {
      await api("login", { method: "POST", body: { accessKey: f.get("accessKey"), secretKey: f.get("secretKey") } });
      await loadSession();
      location.hash = "#/";
    } catch (e) { flash(e.message, true); }
  });
}

// The group's replicas, master, epoch and SyncStateSet (controller mode) or the HA links (classic master/slave).
async function replicationPage() {
  const r = await api("replication");
  const yes = (v) => (v ? "yes" : "no");
  let html = `<h1>Replication</h1>`;
  if (!r.controllerMode) {
    html += cards([["Broker", r.brokerName], ["Role", r.role, "rep-role"], ["Controller mode", "off", "rep-mode"],
      ["Max offset", num(r.maxOffset)]]);
    if (r.master) {
      html += `<h2>Master</h2>` + cards([["HA address", r.master.haAddress || "not known yet", "rep-ha-master"],
        ["Connected", yes(r.master.connected)], ["Master's max offset", num(r.master.masterMaxOffset)]]);
    }
    if (r.role !== "SLAVE") {
      html += `<h2>Slaves</h2>` + table([{ label: "HA connection", key: "address" },
        { label: "Acknowledged offset", value: (s) => num(s.ackedOffset), num: true },
        { label: "Behind (bytes)", value: (s) => num(s.behindBytes), num: true }], r.slaves, "No slave connected.",
        "rep-slaves");
    }
    return html;
  }
  const l = r.local, g = r.group;
  html += cards([["Broker", r.brokerName], ["Controller id", l.controllerId === null ? "–" : l.controllerId, "rep-own-id"],
    ["Role", l.role, "rep-role"], ["Controller mode", "on", "rep-mode"],
    ["Master epoch", g ? g.masterEpoch : "–", "rep-epoch"],
    ["Master", g && g.masterBrokerId ? `${g.masterBrokerId} (${g.masterAddress || "?"})` : "none", "rep-master"],
    ["SyncStateSet", g ? `{${g.syncStateSet.join(", ")}}` : "–", "rep-sync-set"],
    ["SyncStateSet epoch", g ? g.syncStateSetEpoch : "–", "rep-set-epoch"],
    ["Max offset", num(l.maxOffset), "rep-max"], ["Confirm offset", num(l.confirmOffset), "rep-confirm"]]);
  if (r.controllerProblem) html += `<p class="flash error" id="rep-problem">${esc(r.controllerProblem)}</p>`;
  html += `<h2>Replicas (as the controller ${esc(l.activeController || "")} knows them)</h2>` +
    table([{ label: "Id", key: "brokerId", num: true }, { label: "Address", key: "address" },
      { label: "Role", value: (x) => (x.master ? "master" : "slave") },
      { label: "Alive", value: (x) => yes(x.alive) }, { label: "In SyncStateSet", value: (x) => yes(x.inSync) }],
    g ? g.replicas : [], "Nothing known.", "rep-replicas");
  html += `<h2>This broker's epochs</h2>` + table([{ label: "Epoch", key: "epoch", num: true },
    { label: "Start offset", value: (e) => num(e.startOffset), num: true },
    { label: "End offset", value: (e) => num(e.endOffset), num: true }], l.epochs, "No epoch yet.", "rep-epochs");
  if (l.unreconcilable) html += `<p class="flash error">${esc(l.unreconcilable)}</p>`;
  return html;
}

// ---- router -------------------------------------------------------------------------------------
async function loadSession() {
  session = await api("session");
  const who = document.getElementById("who");
  if (!session.aclEnabled) { who.innerHTML = `<span class="badge">ACL off</span>`; return; }
  who.innerHTML = session.signedIn ? `${esc(session.accessKey)} ${session.admin ? '<span class="badge ok">admin</span>' :
    '<span class="badge">read only</span>'} <button type="button" class="plain" id="logout">Sign out</button>` : "";
  const out = document.getElementById("logout");
  if (out) out.addEventListener("click", async () => {
    await api("logout", { method: "POST", body: {} });
    await loadSession();
    location.hash = "#/login";
  });
}

async function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const page = parts[0] || "overview";
  for (const a of document.querySelectorAll("#nav a")) {
    const target = a.getAttribute("data-page");
    a.classList.toggle("active", target === page || target + "s" === page || (page === "topic" && target === "topics") ||
      (page === "group" && target === "groups") || (page === "dlq" && target === "groups") ||
      (page === "message" && target === "messages") || (page === "trace" && target === "messages"));
  }
  if (session.aclEnabled && !session.signedIn && page !== "login") { location.hash = "#/login"; return; }
  try {
    let html;
    switch (page) {
      case "overview": html = await overviewPage(); break;
      case "topics": html = await topicsPage(params); break;
      case "topic": html = await topicPage(parts[1]); break;
      case "groups": html = await groupsPage(params); break;
      case "group": html = await groupPage(parts[1]); break;
      case "messages": html = await messagesPage(params); break;
      case "message": html = await messagePage(parts[1]); break;
      case "dlq": html = await dlqPage(parts[1]); break;
      case "replication": html = await replicationPage(); break;
      case "producers": html = await producersPage(); break;
      case "config": html = await configPage(params); break;
      case "trace": html = await tracePage(parts[1]); break;
      case "login": html = loginPage(); break;
      default: html = `<h1>Not found</h1><p><a href="#/">Back to the overview</a></p>`;
    }
    main().innerHTML = html;
    document.title = `${page === "overview" ? "Overview" : page[0].toUpperCase() + page.slice(1)} · RocketMQ broker console`;
    bindTopicForm();
    if (page === "topic") bindTopicDelete(parts[1]);
    if (page === "group") bindResetForm(parts[1]);
    if (page === "messages") bindSearchForms();
    if (page === "message") bindBodyTabs();
    if (page === "dlq") bindResend(parts[1]);
    if (page === "config") bindConfigFilter();
    if (page === "login") bindLogin();
    main().setAttribute("data-loaded", hash);
  } catch (e) {
    main().innerHTML = `<h1>Cannot show this page</h1><p class="flash error" id="page-error">${esc(e.message)}</p>`;
    main().setAttribute("data-loaded", hash);
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", async () => {
  try { await loadSession(); } catch (e) { /* the page shows the error below */ }
  route();
});
