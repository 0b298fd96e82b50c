// The workbench: console, file tree, editor, people, brief, timeline, submit.
// Plain JS, no library, no network but this server. Everything the server sends is shown with
// textContent (never innerHTML). Every action goes through /api/play/{session}/action (or /open),
// i.e. through the run's own tools in its sandbox, exactly as a model's tool call.
(function () {
  "use strict";
  const root = document.getElementById("wb");
  if (!root) return;
  const sid = root.dataset.session;
  const api = "/api/play/" + encodeURIComponent(sid);
  const $ = (id) => document.getElementById(id);
  const csrfMeta = document.querySelector("meta[name=csrf-token]");
  const csrf = csrfMeta ? csrfMeta.content : "";
  let next = 0, boot = null, state = "starting", busy = false, setupDone = false, timer = null;
  let tools = [], history = [], hpos = 0, openPath = null, openWhole = false;
  const calls = {};  // tool call id -> {name, arguments, box}

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function showError(msg) { $("error").textContent = msg || ""; $("error").hidden = !msg; }
  function quote(s) { return "'" + String(s).replace(/'/g, "'\\''") + "'"; }
  function isAsk(cmd) { return /^\s*(python3\s+)?bin\/ask(\s|$)/.test(cmd || ""); }
  function clock(s) { s = Math.max(0, Math.floor(s)); return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0"); }

  function setEnabled(on) {
    root.querySelectorAll("input, textarea, button").forEach((x) => {
      if (x.id === "editor" || x.id === "save") x.disabled = !on || openPath === null;
      else x.disabled = !on;
    });
    $("editor").readOnly = !openWhole;
  }

  function reset() {
    next = 0; setupDone = false;
    ["console-out", "chat", "timeline"].forEach((id) => { $(id).textContent = ""; });
    for (const k of Object.keys(calls)) delete calls[k];
    history = [];
  }

  function setup(data) {
    if (setupDone || data.brief === null || data.brief === undefined) return;
    setupDone = true;
    $("brief").textContent = data.brief;
    tools = data.tools || [];
    $("wb-people").hidden = !(tools.includes("run_command") && (data.brief || "").includes("bin/ask"));
    $("wb-console").hidden = !tools.includes("run_command");
    $("wb-files").hidden = $("wb-editor").hidden = !tools.includes("read_file");
    if (data.limits) $("limits").textContent = " · limits: " + data.limits.max_turns + " turns, " + data.limits.max_minutes + " min";
    refreshTree();
  }

  function consoleEntry(cmd) {
    const box = el("div", "cmd");
    box.appendChild(el("div", "cmd-line", "$ " + cmd));
    $("console-out").appendChild(box);
    return box;
  }

  function render(ev) {
    const d = ev.data || {};
    if (ev.kind === "user" || ev.kind === "system") return;
    if (ev.kind === "assistant" && !d.content) return;
    const li = el("li", "tl tl-" + ev.kind);
    li.appendChild(el("span", "seq", "#" + ev.seq + " "));
    if (ev.kind === "tool_call") {
      const a = d.arguments || {};
      const item = { name: d.name, arguments: a, box: null };
      calls[d.id] = item;
      if (d.name === "run_command") {
        const cmd = String(a.command || "");
        li.appendChild(el("span", "", "$ " + cmd));
        if (isAsk(cmd)) {
          item.box = el("div", "msg msg-me", cmd.replace(/^\s*(python3\s+)?bin\/ask\s*/, ""));
          $("chat").appendChild(item.box);
        } else {
          item.box = consoleEntry(cmd);
          if (history[history.length - 1] !== cmd) history.push(cmd);
          hpos = history.length;
        }
      } else {
        li.appendChild(el("span", "", d.name + " " + (a.path !== undefined ? a.path : JSON.stringify(a))));
      }
    } else if (ev.kind === "tool_result") {
      const item = calls[d.id];
      const out = String(d.output || "");
      li.appendChild(el("span", "muted", "→ " + out.split("\n")[0].slice(0, 120)));
      if (item && item.box) {
        if (item.box.classList.contains("msg")) $("chat").appendChild(el("pre", "msg msg-them", out));
        else item.box.appendChild(el("pre", "cmd-out", out));
      }
    } else if (ev.kind === "assistant") {
      li.appendChild(el("span", "", "submitted: " + d.content));
    } else {
      li.appendChild(el("span", "muted", ev.kind + " " + (d.note || d.message || "")));
    }
    $("timeline").appendChild(li);
  }

  async function refreshTree() {
    if (!tools.includes("list_files")) return;
    try {
      const r = await fetch(api + "/tree?path=.");
      if (!r.ok) return;
      const data = await r.json();
      const ul = $("tree");
      ul.textContent = "";
      (data.entries || []).forEach((e) => {
        const depth = e.path.split("/").length - 1;
        const li = el("li", "t-" + e.kind);
        li.style.paddingLeft = (depth * 14) + "px";
        const name = e.path.split("/").pop() + (e.kind === "dir" ? "/" : "");
        if (e.kind === "file") {
          const a = el("a", "", name);
          a.href = "#"; a.dataset.path = e.path;
          a.addEventListener("click", (x) => { x.preventDefault(); openFile(e.path); });
          li.appendChild(a);
          li.appendChild(el("span", "muted small", " " + e.size + " B"));
        } else {
          li.appendChild(el("span", "", name + (e.kind === "link" ? " → " + e.target : "")));
        }
        ul.appendChild(li);
      });
    } catch (e) { /* the next poll shows the connection state */ }
  }

  function showResult(data) {
    const run = data.run, body = $("result-body");
    body.textContent = "";
    if (!run) body.appendChild(el("p", "error", data.error || "the run ended without a record"));
    else {
      const p = el("p", "verdict");
      const v = run.status === "void" ? "void" : (run.passed ? "passed" : "not passed");
      p.appendChild(el("span", "badge " + (run.status === "void" ? "void" : (run.passed ? "pass" : "fail")), v));
      p.appendChild(el("span", "", " score "));
      p.appendChild(el("b", "", run.score === null ? "–" : Number(run.score).toFixed(4)));
      const score = p.lastChild; score.id = "score"; score.dataset.score = String(run.score);
      p.appendChild(el("span", "", " · end reason " + run.end_reason));
      body.appendChild(p);
      const a = el("a", "", "open the run " + run.run_id);
      a.href = "/runs/" + encodeURIComponent(run.run_id); a.id = "run-link";
      body.appendChild(a);
    }
    $("result").hidden = false;
  }

  async function poll() {
    try {
      const r = await fetch(api + "?since=" + next);
      if (r.status === 404) { showError("no such play session"); return; }
      if (!r.ok) throw new Error("status " + r.status);
      const data = await r.json();
      if (boot !== null && data.boot !== boot) {  // the server restarted: a new run replayed the actions
        boot = data.boot; reset(); timer = setTimeout(poll, 0); return;
      }
      boot = data.boot;
      root.dataset.boot = boot;
      setup(data);
      (data.events || []).forEach(render);
      next = data.next;
      if (data.more) { timer = setTimeout(poll, 0); return; }  // the rest of the transcript first
      state = data.state;
      $("state").textContent = state;
      $("turns").textContent = data.turns;
      $("clock").textContent = clock(data.elapsed_s || 0);
      if (data.error && state !== "resuming") showError(data.error); else if (!busy) showError("");
      $("console-out").scrollTop = $("console-out").scrollHeight;
      setEnabled(state === "running" && !busy);
      if (state === "done" || state === "error") { setEnabled(false); showResult(data); return; }
    } catch (e) {
      showError("reconnecting to the server…");
    }
    timer = setTimeout(poll, state === "running" ? 1000 : 400);
  }
  function kick() { if (timer) clearTimeout(timer); poll(); }

  async function post(path, body) {
    busy = true; setEnabled(false); showError("");
    try {
      const r = await fetch(api + path, { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify(body) });
      const j = await r.json().catch(() => ({}));
      if (!r.ok) { showError(j.detail || ("error " + r.status)); return null; }
      return j;
    } catch (e) { showError("cannot reach the server: " + e); return null; }
    finally { busy = false; kick(); }
  }
  async function act(tool, args) { const j = await post("/action", { tool: tool, args: args }); refreshTree(); return j; }

  async function openFile(path) {
    const j = await post("/open", { path: path });
    if (!j) return;
    if (j.content === null) { showError(j.output); return; }
    openPath = path; openWhole = j.whole;
    $("editor").value = j.content;
    $("editor-path").textContent = path;
    $("editor-note").textContent = j.whole ? "" : "only part of this file could be shown: read-only here (use the console)";
    setEnabled(state === "running");
  }

  $("open-form").addEventListener("submit", (e) => { e.preventDefault(); const p = e.target.path.value.trim(); if (p) openFile(p); });
  $("save").addEventListener("click", async () => {
    if (openPath === null || !openWhole) return;
    const j = await act("write_file", { path: openPath, content: $("editor").value });
    if (j) $("editor-note").textContent = j.output;
  });
  $("tree-refresh").addEventListener("click", refreshTree);
  $("console-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const cmd = $("console-in").value;
    if (!cmd.trim()) return;
    $("console-in").value = "";
    act("run_command", { command: cmd });
  });
  $("console-in").addEventListener("keydown", (e) => {
    if (e.key === "ArrowUp" && hpos > 0) { hpos -= 1; $("console-in").value = history[hpos]; e.preventDefault(); }
    else if (e.key === "ArrowDown") {
      hpos = Math.min(history.length, hpos + 1);
      $("console-in").value = hpos < history.length ? history[hpos] : "";
      e.preventDefault();
    }
  });
  $("who").addEventListener("click", () => act("run_command", { command: "bin/ask --who" }));
  $("inbox").addEventListener("click", () => act("run_command", { command: "bin/ask --inbox" }));
  $("now").addEventListener("click", () => act("run_command", { command: "bin/ask --now" }));
  $("wait").addEventListener("click", () => {
    const w = $("wait-for").value.trim();
    if (!/^\d+[hd]$/.test(w)) { showError("wait: give hours or days, e.g. 6h or 2d"); return; }
    act("run_command", { command: "bin/ask --wait " + w });
  });
  $("ask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const to = e.target.to.value.trim(), msg = e.target.message.value;
    if (!/^[A-Za-z0-9_.-]+$/.test(to)) { showError("who: the person's id from the directory"); return; }
    if (!msg.trim()) return;
    e.target.message.value = "";
    act("run_command", { command: "bin/ask " + to + " " + quote(msg) });
  });
  $("submit-form").addEventListener("submit", (e) => { e.preventDefault(); post("/action", { submit: e.target.answer.value }); });

  setEnabled(false);
  poll();
})();
