// The chat page: send a message and follow its run's SSE stream (steps, deltas, done), stop
// it on the server, re-attach after a reload, and run code blocks in the sandbox. Every piece
// of untrusted text goes into the page through textContent; answers are rendered as HTML only
// by the server (Markdown sanitised with nh3).
(function () {
  "use strict";

  const app = document.getElementById("chat-app");
  if (!app) return;
  const messages = document.getElementById("messages");
  const form = document.getElementById("composer");
  const input = document.getElementById("composer-input");
  const routeSelect = document.getElementById("route-select");
  const sendButton = document.getElementById("send-button");
  const stopButton = document.getElementById("stop-button");
  const regenerateButton = document.getElementById("regenerate-button");
  const helpButton = document.getElementById("help-button");
  const help = document.getElementById("shortcuts");
  const search = document.getElementById("conversation-search");
  const ROUTE_LABELS = { agent: "Agent", rag: "RAG", chat: "Chat" };

  let conversationId = app.dataset.conversationId || null;
  let current = null; // {runId, lastSeq, turn, text, done, source}

  function csrfToken() {
    try {
      return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
    } catch (e) {
      return "";
    }
  }

  function jsonHeaders() {
    return { "Content-Type": "application/json", "X-CSRFToken": csrfToken() };
  }

  function scrollDown() {
    messages.scrollTop = messages.scrollHeight;
  }

  function setBusy(busy) {
    stopButton.hidden = !busy;
    sendButton.disabled = busy;
    regenerateButton.disabled = busy;
  }

  function fromTemplate(id) {
    return document.getElementById(id).content.firstElementChild.cloneNode(true);
  }

  function addUserTurn(text) {
    const welcome = document.getElementById("welcome");
    if (welcome) welcome.remove();
    const turn = fromTemplate("user-template");
    turn.querySelector(".bubble").textContent = text;
    messages.appendChild(turn);
  }

  function addAssistantTurn() {
    const turn = document.createElement("article");
    turn.className = "turn assistant live";
    const meta = document.createElement("header");
    meta.className = "answer-meta";
    const badge = document.createElement("span");
    badge.className = "badge";
    const model = document.createElement("span");
    model.className = "muted model";
    meta.append(badge, " ", model);
    const steps = document.createElement("div");
    steps.className = "steps";
    const working = document.createElement("div");
    working.className = "working";
    working.textContent = "Working…";
    const body = document.createElement("div");
    body.className = "answer-body";
    const stream = document.createElement("div");
    stream.className = "streaming";
    body.appendChild(stream);
    turn.append(meta, steps, working, body);
    messages.appendChild(turn);
    scrollDown();
    return turn;
  }

  function parseObservation(raw) {
    const text = (raw || "").replace(/^Observation: /, "");
    try {
      const value = JSON.parse(text);
      if (value && typeof value === "object" && ("stdout" in value || "exit_code" in value)) {
        return value;
      }
    } catch (e) {
      /* not JSON: shown as it is */
    }
    return null;
  }

  function fill(card, selector, text, show) {
    const el = card.querySelector(selector);
    el.textContent = text == null ? "" : String(text);
    const field = el.closest(".field");
    if (field && show !== undefined) field.hidden = !show;
  }

  function stepCard(step) {
    const card = fromTemplate("step-template");
    card.classList.toggle("error", Boolean(step.error));
    card.querySelector(".step-status").textContent = step.error ? "✗" : "✓";
    card.querySelector(".step-tool").textContent = step.tool_name || "format";
    card.querySelector(".step-latency").textContent = step.latency_ms + " ms";
    card.querySelector(".step-error-line").textContent = (step.error || "").slice(0, 120);
    fill(card, ".step-thought", step.thought, Boolean(step.thought));
    const args = step.tool_args == null ? "" : JSON.stringify(step.tool_args, null, 2);
    fill(card, ".step-args", args, Boolean(args));
    const program = parseObservation(step.observation);
    card.querySelector(".step-program").hidden = !program;
    if (program) {
      card.querySelector(".step-exit").textContent =
        program.exit_code == null ? "–" : String(program.exit_code);
      card.querySelector(".step-truncated").hidden = !program.truncated;
      card.querySelector(".step-stdout").textContent = program.stdout || "";
      card.querySelector(".step-stdout-field").hidden = !program.stdout;
      card.querySelector(".step-stderr").textContent = program.stderr || "";
      card.querySelector(".step-stderr-field").hidden = !program.stderr;
    }
    fill(card, ".step-observation", step.observation, !program && Boolean(step.observation));
    fill(card, ".step-error", step.error, Boolean(step.error));
    return card;
  }

  function handleEvent(seq, event) {
    const run = current;
    if (!run || seq <= run.lastSeq) return; // replayed already
    run.lastSeq = seq;
    sessionStorage.setItem("devassist-run", JSON.stringify({ runId: run.runId, seq: seq }));
    const turn = run.turn;
    if (event.type === "meta") {
      run.runId = event.run_id;
      turn.dataset.runId = event.run_id;
      const mode = event.agent ? "agent" : event.rag ? "rag" : "chat";
      const badge = turn.querySelector(".badge");
      badge.textContent = ROUTE_LABELS[mode];
      badge.classList.add("route-" + mode);
      turn.querySelector(".model").textContent = event.model || "";
      if (run.stopRequested) stop(); // Stop pressed before the run had an id
      if (event.conversation_id && event.conversation_id !== conversationId) {
        conversationId = event.conversation_id;
        app.dataset.conversationId = conversationId;
        history.replaceState(null, "", "/c/" + conversationId + "/");
        const current = JSON.stringify({ current: conversationId });
        search.setAttribute("hx-vals", current);
        document.getElementById("conversation-list").setAttribute("hx-vals", current);
        document.body.dispatchEvent(new Event("conversations-changed"));
      }
    } else if (event.type === "step") {
      turn.querySelector(".steps").appendChild(stepCard(event));
    } else if (event.type === "delta") {
      turn.querySelector(".working").hidden = true;
      run.text += event.content;
      turn.querySelector(".streaming").textContent = run.text;
    } else if (event.type === "error") {
      const p = document.createElement("p");
      p.className = "run-error";
      p.textContent = event.code === "cancelled" ? "Stopped." : "Failed: " + event.message;
      turn.querySelector(".answer-body").appendChild(p);
    } else if (event.type === "done") {
      finish(run, event.status);
    }
    scrollDown();
  }

  async function finish(run, status) {
    run.done = true;
    if (run.source) run.source.close();
    sessionStorage.removeItem("devassist-run");
    run.turn.classList.remove("live");
    run.turn.querySelector(".working").hidden = true;
    if (status === "completed") {
      const response = await fetch("/ui/chat/runs/" + run.runId + "/answer");
      if (response.ok) {
        // The server's rendering of the stored answer: Markdown sanitised with nh3.
        run.turn.querySelector(".answer-body").innerHTML = await response.text();
      }
    } else if (status === "failed") {
      run.turn.classList.add("failed");
    }
    if (current === run) current = null;
    setBusy(false);
    regenerateButton.hidden = false;
    document.body.dispatchEvent(new Event("conversations-changed"));
  }

  function parseFrames(buffer, onEvent) {
    const frames = buffer.split("\n\n");
    const rest = frames.pop();
    for (const frame of frames) {
      let id = null;
      let data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("id: ")) id = parseInt(line.slice(4), 10);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (id !== null && data) onEvent(id, JSON.parse(data));
    }
    return rest;
  }

  async function send(text) {
    const message = text.trim();
    if (!message || current) return;
    addUserTurn(message);
    const body = { message: message };
    if (conversationId) body.conversation_id = conversationId;
    const route = routeSelect.value;
    if (route === "agent") body.use_agent = true;
    else if (route === "rag") body.use_rag = true;
    else if (route === "chat") {
      body.use_agent = false;
      body.use_rag = false;
    }
    const run = { runId: null, lastSeq: 0, turn: addAssistantTurn(), text: "", done: false };
    current = run;
    setBusy(true);
    let response;
    try {
      response = await fetch("/chat?stream=true", {
        method: "POST",
        headers: jsonHeaders(),
        body: JSON.stringify(body),
      });
    } catch (e) {
      return failBeforeRun(run, "The server cannot be reached.");
    }
    if (!response.ok) {
      let detail = response.statusText;
      try {
        detail = (await response.json()).error.message;
      } catch (e) {
        /* keep the status text */
      }
      return failBeforeRun(run, detail);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = parseFrames(buffer + decoder.decode(value, { stream: true }), handleEvent);
      }
    } catch (e) {
      /* the connection dropped: re-attach below */
    }
    if (!run.done && run.runId) reattach(run);
  }

  function failBeforeRun(run, detail) {
    run.turn.querySelector(".working").hidden = true;
    const p = document.createElement("p");
    p.className = "run-error";
    p.textContent = "Failed: " + detail;
    run.turn.querySelector(".answer-body").appendChild(p);
    run.turn.classList.add("failed");
    current = null;
    setBusy(false);
  }

  function reattach(run) {
    // EventSource sends Last-Event-ID itself when it reconnects.
    const source = new EventSource(
      "/api/runs/" + run.runId + "/events?after_seq=" + run.lastSeq,
    );
    run.source = source;
    source.onmessage = function (message) {
      handleEvent(parseInt(message.lastEventId, 10), JSON.parse(message.data));
    };
  }

  async function stop() {
    const run = current;
    if (!run) return;
    if (!run.runId) {
      run.stopRequested = true;
      return;
    }
    stopButton.disabled = true;
    try {
      await fetch("/api/runs/" + run.runId + "/cancel", { method: "POST", headers: jsonHeaders() });
    } finally {
      stopButton.disabled = false;
    }
  }

  function lastUserMessage() {
    const bubbles = messages.querySelectorAll(".turn.user .bubble");
    return bubbles.length ? bubbles[bubbles.length - 1].textContent : "";
  }

  // --- code blocks: Copy and Run ----------------------------------------------------------

  async function runCode(button) {
    if (button.disabled) return; // one run at a time per block
    const block = button.closest(".codeblock");
    const code = block.querySelector("code").textContent;
    let output = block.querySelector(".code-output");
    if (!output) {
      output = document.createElement("div");
      output.className = "code-output";
      block.appendChild(output);
    }
    button.disabled = true;
    button.textContent = "Running…";
    block.classList.add("running");
    output.replaceChildren();
    try {
      const response = await fetch("/api/sandbox/execute", {
        method: "POST",
        headers: jsonHeaders(),
        body: JSON.stringify({ code: code }),
      });
      const body = await response.json();
      if (!response.ok) {
        addOutput(output, "error", body.error ? body.error.message : response.statusText);
      } else {
        const status = body.timed_out
          ? "timed out"
          : "exit code " + (body.exit_code == null ? "–" : body.exit_code);
        addOutput(output, "status", status + " · " + body.duration_ms + " ms");
        if (body.stdout) addOutput(output, "stdout", body.stdout);
        if (body.stderr) addOutput(output, "stderr", body.stderr);
        if (body.truncated) addOutput(output, "status", "output truncated");
      }
    } catch (e) {
      addOutput(output, "error", "The sandbox cannot be reached.");
    } finally {
      button.disabled = false;
      button.textContent = "Run";
      block.classList.remove("running");
    }
  }

  function addOutput(container, kind, text) {
    const pre = document.createElement("pre");
    pre.className = "out-" + kind;
    pre.textContent = text;
    container.appendChild(pre);
  }

  messages.addEventListener("click", function (event) {
    const target = event.target.closest("button");
    if (!target) return;
    if (target.classList.contains("code-run")) runCode(target);
    else if (target.classList.contains("code-copy")) {
      const code = target.closest(".codeblock").querySelector("code").textContent;
      navigator.clipboard.writeText(code).then(
        function () {
          target.textContent = "Copied";
          setTimeout(function () {
            target.textContent = "Copy";
          }, 1500);
        },
        function () {
          target.textContent = "Copy failed";
        },
      );
    }
  });

  // --- composer and shortcuts -------------------------------------------------------------

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const text = input.value;
    if (!text.trim() || current) return;
    input.value = "";
    send(text);
  });

  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  stopButton.addEventListener("click", stop);
  regenerateButton.addEventListener("click", function () {
    const text = lastUserMessage();
    if (text) send(text);
  });
  helpButton.addEventListener("click", function () {
    help.hidden = !help.hidden;
  });

  document.addEventListener("keydown", function (event) {
    const typing = event.target.matches("input, textarea, select");
    if (event.key === "Escape") {
      if (!help.hidden) help.hidden = true;
      else if (current) stop();
    } else if (event.key === "k" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      search.focus();
    } else if (event.key.toLowerCase() === "o" && event.ctrlKey && event.shiftKey) {
      event.preventDefault();
      window.location.href = "/";
    } else if (!typing && event.key === "/") {
      event.preventDefault();
      input.focus();
    } else if (!typing && event.key === "?") {
      help.hidden = !help.hidden;
    }
  });

  // --- a run still going when the page loaded: re-attach from its first event -------------

  const active = app.dataset.activeRun;
  if (active) {
    const run = { runId: active, lastSeq: 0, turn: addAssistantTurn(), text: "", done: false };
    current = run;
    setBusy(true);
    reattach(run);
  }
})();
