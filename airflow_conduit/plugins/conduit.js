// The pipeline pages' one script (served by the plugin, CSP script-src 'self'): the DLQ browser, the replay
// (preview from the plugin's API, Start through Airflow's REST API), the graceful stop and the Kafka lag.
// Every request goes to this origin with the user's session cookie; Airflow authorizes the actions.
"use strict";
(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const el = (tag, attrs, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  };
  const text = (v) => (v === null || v === undefined || v === "" ? "—" : String(v));

  async function getJson(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) throw new Error((body && (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail))) || `HTTP ${response.status}`);
    return body;
  }

  async function send(method, url, payload) {
    const response = await fetch(url, {
      method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(payload),
    });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    return { status: response.status, ok: response.ok, body };
  }

  // -- the DLQ browser ----------------------------------------------------------------------------------------
  function Browser(root) {
    this.root = root;
    this.offset = 0;
    this.limit = 50;
    this.filters = {};
    this.pollTimer = null;
    const form = $("#dlq-filters", root);
    form.addEventListener("submit", (event) => { event.preventDefault(); this.readFilters(); this.offset = 0; this.load(); });
    $("#dlq-prev", root).addEventListener("click", () => { this.offset = Math.max(0, this.offset - this.limit); this.load(); });
    $("#dlq-next", root).addEventListener("click", () => { this.offset += this.limit; this.load(); });
    $("#replay-preview", root).addEventListener("click", () => this.preview());
    $("#replay-start", root).addEventListener("click", () => this.start());
  }

  Browser.prototype.target = function (data) {
    for (const key of ["dlq", "preview", "canTrigger", "whyNot", "title"]) if (data[key] !== undefined) this.root.dataset[key] = data[key];
    $("#dlq-for", this.root).textContent = this.root.dataset.title || "";
    $("#replay-why-not", this.root).textContent = this.root.dataset.whyNot || "";
    $("#replay-preview-result", this.root).textContent = "";
    $("#replay-progress", this.root).textContent = "";
    $("#dlq-detail", this.root).textContent = "";
    this.offset = 0;
    this.filters = {};
    this.lastPreview = null;
    $("#replay-start", this.root).disabled = true;
  };

  Browser.prototype.readFilters = function () {
    const form = $("#dlq-filters", this.root);
    this.filters = {};
    for (const name of ["stage", "component", "error_class", "since", "until"]) {
      const value = form.elements[name].value.trim();
      if (value) this.filters[name] = value;
    }
  };

  Browser.prototype.url = function (base, extra) {
    const url = new URL(base, window.location.href);
    for (const [k, v] of Object.entries({ ...this.filters, ...(extra || {}) })) url.searchParams.set(k, v);
    return url.toString();
  };

  Browser.prototype.load = async function () {
    const status = $("#dlq-status", this.root);
    status.textContent = "Loading…";
    status.className = "muted";
    let page;
    try {
      page = await getJson(this.url(this.root.dataset.dlq, { offset: this.offset, limit: this.limit }));
    } catch (error) {
      status.textContent = `The DLQ could not be read: ${error.message}`;
      status.className = "bad";
      return;
    }
    this.page = page;
    this.fillFacets(page.facets || {});
    this.fillHistory(page.replays || []);
    if (!page.readable) {
      status.textContent = `${page.location}: ${page.reason}`;
      $("#dlq-records", this.root).textContent = "";
      return;
    }
    const more = page.truncated ? " (the scan stopped early)" : "";
    status.textContent = `${page.total} record(s) match${more} · ${page.location}`;
    status.className = "";
    status.dataset.total = page.total;
    const first = page.total ? page.offset + 1 : 0;
    $("#dlq-range", this.root).textContent = `${first}–${page.offset + page.count} of ${page.total}`;
    $("#dlq-prev", this.root).disabled = page.offset <= 0;
    $("#dlq-next", this.root).disabled = page.offset + page.count >= page.total;
    this.fillRecords(page.records);
  };

  Browser.prototype.fillFacets = function (facets) {
    const form = $("#dlq-filters", this.root);
    for (const [name, facet] of [["stage", "stage"], ["component", "component_id"], ["error_class", "exception_class"]]) {
      const select = form.elements[name];
      const chosen = this.filters[name] || "";
      select.textContent = "";
      select.append(el("option", { value: "", text: "any" }));
      for (const [value, count] of Object.entries(facets[facet] || {})) {
        if (!value) continue;
        const option = el("option", { value, text: `${value} (${count})` });
        if (value === chosen) option.selected = true;
        select.append(option);
      }
    }
  };

  Browser.prototype.fillRecords = function (records) {
    const table = $("#dlq-records", this.root);
    table.textContent = "";
    table.append(el("tr", {}, ...["batch", "run", "stage", "component", "error class", "message", "time", "replays"].map((h) => el("th", { text: h }))));
    records.forEach((record, index) => {
      const c = record.context || {};
      const row = el("tr", { class: "dlq-record", "data-index": String(index), "data-id": record.id },
        el("td", { class: "n", text: text(record.batch_id) }),
        el("td", { text: text(record.run_id) }),
        el("td", { text: text(c.stage) }),
        el("td", { text: text(c.component_id) }),
        el("td", { text: text((c.exception_class || "").split(".").pop()) }),
        el("td", { text: text((c.exception_message || "").slice(0, 120)) }),
        el("td", { text: text(c.time_of_error) }),
        el("td", { class: "replays", text: record.replays.length ? record.replays.map((r) => `#${r.replay} ${r.role}`).join(", ") : "" }));
      row.addEventListener("click", () => this.showRecord(record, row));
      table.append(row);
    });
  };

  Browser.prototype.showRecord = function (record, row) {
    for (const chosen of this.root.querySelectorAll("tr.dlq-record.chosen")) chosen.classList.remove("chosen");
    row.classList.add("chosen");
    const detail = $("#dlq-detail", this.root);
    detail.textContent = "";
    const dl = (entries) => {
      const list = el("dl");
      for (const [k, v] of entries) { list.append(el("dt", { text: k }), el("dd", { text: text(v) })); }
      return list;
    };
    const box = el("div", { class: "record-detail", id: "record-detail" },
      el("b", { text: `Record (${record.encoding})` }),
      el("pre", { class: "raw", id: "record-raw", text: record.raw === null ? "(not kept: include-messages is false)" : record.raw }),
      el("b", { text: "Context (KIP-298)" }), dl(Object.entries(record.context || {})),
      el("b", { text: "Position" }), dl([...Object.entries(record.position || {}), ["run", record.run_id], ["batch", record.batch_id], ["replay_count", record.replay_count]]),
      el("b", { text: "Replay history" }),
      record.replays.length
        ? dl(record.replays.map((r) => [`replay #${r.replay}`, `${r.role}; ${r.status || ""}; ${r.started_at || ""}`]))
        : el("p", { class: "muted", text: "never replayed" }));
    detail.append(box);
  };

  Browser.prototype.fillHistory = function (replays) {
    const box = $("#replay-history", this.root);
    box.textContent = "";
    if (!replays.length) { box.textContent = "No replay yet."; return; }
    const table = el("table", { id: "replays-table" },
      el("tr", {}, ...["replay", "status", "records", "written", "still failing", "started", "ended"].map((h) => el("th", { text: h }))));
    for (const r of replays) {
      const written = r.written ? Object.entries(r.written).map(([k, v]) => `${k}=${v}`).join(", ") : "";
      table.append(el("tr", { class: "replay-row", "data-status": r.status || "" },
        el("td", { text: `#${r.replay}` }), el("td", { text: text(r.status) }), el("td", { class: "n", text: text(r.records) }),
        el("td", { text: text(written) }), el("td", { class: "n", text: text(r.still_failing) }),
        el("td", { text: text(r.started_at) }), el("td", { text: text(r.ended_at) })));
    }
    box.append(table);
  };

  Browser.prototype.preview = async function () {
    const out = $("#replay-preview-result", this.root);
    const start = $("#replay-start", this.root);
    out.textContent = "Computing the selection…";
    start.disabled = true;
    const force = $("#replay-force", this.root).checked;
    let preview;
    try {
      preview = await getJson(this.url(this.root.dataset.preview, force ? { force: "true" } : {}));
    } catch (error) {
      out.textContent = `No preview: ${error.message}`;
      return;
    }
    this.lastPreview = preview;
    out.textContent = "";
    const classes = Object.entries(preview.error_classes || {}).map(([k, v]) => `${k}: ${v}`).join("; ");
    const skipped = Object.entries(preview.skipped || {}).map(([k, v]) => `${k}: ${v}`).join("; ");
    const box = el("div", { class: "record-detail", id: "replay-selection" },
      el("p", {}, el("b", { id: "replay-selected", text: String(preview.selected) }),
        document.createTextNode(preview.resumes ? ` record(s): an interrupted replay #${preview.resumes} is resumed (filters not used)` : " record(s) would be replayed")),
      el("p", { text: `error classes: ${classes || "none"}` }),
      el("p", { class: "muted", text: `not taken: ${skipped || "none"}` }),
      el("p", { class: "muted", text: preview.rule }),
      el("p", { class: "muted", text: `fingerprints now: ${Object.entries(preview.fingerprints || {}).map(([k, v]) => `${k}=${String(v).slice(0, 12)}`).join(", ")}` }));
    out.append(box);
    const allowed = preview.can_trigger && preview.replay_dag && preview.selected > 0;
    start.disabled = !allowed;
    if (preview.replay_dag) start.dataset.dag = preview.replay_dag.dag_id;
  };

  Browser.prototype.start = async function () {
    const preview = this.lastPreview;
    const progress = $("#replay-progress", this.root);
    if (!preview || !preview.replay_dag) return;
    const start = $("#replay-start", this.root);
    start.disabled = true;
    const dag = preview.replay_dag;
    const rest = this.root.dataset.rest;
    progress.textContent = "Starting…";
    const answer = await send("POST", `${rest}/dags/${encodeURIComponent(dag.dag_id)}/dagRuns`,
      { logical_date: null, conf: dag.conf, note: "DLQ replay started from the pipeline view" });
    if (!answer.ok) {
      progress.className = "bad";
      progress.textContent = `Airflow refused the replay (HTTP ${answer.status}): ${answer.body && JSON.stringify(answer.body.detail)}`;
      return;
    }
    const runId = answer.body.dag_run_id;
    progress.className = "";
    progress.dataset.runId = runId;
    this.follow(rest, dag, runId);
  };

  Browser.prototype.follow = function (rest, dag, runId) {
    const progress = $("#replay-progress", this.root);
    const base = `${rest}/dags/${encodeURIComponent(dag.dag_id)}/dagRuns/${encodeURIComponent(runId)}`;
    const tick = async () => {
      let run, tis;
      try {
        run = await getJson(base);
        tis = await getJson(`${base}/taskInstances`);
      } catch (error) {
        progress.textContent = `Replay run ${runId}: ${error.message}`;
        this.pollTimer = setTimeout(tick, 3000);
        return;
      }
      const steps = (tis.task_instances || []).map((ti) => `${ti.task_id}: ${ti.state || "none"}`).join(" · ");
      progress.textContent = "";
      progress.append(el("p", {}, el("b", { text: "Replay run " }), el("code", { text: runId }),
        document.createTextNode(" — "), el("span", { id: "replay-run-state", class: run.state === "success" ? "ok" : run.state === "failed" ? "bad" : "", text: run.state })),
        el("p", { class: "muted", text: steps }));
      if (run.state === "success" || run.state === "failed") {
        progress.dataset.state = run.state;
        this.load();
        return;
      }
      this.pollTimer = setTimeout(tick, 3000);
    };
    tick();
  };

  // -- the graceful stop ------------------------------------------------------------------------------------
  function setupStop(root) {
    const ask = $("#stop-ask", root), confirmBox = $("#stop-confirm", root), result = $("#stop-result", root);
    ask.addEventListener("click", () => { confirmBox.hidden = false; ask.disabled = true; });
    $("#stop-no", root).addEventListener("click", () => { confirmBox.hidden = true; ask.disabled = false; });
    $("#stop-yes", root).addEventListener("click", async () => {
      confirmBox.hidden = true;
      result.textContent = "Stopping…";
      const answer = await send("PATCH", root.dataset.ti, { new_state: "success", note: "stopped from the pipeline view" });
      if (answer.ok) {
        result.className = "ok";
        result.textContent = "Stop requested: the running batch completes, then the pipeline is stopped.";
      } else {
        result.className = "bad";
        result.textContent = `Airflow refused the stop (HTTP ${answer.status}).`;
        ask.disabled = false;
      }
    });
  }

  // -- Kafka lag ------------------------------------------------------------------------------------------
  function chart(points) {
    const ns = "http://www.w3.org/2000/svg";
    const w = 420, h = 90, pad = 24;
    const axis = document.createElementNS(ns, "line");
    for (const [k, v] of Object.entries({ x1: pad, y1: h - pad, x2: w - pad, y2: h - pad, stroke: "#9ca3af" })) axis.setAttribute(k, String(v));
    const caption = document.createElementNS(ns, "text");
    caption.setAttribute("x", String(w / 2));
    caption.setAttribute("y", String(h - 6));
    caption.setAttribute("text-anchor", "middle");
    caption.textContent = `${points.length} batch(es) of the last runs, oldest first`;
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    svg.setAttribute("width", String(w));
    svg.setAttribute("class", "lag-chart");
    const line = (values, color, cls) => {
      const known = values.filter((v) => v !== null && v !== undefined);
      if (!known.length) return;
      const top = Math.max(...known, 1);
      const step = values.length > 1 ? (w - 2 * pad) / (values.length - 1) : 0;
      const points = values.map((v, i) => (v === null || v === undefined ? null : [pad + i * step, h - pad - (h - 2 * pad) * v / top])).filter(Boolean);
      const path = document.createElementNS(ns, "polyline");
      path.setAttribute("points", points.map(([x, y]) => `${x},${y}`).join(" "));
      path.setAttribute("fill", "none");
      path.setAttribute("stroke", color);
      path.setAttribute("stroke-width", "2");
      path.setAttribute("class", cls);
      svg.append(path);
      for (const [x, y] of points) {  // every batch a dot: a run of one batch is a point, not an empty line
        const dot = document.createElementNS(ns, "circle");
        dot.setAttribute("cx", String(x));
        dot.setAttribute("cy", String(y));
        dot.setAttribute("r", "3");
        dot.setAttribute("fill", color);
        svg.append(dot);
      }
      const label = document.createElementNS(ns, "text");
      label.setAttribute("x", cls === "lag-line" ? "2" : String(w - 2));
      label.setAttribute("text-anchor", cls === "lag-line" ? "start" : "end");
      label.setAttribute("y", "10");
      label.setAttribute("style", `fill:${color}`);
      label.textContent = cls === "lag-line" ? `lag (max ${top})` : `records/s (max ${Math.round(top)})`;
      svg.append(label);
    };
    svg.append(axis, caption);
    line(points.map((p) => p.lag), "#b45309", "lag-line");
    line(points.map((p) => p.rows_per_second), "#2563eb", "rate-line");
    return svg;
  }

  async function fillLag(box) {
    let lag;
    try {
      lag = await getJson(box.dataset.lag);
    } catch (error) {
      box.textContent = `Kafka lag unavailable: ${error.message}`;
      return;
    }
    box.textContent = "";
    if (!lag.kafka) { box.append(el("p", { class: "muted", text: "no Kafka source" })); return; }
    const total = lag.partitions.reduce((sum, p) => sum + (p.lag || 0), 0);
    box.dataset.total = String(total);
    box.append(el("p", {}, el("b", { text: "Kafka lag: " }), el("span", { class: "lag-total", text: String(total) }),
      document.createTextNode(` offsets behind (${lag.mode || "unknown"})`),
      lag.reason ? el("span", { class: "bad", text: ` — ${lag.reason}` }) : null));
    if (lag.partitions.length) {
      const table = el("table", { class: "lag-partitions" },
        el("tr", {}, ...["topic", "partition", "end offset", "committed", "lag"].map((h) => el("th", { text: h }))));
      for (const p of lag.partitions) {
        table.append(el("tr", { class: "lag-partition", "data-topic": p.topic, "data-partition": String(p.partition) },
          el("td", { text: p.topic }), el("td", { class: "n", text: String(p.partition) }), el("td", { class: "n", text: text(p.end_offset) }),
          el("td", { class: "n", text: text(p.committed_offset) }), el("td", { class: "n lag-cell", text: text(p.lag) })));
      }
      box.append(table);
    }
    if (lag.history && lag.history.length) box.append(chart(lag.history));
    box.classList.add("loaded");
  }

  function init() {
    const browserRoot = $("#dlq-browser");
    let browser = null;
    if (browserRoot) {
      browser = new Browser(browserRoot);
      if (!browserRoot.hidden) browser.load();
    }
    for (const button of document.querySelectorAll("button.open-dlq")) {
      button.addEventListener("click", () => {
        browserRoot.hidden = false;
        $("#dlq-heading").hidden = false;
        browser.target(button.dataset);
        browser.load();
        browserRoot.scrollIntoView();
      });
    }
    const stop = $("#stop");
    if (stop) setupStop(stop);
    for (const box of document.querySelectorAll(".kafka-lag[data-lag]")) fillLag(box);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
