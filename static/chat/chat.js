// The chat page's progressive enhancement. Sending, the turns and a run's live output are
// HTMX: the composer posts to the server, which renders the user's turn and a live assistant
// turn that follows the run's HTML stream with htmx's SSE extension (step cards, answer text
// and the final answer are all rendered by the server). What is left here: the composer's keys
// and busy state, a running step's elapsed time, Stop, the streaming answer shown as Markdown,
// following the stream while the reader is at the bottom, Copy and Run on code blocks, the
// message actions' local parts (Copy, the edit form, busy buttons), toasts, the rename dialog,
// and the shortcuts. Regenerate, versions, edit-and-resend, feedback, rename, delete and undo
// are HTMX actions whose markup the server renders. The words this script writes are
// translated by the JavaScript catalogue (gettext() and friends, loaded by base.html).
(function () {
  "use strict";

  const app = document.getElementById("chat-app");
  if (!app) return;
  const messages = document.getElementById("messages");
  const form = document.getElementById("composer");
  const input = document.getElementById("composer-input");
  const sendButton = document.getElementById("send-button");
  const stopButton = document.getElementById("stop-button");
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

  // Busy while a turn is live: Stop shows, sending waits, and so do the actions that change
  // the branch shown (regenerate, edit and resend, versions), which the server refuses then.
  function syncBusy() {
    const busy = Boolean(liveTurn());
    stopButton.hidden = !busy;
    sendButton.disabled = busy;
    messages.querySelectorAll("[data-branching]").forEach(function (button) {
      if (busy) button.setAttribute("aria-disabled", "true");
      else button.removeAttribute("aria-disabled");
    });
    app.classList.toggle("busy", busy);
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

  // Refusals the server renders are swapped in like answers: a refused message (empty, too
  // long, an unknown conversation) as a failed turn, a refused action as a toast, a refused
  // rename as the dialog with its error.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    const status = event.detail.xhr.status;
    if (status < 400 || status >= 500) return;
    const fromComposer = event.detail.requestConfig.elt === form;
    const toToast = event.detail.xhr.getResponseHeader("HX-Retarget") === "#toasts";
    const toDialog = event.detail.target && event.detail.target.id === "dialog-host";
    if (fromComposer || toToast || toDialog) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // A branching action while a turn is live is held back here (the server would refuse it).
  document.body.addEventListener("htmx:confirm", function (event) {
    const elt = event.detail.elt;
    if (liveTurn() && elt.matches("[data-branching], .edit-form")) event.preventDefault();
  });

  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  // --- files to send ------------------------------------------------------------------------
  // The attach button opens the form's file input; files dropped on the chat join it. The
  // chips list them (each can be taken out again); the form sends them with the message.

  const fileInput = document.getElementById("composer-file-input");
  const fileChips = document.getElementById("composer-files");
  const chatMain = form.closest(".chat-main");

  function sizeText(bytes) {
    if (bytes < 1024) return interpolate(gettext("%s bytes"), [bytes]);
    if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + " KB";
    return (bytes / 1024 / 1024).toFixed(1) + " MB";
  }

  function setFiles(files) {
    const transfer = new DataTransfer();
    files.forEach((file) => transfer.items.add(file));
    fileInput.files = transfer.files;
    showFiles();
  }

  function showFiles() {
    const files = Array.from(fileInput.files);
    fileChips.replaceChildren(
      ...files.map(function (file, index) {
        const chip = document.createElement("li");
        const label = document.createElement("span");
        label.className = "attachment-chip";
        label.textContent = file.name + " ";
        const size = document.createElement("span");
        size.className = "muted";
        size.textContent = sizeText(file.size);
        label.appendChild(size);
        const remove = document.createElement("button");
        remove.type = "button";
        remove.className = "icon file-remove";
        remove.textContent = "×";
        remove.setAttribute("aria-label", interpolate(gettext("Remove %s"), [file.name]));
        remove.addEventListener("click", function () {
          setFiles(files.filter((_, other) => other !== index));
          input.focus();
        });
        chip.append(label, remove);
        return chip;
      }),
    );
    fileChips.hidden = files.length === 0;
  }

  document.getElementById("attach-button").addEventListener("click", () => fileInput.click());
  fileInput.addEventListener("change", showFiles);
  chatMain.addEventListener("dragover", function (event) {
    if (!event.dataTransfer || !Array.from(event.dataTransfer.types).includes("Files")) return;
    event.preventDefault();
    chatMain.classList.add("dropping");
  });
  chatMain.addEventListener("dragleave", function (event) {
    if (!chatMain.contains(event.relatedTarget)) chatMain.classList.remove("dropping");
  });
  chatMain.addEventListener("drop", function (event) {
    if (!event.dataTransfer || !event.dataTransfer.files.length) return;
    event.preventDefault();
    chatMain.classList.remove("dropping");
    setFiles([...Array.from(fileInput.files), ...Array.from(event.dataTransfer.files)]);
  });
  form.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt === form) setFiles([]);
  });

  // --- message actions ----------------------------------------------------------------------

  // Copy ``text`` and say so on ``button`` for 1.5 s: in its label for an icon button (the
  // message actions), in its text for a worded one (a code block's Copy). A page served over
  // plain HTTP has no clipboard: that says "Copy failed" too.
  function copyText(button, text) {
    if (button.classList.contains("done")) return; // still saying "Copied"
    const icon = button.hasAttribute("aria-label");
    const before = icon ? button.getAttribute("aria-label") : button.textContent;
    const say = function (words) {
      if (icon) button.setAttribute("aria-label", words);
      else button.textContent = words;
    };
    const copied = navigator.clipboard
      ? navigator.clipboard.writeText(text)
      : Promise.reject(new Error("no clipboard"));
    copied.then(
      function () {
        button.classList.add("done");
        say(gettext("Copied"));
        setTimeout(function () {
          button.classList.remove("done");
          say(before);
        }, 1500);
      },
      function () {
        say(gettext("Copy failed"));
      },
    );
  }

  function openEdit(turn) {
    const editForm = turn.querySelector(".edit-form");
    if (!editForm || liveTurn()) return;
    editForm.hidden = false;
    turn.classList.add("editing");
    const area = editForm.querySelector("textarea");
    area.focus();
    area.setSelectionRange(area.value.length, area.value.length);
  }

  function closeEdit(turn) {
    const editForm = turn.querySelector(".edit-form");
    editForm.hidden = true;
    editForm.reset();
    turn.classList.remove("editing");
    const edit = turn.querySelector(".action-edit");
    if (edit) edit.focus();
  }

  messages.addEventListener("keydown", function (event) {
    const area = event.target.closest(".edit-form textarea");
    if (!area) return;
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      closeEdit(area.closest(".turn"));
    } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      area.form.requestSubmit();
    }
  });

  // --- toasts and the dialog ----------------------------------------------------------------

  const toasts = document.getElementById("toasts");
  const dialogHost = document.getElementById("dialog-host");

  function armToast(toast) {
    if (toast.dataset.armed) return;
    toast.dataset.armed = "1";
    const seconds = Number(toast.dataset.timeoutS) || 6;
    setTimeout(function () {
      if (!toast.matches(":focus-within")) toast.remove();
      else toast.addEventListener("focusout", () => toast.remove(), { once: true });
    }, seconds * 1000);
  }

  toasts.addEventListener("click", function (event) {
    const close = event.target.closest(".toast-close");
    if (close) close.closest(".toast").remove();
  });

  dialogHost.addEventListener("click", function (event) {
    const cancel = event.target.closest(".dialog-cancel");
    if (cancel) cancel.closest("dialog").close();
  });

  // The dialog the server rendered opens modally (focus goes into it, Escape closes it);
  // closed, it goes, and the focus returns where it was.
  let dialogOpener = null;
  document.body.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.target === dialogHost && !dialogHost.contains(event.detail.elt)) {
      dialogOpener = event.detail.elt;
    }
  });

  htmx.onLoad(function (element) {
    element.querySelectorAll(".toast").forEach(armToast);
    if (element.matches && element.matches(".toast")) armToast(element);
    const dialog = element.matches && element.matches("dialog") ? element : element.querySelector("dialog");
    if (dialog && dialogHost.contains(dialog) && !dialog.open) {
      dialog.addEventListener("close", function () {
        dialog.remove();
        if (dialogOpener && dialogOpener.isConnected) dialogOpener.focus();
      });
      dialog.showModal();
    }
    if (messages.contains(element) || element === messages) syncBusy();
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
    // A tool call the run's end cut short (Stop) never gets its finished card.
    event.target.querySelectorAll(".step.running").forEach(function (card) {
      card.classList.replace("running", "stopped");
    });
    event.target.classList.remove("live");
    syncBusy();
    document.body.dispatchEvent(new Event("conversations-changed"));
  });

  // A running step's card (rendered by the server) shows the time since its tool started.
  setInterval(function () {
    messages.querySelectorAll(".step.running .step-elapsed").forEach(function (elapsed) {
      const started = Number(elapsed.dataset.startedAtMs);
      if (started) elapsed.textContent = decimal(Math.max(0, Date.now() - started) / 1000, 1) + " s";
    });
  }, 100);

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

  // --- the answer as Markdown while it streams ----------------------------------------------
  // The deltas (escaped by the server) accumulate as text in the live turn's hidden
  // `.streaming` element; at most once per animation frame that text is rendered into the
  // `.markdown.streamed` element beside it with markdown-it, set up as the server's
  // markdown-it-py (raw HTML off, http(s)/mailto and relative links only) and its output
  // checked against the server's allow-list as well. Completed blocks keep their nodes; only
  // the last, open one is parsed and rendered again (`renderStreamed`). The `done` event
  // replaces it all with the server's rendering, the source of truth, of the same shape.

  const markdown = window.markdownit("commonmark", { html: false, linkify: false, breaks: true });
  markdown.enable(["table", "strikethrough"]);
  const SAFE_URL = /^(?:https?:|mailto:|[^:]*(?:[/?#]|$))/i;
  markdown.validateLink = function (url) {
    return SAFE_URL.test(url.trim());
  };
  // Python fences are runnable (devassist/markdown.py's RUNNABLE); the buttons stay disabled
  // until the final rendering, when the block is complete.
  const RUNNABLE = new Set(["python", "py", "python3", "py3"]);
  markdown.renderer.rules.fence = markdown.renderer.rules.code_block = function (tokens, idx) {
    const token = tokens[idx];
    const language = (token.info || "").trim().split(/\s+/)[0].toLowerCase();
    const escape = markdown.utils.escapeHtml;
    const run =
      RUNNABLE.has(language) && token.content.trim()
        ? '<button type="button" class="code-run" disabled>' + escape(pgettext("code block", "Run")) + "</button>"
        : "";
    return (
      '<div class="codeblock" data-lang="' + escape(language) + '"><div class="code-tools">' +
      '<span class="code-lang">' + escape(language || pgettext("code block", "code")) + "</span>" +
      '<button type="button" class="code-copy" disabled>' + escape(gettext("Copy")) + "</button>" + run + "</div>" +
      '<pre class="highlight"><code>' + escape(token.content) + "</code></pre></div>\n"
    );
  };

  // The tags and attributes devassist/markdown.py lets through nh3.
  const ALLOWED = {
    A: ["href", "title"], B: [], BLOCKQUOTE: [], BR: [], BUTTON: ["type", "class", "disabled"],
    CODE: ["class"], DEL: [], DIV: ["class", "data-lang"], EM: [], H1: [], H2: [], H3: [],
    H4: [], H5: [], H6: [], HR: [], I: [], IMG: ["src", "alt", "title"], LI: [],
    OL: ["start"], P: [], PRE: ["class"], S: [], SPAN: ["class"], STRONG: [], SUB: [],
    SUP: [], TABLE: [], TBODY: [], TD: [], TH: [], THEAD: [], TR: [], UL: [],
  };

  // `html` parsed in an inert template (nothing in it loads or runs), kept to the allow-list.
  function safeNodes(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    for (const element of Array.from(template.content.querySelectorAll("*"))) {
      const allowed = ALLOWED[element.tagName];
      if (!allowed) {
        element.remove();
        continue;
      }
      for (const attribute of Array.from(element.attributes)) {
        const url = attribute.name === "href" || attribute.name === "src";
        if (!allowed.includes(attribute.name) || (url && !SAFE_URL.test(attribute.value))) {
          element.removeAttribute(attribute.name);
        }
      }
      if (element.tagName === "A") element.rel = "noopener noreferrer nofollow";
    }
    return Array.from(template.content.childNodes);
  }

  // The top-level blocks of the text's `lines` from line `from` on: each its tokens, its
  // source (what it is compared by) and the line after it.
  function topLevelBlocks(lines, from, env) {
    const blocks = [];
    let current = null;
    for (const token of markdown.parse(lines.slice(from).join("\n"), env)) {
      if (!current) {
        const [start, end] = token.map || [0, 0];
        // A line break after the block's last line changes an open code block's content.
        const after = from + end < lines.length ? "\n" : "";
        const source = lines.slice(from + start, from + end).join("\n") + after;
        current = { tokens: [], key: token.type + "\n" + source, end: from + end };
      }
      current.tokens.push(token);
      if (token.level === 0 && token.nesting <= 0) {
        blocks.push(current);
        current = null;
      }
    }
    return blocks;
  }

  const streamed = new WeakMap(); // a `.markdown.streamed` element -> its rendered blocks

  // Text that follows can only change the last, open block (Markdown's blocks take lines
  // while they are open), so the text is parsed from the end of the last but one, and the
  // last is rendered again only if its source changed.
  function renderStreamed(source) {
    const view = source.parentElement.querySelector(".markdown.streamed");
    if (!view) return;
    const lines = source.textContent.split("\n");
    const shown = streamed.get(view) || [];
    const next = shown.slice(0, -1);
    const last = shown[shown.length - 1];
    const env = {};
    const blocks = topLevelBlocks(lines, next.length ? next[next.length - 1].end : 0, env);
    if (last && blocks.length && blocks[0].key === last.key) {
      blocks.shift();
      next.push(last);
    } else if (last) {
      last.nodes.forEach((node) => node.remove());
    }
    for (const block of blocks) {
      const nodes = safeNodes(markdown.renderer.render(block.tokens, markdown.options, env));
      view.append(...nodes);
      next.push({ key: block.key, end: block.end, nodes: nodes });
    }
    streamed.set(view, next);
  }

  const pendingSources = new Set();

  messages.addEventListener("htmx:sseMessage", function (event) {
    if (event.detail.type === "delta" && event.target.matches(".streaming")) {
      pendingSources.add(event.target);
      scheduleFrame();
    }
  });

  // --- following the stream -----------------------------------------------------------------
  // While the reader is at the bottom, new content (steps, text, the final answer, whatever
  // changes in the messages) scrolls into view once per frame; once they move up, their
  // position is held and "Jump to latest" takes them down and follows again. Moving up is
  // told apart from content growing: wheel up, touch, the scrollbar, the keys that scroll up,
  // or a scroll that lowered scrollTop; reaching the bottom again resumes following.

  const NEAR_BOTTOM_PX = 24;
  const jumpButton = document.getElementById("jump-latest");
  let following = distanceFromBottom(scroller()) <= NEAR_BOTTOM_PX;
  let lastScrollTop = scroller().scrollTop;
  let frameRequested = false;

  // The messages scroll on their own on a desktop; on a narrow screen the page may scroll.
  function scroller() {
    return messages.scrollHeight > messages.clientHeight ? messages : document.scrollingElement;
  }

  function distanceFromBottom(element) {
    return element.scrollHeight - element.scrollTop - element.clientHeight;
  }

  function scheduleFrame() {
    if (frameRequested) return;
    frameRequested = true;
    requestAnimationFrame(onFrame);
  }

  function onFrame() {
    frameRequested = false;
    for (const source of pendingSources) {
      if (source.isConnected) renderStreamed(source);
    }
    pendingSources.clear();
    const element = scroller();
    if (following && distanceFromBottom(element) > 0) {
      element.scrollTop = element.scrollHeight;
      lastScrollTop = element.scrollTop;
    }
    jumpButton.hidden = following || distanceFromBottom(element) <= NEAR_BOTTOM_PX;
  }

  function stopFollowing() {
    following = false;
    scheduleFrame();
  }

  function onScroll() {
    const element = scroller();
    const top = element.scrollTop;
    if (top < lastScrollTop && distanceFromBottom(element) > NEAR_BOTTOM_PX) following = false;
    else if (top >= lastScrollTop && distanceFromBottom(element) <= NEAR_BOTTOM_PX) following = true;
    lastScrollTop = top;
    scheduleFrame();
  }

  function follow() {
    following = true;
    scheduleFrame();
  }

  // A keyboard user's focus goes on to the composer rather than the button that disappears.
  function jumpToLatest() {
    if (jumpButton.matches(":focus-visible")) input.focus({ preventScroll: true });
    follow();
  }

  new MutationObserver(scheduleFrame).observe(messages, {
    childList: true,
    subtree: true,
    characterData: true,
  });
  messages.addEventListener("scroll", onScroll, { passive: true });
  window.addEventListener("scroll", onScroll, { passive: true });
  messages.addEventListener(
    "wheel",
    function (event) {
      if (event.deltaY < 0) stopFollowing();
    },
    { passive: true },
  );
  messages.addEventListener("touchmove", stopFollowing, { passive: true });
  messages.addEventListener("pointerdown", function (event) {
    if (event.target === messages && event.offsetX >= messages.clientWidth) stopFollowing();
  });
  document.addEventListener("keydown", function (event) {
    const typing = event.target.matches("input, textarea, select");
    if (!typing && ["PageUp", "Home", "ArrowUp"].includes(event.key)) stopFollowing();
  });
  // Sending is a move to the latest: the new turn is followed.
  // So is an action that starts a run (regenerate, edit and resend): its live turn is last.
  messages.addEventListener("htmx:afterSwap", function (event) {
    const config = event.detail.requestConfig;
    if (!config) return;
    if (config.elt === form || (event.detail.target === messages && liveTurn())) follow();
  });
  jumpButton.addEventListener("click", jumpToLatest);
  scheduleFrame();

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
    button.textContent = pgettext("code block", "Running…");
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
          ? pgettext("program flag", "timed out")
          : interpolate(gettext("exit code %(code)s"), { code: body.exit_code == null ? "–" : body.exit_code }, true);
        addOutput(output, "status", status + " · " + body.duration_ms + " ms");
        if (body.stdout) addOutput(output, "stdout", body.stdout);
        if (body.stderr) addOutput(output, "stderr", body.stderr);
        if (body.truncated) addOutput(output, "status", pgettext("program flag", "output truncated"));
      }
    } catch (e) {
      addOutput(output, "error", gettext("The sandbox cannot be reached."));
    } finally {
      button.disabled = false;
      button.textContent = pgettext("code block", "Run");
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
    else if (target.classList.contains("action-copy")) {
      const source = target.closest(".turn").querySelector("template.message-source");
      copyText(target, source ? source.content.textContent : "");
    } else if (target.classList.contains("action-edit")) openEdit(target.closest(".turn"));
    else if (target.classList.contains("edit-cancel")) closeEdit(target.closest(".turn"));
    else if (target.classList.contains("code-copy")) {
      copyText(target, target.closest(".codeblock").querySelector("code").textContent);
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
