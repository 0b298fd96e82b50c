// Human play: post actions, poll the session, render everything with textContent (never innerHTML).
(function () {
  "use strict";
  const root = document.getElementById("play");
  if (!root) return;
  const sid = root.dataset.session;
  const $ = (id) => document.getElementById(id);
  let next = 0;
  let state = "starting";
  let busy = false;
  let setupDone = false;
  let timer = null;
  const csrfMeta = document.querySelector("meta[name=csrf-token]");
  const csrf = csrfMeta ? csrfMeta.content : "";

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  function showError(msg) {
    const p = $("error");
    p.textContent = msg || "";
    p.hidden = !msg;
  }

  function setEnabled(on) {
    document.querySelectorAll("form.tool, #submit-form").forEach((f) => {
      f.querySelectorAll("input, textarea, button, select").forEach((x) => { x.disabled = !on; });
    });
  }

  function setup(data) {
    if (setupDone || data.brief === null || data.brief === undefined) return;
    setupDone = true;
    $("brief").textContent = data.brief;
    if (data.messages) {
      const box = $("brief");
      box.textContent = "";
      data.messages.forEach((m) => box.appendChild(el("div", "msg", (m.role || "user") + ": " + (m.content || ""))));
    }
    (data.images || []).forEach((src) => { const i = el("img", "brief-img"); i.src = src; $("images").appendChild(i); });
    const tools = data.tools || [];
    document.querySelectorAll("form.tool").forEach((f) => { f.hidden = !tools.includes(f.dataset.tool); });
    $("no-tools").hidden = tools.length > 0;
    $("ask-hint").hidden = !(tools.includes("run_command") && (data.brief || "").includes("bin/ask"));
    if (data.limits) {
      $("limits").textContent = " · limits: " + data.limits.max_turns + " turns, " + data.limits.max_minutes + " min";
    }
  }

  function render(ev) {
    const d = ev.data || {};
    if (ev.kind === "user" || ev.kind === "system") return;  // shown as the brief
    if (ev.kind === "assistant" && !d.content) return;      // a tool call: shown by its tool_call event
    const box = el("div", "ev ev-" + ev.kind);
    const head = el("div", "ev-head");
    head.appendChild(el("span", "seq", "#" + ev.seq));
    head.appendChild(el("span", "kind", " " + (ev.kind === "assistant" ? "final answer" : ev.kind) + " "));
    if (d.name) head.appendChild(el("span", "tool", d.name));
    box.appendChild(head);
    if (ev.kind === "tool_call") {
      const a = d.arguments || {};
      const text = d.name === "run_command" ? "$ " + a.command + (a.cwd ? "   (in " + a.cwd + ")" : "") : JSON.stringify(a, null, 1);
      box.appendChild(el("pre", "args", text));
    } else if (ev.kind === "tool_result") {
      box.appendChild(el("pre", "out", d.output));
    } else if (ev.kind === "assistant") {
      box.appendChild(el("pre", "", d.content));
    } else {
      box.appendChild(el("pre", "json", JSON.stringify(d, null, 1)));
    }
    $("log").appendChild(box);
    box.scrollIntoView({ block: "nearest" });
  }

  function fmt(x, n) { return x === null || x === undefined ? "–" : Number(x).toFixed(n); }

  function showResult(data) {
    const run = data.run;
    const body = $("result-body");
    body.textContent = "";
    if (!run) {
      body.appendChild(el("p", "error", data.error || "the run ended without a record"));
    } else {
      const verdict = run.status === "void" ? "void" : (run.passed ? "passed" : "not passed");
      const p = el("p", "verdict");
      p.appendChild(el("span", "badge " + (run.status === "void" ? "void" : (run.passed ? "pass" : "fail")), verdict));
      p.appendChild(document.createTextNode(" score " + fmt(run.score, 4) + " · end reason " + run.end_reason +
        (run.void_reason ? " (" + run.void_reason + ")" : "")));
      body.appendChild(p);
      const preds = (run.grade || {}).predicates || [];
      if (preds.length) {
        const ul = el("ul", "preds");
        preds.forEach((x) => ul.appendChild(el("li", x.ok ? "ok" : "bad", x.path + ": " + (x.ok ? "ok" : "not ok") + " — " + x.reason)));
        body.appendChild(ul);
      }
      const a = el("a", "", "open the run " + run.run_id);
      a.href = "/runs/" + encodeURIComponent(run.run_id);
      a.id = "run-link";
      body.appendChild(a);
    }
    $("result").hidden = false;
  }

  async function poll() {
    try {
      const r = await fetch("/api/play/" + encodeURIComponent(sid) + "?since=" + next);
      if (!r.ok) { showError("the session is gone (" + r.status + ")"); return; }
      const data = await r.json();
      setup(data);
      (data.events || []).forEach(render);
      next = data.next;
      if (data.more) { timer = setTimeout(poll, 0); return; }  // the rest of the transcript first
      state = data.state;
      $("state").textContent = state;
      $("turns").textContent = data.turns;
      if (data.error) showError(data.error);
      setEnabled(state === "running" && !busy);
      if (state === "done" || state === "error") { showResult(data); return; }
    } catch (e) {
      showError("cannot reach the server: " + e);
    }
    timer = setTimeout(poll, state === "grading" ? 500 : 1000);
  }

  function kick() { if (timer) clearTimeout(timer); poll(); }

  async function act(body) {
    busy = true;
    setEnabled(false);
    showError("");
    try {
      const r = await fetch("/api/play/" + encodeURIComponent(sid) + "/action", {
        method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf }, body: JSON.stringify(body),
      });
      if (!r.ok) {
        const j = await r.json().catch(() => ({}));
        showError(j.detail || ("error " + r.status));
      }
    } catch (e) {
      showError("cannot reach the server: " + e);
    } finally {
      busy = false;
      kick();
    }
  }

  document.querySelectorAll("form.tool").forEach((f) => {
    f.addEventListener("submit", (e) => {
      e.preventDefault();
      const args = {};
      f.querySelectorAll("input, textarea").forEach((x) => {
        if (x.type === "checkbox") { if (x.checked) args[x.name] = true; }
        else if (x.value !== "" || x.tagName === "TEXTAREA") args[x.name] = x.value;
      });
      act({ tool: f.dataset.tool, args: args });
    });
  });

  $("submit-form").addEventListener("submit", (e) => {
    e.preventDefault();
    act({ submit: e.target.answer.value });
  });

  setEnabled(false);
  poll();
})();
