// The chat page's progressive enhancement. Sending, the turns and a run's live output are
// HTMX: the composer posts to the server, which renders the user's turn and a live assistant
// turn that follows the run's HTML stream with htmx's SSE extension (step cards, answer text
// and the final answer are all rendered by the server). What is left here: the composer's keys
// and busy state, Stop, Regenerate, Copy and Run on code blocks, and the shortcuts.
(function () {
  "use strict";

  const app = document.getElementById("chat-app");
  if (!app) return;
  const messages = document.getElementById("messages");
  const form = document.getElementById("composer");
  const input = document.getElementById("composer-input");
  const sendButton = document.getElementById("send-button");
  const stopButton = document.getElementById("stop-button");
  const regenerateButton = document.getElementById("regenerate-button");
  const helpButton = document.getElementById("help-button");
  const help = document.getElementById("shortcuts");
  const search = document.getElementById("conversation-search");

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

  function liveTurn() {
    return messages.querySelector(".turn.assistant.live");
  }

  // Busy while a turn is live: Stop shows, sending waits.
  function syncBusy() {
    const busy = Boolean(liveTurn());
    stopButton.hidden = !busy;
    sendButton.disabled = busy;
    regenerateButton.disabled = busy;
    regenerateButton.hidden = !messages.querySelector(".turn.user");
  }

  // --- sending ------------------------------------------------------------------------------

  form.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.elt !== form) return;
    if (!input.value.trim() || liveTurn()) {
      event.preventDefault();
      return;
    }
    input.value = ""; // the request has its values already
  });

  // A refused message (empty, too long, an unknown conversation) is rendered as a failed turn.
  // htmx announces the swap on its target, the messages.
  messages.addEventListener("htmx:beforeSwap", function (event) {
    const status = event.detail.xhr.status;
    if (event.detail.requestConfig.elt === form && status >= 400 && status < 500) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  regenerateButton.addEventListener("click", function () {
    const bubbles = messages.querySelectorAll(".turn.user .bubble");
    if (!bubbles.length) return;
    input.value = bubbles[bubbles.length - 1].textContent;
    form.requestSubmit();
  });

  // --- the live turn ------------------------------------------------------------------------

  htmx.onLoad(function (element) {
    const turn = element.matches(".turn.live") ? element : element.querySelector(".turn.live");
    if (!turn) return;
    // The new conversation's id, for the debug panel's entry.
    app.dataset.conversationId = turn.dataset.conversationId;
    syncBusy();
  });

  // The browser's own reconnects send Last-Event-ID; when htmx has to open a new connection
  // instead (after an error answer), it asks for what came after the last event it has.
  messages.addEventListener("htmx:sseMessage", function (event) {
    const turn = event.target.closest(".turn.live");
    if (!turn || !event.detail.lastEventId) return;
    const url = turn.getAttribute("sse-connect").split("?")[0];
    turn.setAttribute("sse-connect", url + "?after_seq=" + event.detail.lastEventId);
  });

  messages.addEventListener("htmx:sseClose", function (event) {
    if (event.detail.type !== "message") return; // the run's "done", not a node going away
    event.target.classList.remove("live");
    syncBusy();
    document.body.dispatchEvent(new Event("conversations-changed"));
  });

  async function stop() {
    const turn = liveTurn();
    if (!turn) return;
    stopButton.disabled = true;
    try {
      await fetch("/api/runs/" + turn.dataset.runId + "/cancel", {
        method: "POST",
        headers: jsonHeaders(),
      });
    } finally {
      stopButton.disabled = false;
    }
  }

  stopButton.addEventListener("click", stop);

  // --- code blocks: Copy and Run ------------------------------------------------------------

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

  // --- shortcuts ----------------------------------------------------------------------------

  helpButton.addEventListener("click", function () {
    help.hidden = !help.hidden;
  });

  document.addEventListener("keydown", function (event) {
    const typing = event.target.matches("input, textarea, select");
    if (event.key === "Escape") {
      if (!help.hidden) help.hidden = true;
      else stop();
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
})();
