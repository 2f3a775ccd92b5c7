// The status page of mcpx: reads /v1 as the browser it runs in, lives on /v1/events.
// Plain script, no build step.  Everything a server sent is shown as text (textContent),
// never as markup: an upstream's words cannot run in this page.
"use strict";

(function () {
  const EVENT_LIMIT = 200;
  const REFRESH_EVERY_MS = 30000;
  // The kinds /v1/events names its frames with (docs/api.md); a frame's event type is its
  // kind, so each is listened to by name.
  const KINDS = [
    "server.starting", "server.started", "server.exited", "server.restarted",
    "server.failed", "server.reaped", "server.log", "progress", "warning",
    "question.asked", "question.closed", "config.reloaded", "config.reload_failed",
    "task.created", "task.working", "task.input_required", "task.completed",
    "task.failed", "task.cancelled", "resource.updated", "call.finished",
    "policy.input_invalid", "policy.confirm_asked", "policy.confirm_answered",
    "sampling.refused", "sampling.failed", "sampling.answered",
  ];

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "className") node.className = value;
      else if (key in node && typeof value !== "string") node[key] = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function when(seconds) {
    if (typeof seconds !== "number") return "";
    return new Date(seconds * 1000).toLocaleTimeString();
  }

  function took(seconds) {
    if (typeof seconds !== "number") return "";
    return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(2)} s`;
  }

  // --- talking to the daemon -------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const init = {
      method,
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "application/json" },
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let payload = null;
    try {
      payload = await response.json();
    } catch (_) {
      payload = null;
    }
    if (!response.ok) {
      const error = (payload && payload.error) || {};
      throw new ApiError(response.status, error.code || "http_error",
        error.message || `${method} ${path} answered ${response.status}`);
    }
    return payload;
  }

  function problem(text) {
    const node = $("problem");
    node.textContent = text || "";
    node.hidden = !text;
  }

  function explain(error) {
    if (error instanceof ApiError && error.status === 401) {
      return "The daemon asks this browser to sign in: run `mcpx status --open` as the " +
        "daemon's user (it opens a one-time link), or see docs/status-page.md.";
    }
    return error.message || String(error);
  }

  // --- servers -------------------------------------------------------------------

  function renderServers(servers) {
    const body = $("servers");
    body.replaceChildren(...servers.map((server) => {
      let error = null;
      if (server.last_error) {
        error = el("pre", { className: "last-error", text: server.last_error });
      }
      let state = server.state;
      if (typeof server.retry_in === "number" && server.retry_in >= 1) {
        state += ` (next start in ${Math.round(server.retry_in)}s)`;
      }
      return el("tr", { "data-server": server.name },
        el("td", { className: "mono nowrap", text: server.name }),
        el("td", { className: `nowrap state-${server.state}`, text: state }),
        el("td", { text: server.instances }),
        el("td", { text: server.in_flight ?? 0 }),
        el("td", { className: "nowrap", text: `${server.transport}${server.scope ? ", " + server.scope : ""}` }),
        el("td", { className: "mono nowrap", text: server.revision || "" }),
        el("td", {}, error));
    }));
  }

  // --- questions -----------------------------------------------------------------

  // What the form of one elicitation asks: [{name, schema, required}], in schema order.
  function fieldsOf(requested) {
    const properties = (requested && requested.properties) || {};
    const required = new Set(Array.isArray(requested && requested.required) ? requested.required : []);
    return Object.entries(properties).map(([name, schema]) => ({
      name, schema: schema || {}, required: required.has(name),
    }));
  }

  // The choices of an enum field: [{value, label}], or null for a field without any.
  function choicesOf(schema) {
    if (Array.isArray(schema.enum)) {
      const names = Array.isArray(schema.enumNames) ? schema.enumNames : [];
      return schema.enum.map((value, i) => ({ value, label: String(names[i] ?? value) }));
    }
    const titled = Array.isArray(schema.oneOf) ? schema.oneOf : schema.anyOf;
    if (Array.isArray(titled) && titled.every((option) => option && "const" in option)) {
      return titled.map((option) => ({ value: option.const, label: String(option.title ?? option.const) }));
    }
    return null;
  }

  const INPUT_TYPES = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

  // One field: its row in the form, and how to read its value back (undefined: leave out).
  function fieldControl(questionId, field, index) {
    const { name, schema, required } = field;
    const id = `q-${questionId}-${index}`;
    const title = schema.title || name;
    const label = el("label", { for: id }, title, required ? el("span", { className: "required", text: " *" }) : null);
    const hint = schema.description ? el("span", { className: "hint", text: schema.description }) : null;
    const choices = choicesOf(schema);
    if (schema.type === "boolean") {
      const box = el("input", { type: "checkbox", id, name, checked: schema.default === true });
      return {
        row: el("div", { className: "field check" }, box, label, hint),
        read: () => box.checked,
      };
    }
    if (choices) {
      const select = el("select", { id, name, required: required || undefined });
      if (!required || schema.default === undefined) {
        select.append(el("option", { value: "", text: required ? "choose…" : "(none)" }));
      }
      choices.forEach((choice, i) => {
        const option = el("option", { value: String(i), text: choice.label });
        if (schema.default !== undefined && choice.value === schema.default) option.selected = true;
        select.append(option);
      });
      return {
        row: el("div", { className: "field" }, label, hint, select),
        read: () => (select.value === "" ? undefined : choices[Number(select.value)].value),
      };
    }
    if (schema.type === "number" || schema.type === "integer") {
      const input = el("input", {
        type: "number", id, name,
        step: schema.type === "integer" ? "1" : "any",
        min: schema.minimum, max: schema.maximum,
        required: required || undefined,
        value: schema.default !== undefined ? String(schema.default) : undefined,
      });
      return {
        row: el("div", { className: "field" }, label, hint, input),
        read: () => {
          if (input.value.trim() === "") return undefined;
          return schema.type === "integer" ? parseInt(input.value, 10) : Number(input.value);
        },
      };
    }
    const input = el("input", {
      type: INPUT_TYPES[schema.format] || "text", id, name,
      minlength: schema.minLength, maxlength: schema.maxLength,
      required: required || undefined,
      value: typeof schema.default === "string" ? schema.default : undefined,
    });
    return {
      row: el("div", { className: "field" }, label, hint, input),
      read: () => (input.value === "" && !required ? undefined : input.value),
    };
  }

  function questionCard(question) {
    const params = question.params || {};
    const error = el("div", { className: "error", role: "alert" });
    const meta = el("div", { className: "meta" },
      `${question.server} asks (${question.kind})`,
      question.call_id ? ` for call ${question.call_id}` : "",
      question.deadline ? `, until ${when(question.deadline)}` : "");
    const card = el("div", { className: "question", "data-question": question.id }, meta);
    let readAnswer;
    const form = el("form", {});
    if (question.kind === "elicitation") {
      card.append(el("p", { className: "message", text: params.message || "" }));
      if (params.mode === "url") {
        // Only a web address becomes a link; anything else a server sends is shown as text.
        const url = String(params.url || "");
        const link = /^https?:\/\//i.test(url)
          ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: url })
          : el("code", { text: url });
        card.append(el("p", {}, "Open ", link, ", then accept."));
        readAnswer = () => ({});
      } else {
        const controls = fieldsOf(params.requestedSchema).map((field, i) => fieldControl(question.id, field, i));
        form.append(...controls.map((control) => control.row));
        readAnswer = () => {
          const content = {};
          for (const [i, field] of fieldsOf(params.requestedSchema).entries()) {
            const value = controls[i].read();
            if (value !== undefined) content[field.name] = value;
          }
          return content;
        };
      }
    } else {
      // Sampling and roots: what is asked, and a JSON result to send.
      card.append(el("pre", { className: "params", text: JSON.stringify(params, null, 2) }));
      const area = el("textarea", { name: "result", "aria-label": "result (JSON)", placeholder: question.kind === "roots" ? '{"roots": []}' : '{"role": "assistant", "content": {"type": "text", "text": "…"}, "model": "me"}' });
      form.append(el("div", { className: "field" }, el("label", { text: "Result (JSON)" }), area));
      readAnswer = () => JSON.parse(area.value);
    }
    const accept = el("button", { type: "submit", className: "primary", text: "Accept" });
    const decline = el("button", { type: "button", "data-action": "decline", text: "Decline" });
    const cancel = el("button", { type: "button", "data-action": "cancel", text: "Cancel" });
    form.append(el("div", { className: "actions" }, accept, decline, cancel), error);
    card.append(form);

    async function send(body) {
      for (const button of [accept, decline, cancel]) button.disabled = true;
      error.textContent = "";
      try {
        await api("POST", `/v1/questions/${encodeURIComponent(question.id)}/answer`, { ...body, by: "status-page" });
        card.remove();
        refreshQuestions();
      } catch (e) {
        error.textContent = explain(e);
        for (const button of [accept, decline, cancel]) button.disabled = false;
      }
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!form.reportValidity()) return;
      let answer;
      try {
        answer = readAnswer();
      } catch (e) {
        error.textContent = `not JSON: ${e.message}`;
        return;
      }
      if (question.kind === "elicitation") send({ action: "accept", content: answer });
      else send({ action: "accept", result: answer });
    });
    decline.addEventListener("click", () => send({ action: "decline" }));
    cancel.addEventListener("click", () => send({ action: "cancel" }));
    return card;
  }

  function renderQuestions(questions) {
    const holder = $("questions");
    const shown = new Set(questions.map((q) => q.id));
    // A card being filled in stays as it is; only new questions get a card.
    for (const card of Array.from(holder.children)) {
      if (!shown.has(card.dataset.question)) card.remove();
    }
    const present = new Set(Array.from(holder.children).map((card) => card.dataset.question));
    for (const question of questions) {
      if (!present.has(question.id)) holder.append(questionCard(question));
    }
    $("questions-count").textContent = String(questions.length);
    $("no-questions").hidden = questions.length > 0;
  }

  // --- tasks and calls -------------------------------------------------------------

  function renderTasks(tasks) {
    $("tasks").replaceChildren(...tasks.slice().reverse().map((task) => {
      let action = null;
      if (task.status === "working" || task.status === "input_required") {
        action = el("button", { type: "button", text: "Cancel" });
        action.addEventListener("click", async () => {
          action.disabled = true;
          try {
            await api("POST", `/v1/tasks/${encodeURIComponent(task.id)}/cancel`, {});
          } catch (e) {
            problem(explain(e));
          }
          refreshTasks();
        });
      }
      return el("tr", { "data-task": task.id },
        el("td", { className: "mono", text: task.id }),
        el("td", { className: `status-${task.status}`, text: task.status }),
        el("td", { text: task.server || "" }),
        el("td", { className: "mono", text: task.tool || "" }),
        el("td", { text: when(task.updated) }),
        el("td", { text: task.message || "" }),
        el("td", {}, action));
    }));
    $("tasks-table").hidden = tasks.length === 0;
    $("no-tasks").hidden = tasks.length > 0;
  }

  function callRow(call) {
    return el("tr", { "data-call": `${call.server}/${call.tool}` },
      el("td", { text: when(call.finished ?? call.time) }),
      el("td", { text: call.server }),
      el("td", { className: "mono", text: call.tool }),
      el("td", { text: took(call.seconds) }),
      el("td", { className: `outcome-${call.outcome}`, text: call.outcome }));
  }

  let callLimit = 100;

  function renderCalls(calls) {
    $("calls").replaceChildren(...calls.map(callRow));
    $("calls-table").hidden = calls.length === 0;
    $("no-calls").hidden = calls.length > 0;
    $("calls-limit").textContent = `(the last ${callLimit})`;
  }

  function addCall(event) {
    const body = $("calls");
    body.prepend(callRow(event));
    while (body.children.length > callLimit) body.lastChild.remove();
    $("calls-table").hidden = false;
    $("no-calls").hidden = true;
  }

  // --- refreshing --------------------------------------------------------------------

  async function guarded(work) {
    try {
      await work();
    } catch (e) {
      problem(explain(e));
    }
  }

  const refreshServers = () => guarded(async () => renderServers((await api("GET", "/v1/servers")).servers));
  const refreshQuestions = () => guarded(async () => renderQuestions((await api("GET", "/v1/questions")).questions));
  const refreshTasks = () => guarded(async () => renderTasks((await api("GET", "/v1/tasks")).tasks));
  const refreshCalls = () => guarded(async () => {
    const answer = await api("GET", "/v1/calls");
    callLimit = answer.limit;
    renderCalls(answer.calls);
  });

  async function refreshAll() {
    problem("");
    await Promise.all([refreshServers(), refreshQuestions(), refreshTasks(), refreshCalls()]);
  }

  // Many events in a burst cost one fetch per section.
  const pending = new Map();
  function soon(name, refresh) {
    if (pending.has(name)) return;
    pending.set(name, setTimeout(() => {
      pending.delete(name);
      refresh();
    }, 150));
  }

  // --- live updates ----------------------------------------------------------------

  function logEvent(data) {
    const list = $("events");
    const { kind, server, time, ...rest } = data;
    const detail = Object.keys(rest).length ? " " + JSON.stringify(rest) : "";
    list.prepend(el("li", {},
      el("span", { className: "muted", text: when(time) + " " }),
      el("span", { className: "kind", text: kind }),
      server ? ` ${server}` : "", detail));
    while (list.children.length > EVENT_LIMIT) list.lastChild.remove();
    $("no-events").hidden = true;
  }

  function onEvent(message) {
    let data;
    try {
      data = JSON.parse(message.data);
    } catch (_) {
      return;
    }
    logEvent(data);
    const kind = String(data.kind || "");
    if (kind.startsWith("server.") || kind === "config.reloaded") soon("servers", refreshServers);
    if (kind.startsWith("question.")) soon("questions", refreshQuestions);
    if (kind.startsWith("task.")) soon("tasks", refreshTasks);
    if (kind === "call.finished") {
      addCall(data);
      soon("servers", refreshServers);
    }
  }

  function setLive(state, text) {
    const badge = $("live");
    badge.dataset.state = state;
    badge.textContent = text;
  }

  let stream = null;
  function connect() {
    if (stream) stream.close();
    setLive("connecting", "connecting");
    stream = new EventSource("/v1/events");
    stream.addEventListener("open", () => {
      setLive("live", "live");
      // Whatever happened while the stream was down.
      refreshAll();
    });
    stream.addEventListener("error", () => {
      // EventSource tries again by itself unless the daemon refused the stream.
      setLive(stream.readyState === EventSource.CLOSED ? "lost" : "connecting",
        stream.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting");
      if (stream.readyState === EventSource.CLOSED) setTimeout(connect, 3000);
    });
    stream.addEventListener("dropped", () => {
      // The daemon ended this stream (it fell behind, or the daemon stops): a new one.
      setLive("connecting", "reconnecting");
      setTimeout(connect, 1000);
    });
    for (const kind of KINDS) stream.addEventListener(kind, onEvent);
    stream.addEventListener("message", onEvent);
  }

  async function start() {
    try {
      const health = await api("GET", "/health");
      $("daemon").textContent = `version ${health.version ?? "?"} · pid ${health.pid ?? "?"}`;
    } catch (_) {
      // /health is shown for information only.
    }
    await refreshAll();
    connect();
    setInterval(refreshAll, REFRESH_EVERY_MS);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
