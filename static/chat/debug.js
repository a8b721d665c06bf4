// The debug panel (superusers with debug mode on). The chat header's entry loads the panel, an
// HTMX partial, beside the chat; the panel reloads itself every 2 s while a run is live. This
// script keeps the reader's place across those reloads and does what needs the data: filters
// and search, the timeline's range selection, entries expanded into JSON trees, copying JSON,
// and opening Langfuse links. The data is read from the panel's json_script element and reaches
// the page only through textContent, never as HTML. Its words are translated by the JavaScript
// catalogue (gettext() and friends, loaded by base.html); the words the server put on a row
// (its outcome and status, in data- attributes) are shown as they are.
(function () {
  "use strict";

  const app = document.getElementById("chat-app");
  const host = document.getElementById("debug-panel");
  if (!app || !host) return;

  const ZERO_ID = "00000000-0000-0000-0000-000000000000";
  const MIN_RANGE_S = 2;
  const OPEN_KEY = "devassist-debug-open";

  // What the reader chose; kept while the panel of the same conversation is reloaded.
  let state = freshState(null);
  // The panel's data: the whole view, and its groups and entries by key.
  let data = null;
  const groups = new Map();
  const entries = new Map();
  const searchable = new Map();

  function freshState(conversationId) {
    return {
      conversationId: conversationId,
      filter: "all",
      query: "",
      range: null, // [from, to] in compressed seconds
      expanded: new Set(),
      notes: new Map(), // group key -> [text, link]: what the Langfuse button answered
      scrollTop: 0,
    };
  }

  function panel() {
    return host.querySelector(".dbg");
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function seconds(value) {
    return decimal(value, value < 10 ? 1 : 0) + " s";
  }

  // A stored time (ISO 8601) in the page's language, to the millisecond, in UTC as stored.
  function when(iso) {
    const date = new Date(iso);
    if (isNaN(date)) return iso;
    return date.toLocaleString(document.documentElement.lang || undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3,
      hourCycle: "h23", timeZone: "UTC", timeZoneName: "short",
    });
  }

  // --- the entry in the chat header -------------------------------------------------------

  function entryButton() {
    return document.getElementById("debug-open");
  }

  function syncEntry() {
    const button = entryButton();
    if (!button) return;
    const id = app.dataset.conversationId;
    button.disabled = !id;
    button.title = id
      ? gettext("What the agent did in this conversation, message by message")
      : gettext("The panel shows a conversation: send a message first");
    button.setAttribute("aria-expanded", panel() ? "true" : "false");
  }

  function openPanel() {
    const button = entryButton();
    const id = app.dataset.conversationId;
    if (!button || !id) return;
    sessionStorage.setItem(OPEN_KEY, "1");
    htmx.ajax("GET", button.dataset.url.replace(ZERO_ID, id), {
      target: host,
      swap: "innerHTML settle:0ms",
    });
  }

  function closePanel() {
    sessionStorage.removeItem(OPEN_KEY);
    host.replaceChildren();
  }

  function refresh() {
    const current = panel();
    if (current) htmx.trigger(current, "debug-refresh");
  }

  document.addEventListener("click", function (event) {
    if (!event.target.closest("#debug-open")) return;
    if (panel()) closePanel();
    else openPanel();
  });

  // The server refused the panel (debug mode switched off, no longer a superuser, or the
  // conversation is gone): it closes, and after a 403 the entry goes too.
  document.addEventListener("debug-panel-closed", function (event) {
    closePanel();
    const button = entryButton();
    if (button && event.detail && event.detail.status === 403) button.remove();
  });

  new MutationObserver(syncEntry).observe(host, { childList: true });
  // The chat gives a new conversation its id once the first message is sent.
  new MutationObserver(syncEntry).observe(app, {
    attributes: true,
    attributeFilter: ["data-conversation-id"],
  });
  // A run starting or ending in the chat (Stop shown or hidden), a conversation changing, or the
  // tab coming back: the panel shows the new state (and polls while a run is live).
  const stopButton = document.getElementById("stop-button");
  function chatBusy() {
    return Boolean(stopButton && !stopButton.hidden);
  }
  if (stopButton) {
    new MutationObserver(refresh).observe(stopButton, {
      attributes: true,
      attributeFilter: ["hidden"],
    });
  }
  document.body.addEventListener("conversations-changed", refresh);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") refresh();
  });

  // --- the panel: (re)initialised every time it is loaded ---------------------------------
  // The panel is swapped in with "settle:0ms", so htmx:load comes in the same task as the swap
  // and a reloaded panel never shows, even for a frame, without the reader's filters.

  document.body.addEventListener("htmx:load", function (event) {
    const target = event.target;
    if (target.id === "debug-controls") syncEntry();
    if (target.classList && target.classList.contains("dbg")) init(target);
  });

  function init(root) {
    const id = root.dataset.conversationId;
    if (state.conversationId !== id) state = freshState(id);
    data = JSON.parse(root.querySelector("#dbg-data").textContent);
    groups.clear();
    entries.clear();
    searchable.clear();
    for (const group of data.groups) {
      groups.set(group.key, group);
      for (const entry of group.entries) entries.set(entry.key, entry);
    }
    const search = root.querySelector(".dbg-search");
    if (search.value !== state.query) search.value = state.query;
    for (const button of root.querySelectorAll(".dbg-filter")) {
      button.setAttribute("aria-pressed", String(button.dataset.filter === state.filter));
    }
    for (const row of root.querySelectorAll(".dbg-entry")) {
      if (state.expanded.has(row.dataset.key)) toggleRow(row, true);
    }
    for (const group of root.querySelectorAll(".dbg-group")) {
      const kept = state.notes.get(group.dataset.groupKey);
      if (kept) showNote(group, kept[0], kept[1]);
    }
    applyFilters(root);
    // The chat is running something the panel does not show as live yet (its run is being
    // created): look again shortly; once the run is live, the panel polls by itself.
    if (!root.hasAttribute("data-live") && chatBusy()) setTimeout(refresh, 2000);
    const list = root.querySelector(".dbg-groups");
    list.scrollTop = state.scrollTop;
    list.addEventListener("scroll", function () {
      state.scrollTop = list.scrollTop;
    });
    syncEntry();
  }

  // --- filters, search and the selected range ----------------------------------------------

  function textOf(key) {
    let text = searchable.get(key);
    if (text === undefined) {
      text = JSON.stringify(entries.get(key) || {}).toLowerCase();
      searchable.set(key, text);
    }
    return text;
  }

  function inRange(node) {
    if (!state.range) return true;
    return (
      parseFloat(node.dataset.t0) <= state.range[1] && parseFloat(node.dataset.t1) >= state.range[0]
    );
  }

  function applyFilters(root) {
    const query = state.query.trim().toLowerCase();
    const everything = state.filter === "all" && !query;
    const hidden = new Set();
    let shown = 0;
    let total = 0;
    for (const group of root.querySelectorAll(".dbg-group")) {
      const rows = group.querySelectorAll(".dbg-entry");
      let any = false;
      for (const row of rows) {
        const visible =
          (state.filter === "all" || row.dataset.filters.split(" ").includes(state.filter)) &&
          (!query || textOf(row.dataset.key).includes(query)) &&
          inRange(row);
        row.hidden = !visible;
        if (visible) {
          any = true;
          shown += 1;
        } else {
          hidden.add(row.dataset.key);
        }
        total += 1;
      }
      // A run without entries (cancelled before any output) still shows while nothing filters.
      group.hidden = !(any || (rows.length === 0 && everything && inRange(group)));
    }
    for (const bar of root.querySelectorAll(".dbg-bar")) {
      bar.classList.toggle("dim", hidden.has(bar.dataset.key));
    }
    root.querySelector(".dbg-none").hidden = shown > 0 || total === 0;
    const selection = root.querySelector(".dbg-selection");
    const rangeLine = root.querySelector(".dbg-range");
    const totalS = parseFloat(root.dataset.totalS) || 0;
    if (state.range && totalS > 0) {
      selection.hidden = false;
      selection.style.left = (state.range[0] / totalS) * 100 + "%";
      selection.style.width = ((state.range[1] - state.range[0]) / totalS) * 100 + "%";
      rangeLine.hidden = false;
      rangeLine.querySelector(".dbg-range-text").textContent = interpolate(
        ngettext(
          "Showing %(shown)s of %(total)s entry in %(from)s – %(to)s of the timeline.",
          "Showing %(shown)s of %(total)s entries in %(from)s – %(to)s of the timeline.",
          total,
        ),
        { shown: shown, total: total, from: seconds(state.range[0]), to: seconds(state.range[1]) },
        true,
      );
    } else {
      selection.hidden = true;
      rangeLine.hidden = true;
    }
  }

  // A range of at least MIN_RANGE_S seconds around what was clicked or dragged, within the
  // timeline (all of it when it is shorter).
  function setRange(root, from, to) {
    const total = parseFloat(root.dataset.totalS) || 0;
    let low = Math.min(from, to);
    let high = Math.max(from, to);
    if (high - low < MIN_RANGE_S) {
      const middle = (low + high) / 2;
      low = middle - MIN_RANGE_S / 2;
      high = middle + MIN_RANGE_S / 2;
    }
    if (low < 0) {
      high -= low;
      low = 0;
    }
    if (high > total) {
      low = Math.max(0, low - (high - total));
      high = total;
    }
    state.range = [low, high];
    applyFilters(root);
  }

  function clearRange(root) {
    state.range = null;
    applyFilters(root);
  }

  function secondsAt(track, root, clientX) {
    const box = track.getBoundingClientRect();
    const x = Math.min(Math.max(clientX - box.left, 0), box.width);
    return box.width ? ((parseFloat(root.dataset.totalS) || 0) * x) / box.width : 0;
  }

  let drag = null;

  host.addEventListener("pointerdown", function (event) {
    const track = event.target.closest(".dbg-track");
    if (!track || event.button !== 0) return;
    const root = panel();
    event.preventDefault();
    root.querySelector(".dbg-timeline").focus(); // then the arrow keys and Esc work on it
    track.setPointerCapture(event.pointerId);
    drag = { track: track, from: secondsAt(track, root, event.clientX) };
  });

  host.addEventListener("pointermove", function (event) {
    if (!drag) return;
    const root = panel();
    const to = secondsAt(drag.track, root, event.clientX);
    const total = parseFloat(root.dataset.totalS) || 1;
    const selection = root.querySelector(".dbg-selection");
    selection.hidden = false;
    selection.style.left = (Math.min(drag.from, to) / total) * 100 + "%";
    selection.style.width = (Math.abs(to - drag.from) / total) * 100 + "%";
  });

  host.addEventListener("pointerup", function (event) {
    if (!drag) return;
    const root = panel();
    const current = drag;
    drag = null;
    setRange(root, current.from, secondsAt(current.track, root, event.clientX));
  });

  host.addEventListener("keydown", function (event) {
    const root = panel();
    if (!root) return;
    if (event.key === "Escape") {
      // Inside the panel Esc clears the range; it never stops the chat's run.
      event.stopPropagation();
      if (state.range) clearRange(root);
      return;
    }
    if (!event.target.classList.contains("dbg-timeline")) return;
    if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
    event.preventDefault();
    const total = parseFloat(root.dataset.totalS) || 0;
    if (!state.range) {
      setRange(root, 0, Math.max(MIN_RANGE_S, total / 10));
      return;
    }
    const width = state.range[1] - state.range[0];
    const step = Math.max(total / 10, 1) * (event.key === "ArrowRight" ? 1 : -1);
    const low = Math.min(Math.max(state.range[0] + step, 0), Math.max(total - width, 0));
    setRange(root, low, low + width);
  });

  let searchTimer = null;
  host.addEventListener("input", function (event) {
    if (!event.target.classList.contains("dbg-search")) return;
    state.query = event.target.value;
    clearTimeout(searchTimer);
    searchTimer = setTimeout(function () {
      const root = panel();
      if (root) applyFilters(root);
    }, 120);
  });

  // --- entries: expanded into their facts and a JSON tree ----------------------------------

  function toggleRow(row, open) {
    const button = row.querySelector(".dbg-expand");
    const detail = row.querySelector(".dbg-detail");
    const key = row.dataset.key;
    const expand = open === undefined ? button.getAttribute("aria-expanded") !== "true" : open;
    button.setAttribute("aria-expanded", String(expand));
    detail.hidden = !expand;
    if (!expand) {
      state.expanded.delete(key);
      return;
    }
    state.expanded.add(key);
    if (!detail.firstChild) {
      const entry = entries.get(key) || {};
      detail.append(facts(entry, row.dataset), jsonTree(entry.raw));
    }
  }

  // ``shown``: the row's data- attributes, with its outcome and status as the page words them.
  function facts(entry, shown) {
    const list = el("dl", "dbg-facts");
    const counts = {
      prompt_tokens: pgettext("tokens", "prompt"),
      completion_tokens: pgettext("tokens", "completion"),
      total_tokens: pgettext("tokens", "total"),
    };
    const usage = entry.usage
      ? Object.keys(entry.usage)
          .map(function (name) {
            return (counts[name] || name.replace(/_tokens$/, "")) + " " + entry.usage[name];
          })
          .join(" · ")
      : "";
    const rows = [
      [pgettext("debug fact", "id"), entry.id],
      [pgettext("debug fact", "status"), shown.status || entry.status],
      [pgettext("debug fact", "outcome"), entry.outcome ? shown.outcome || entry.outcome.summary : ""],
      [pgettext("debug fact", "model"), entry.model],
      [pgettext("debug fact", "tokens"), usage],
      [pgettext("debug fact", "created"), entry.created_at ? when(entry.created_at) : ""],
      [pgettext("debug fact", "started"), entry.started_at ? when(entry.started_at) : ""],
      [pgettext("debug fact", "finished"), entry.finished_at ? when(entry.finished_at) : ""],
      [pgettext("debug fact", "duration"), entry.duration_ms == null ? "" : entry.duration_ms + " ms"],
      [pgettext("debug fact", "sequence"), entry.sequence == null ? "" : String(entry.sequence)],
      [
        pgettext("debug fact", "times"),
        entry.timed === false ? gettext("none stored: spans its run on the timeline") : "",
      ],
    ];
    for (const [name, value] of rows) {
      if (!value) continue;
      const item = el("div");
      item.append(el("dt", "", name), el("dd", "", String(value)));
      list.append(item);
    }
    return list;
  }

  function scalar(value) {
    if (typeof value === "string") return el("span", "jt-str", JSON.stringify(value));
    if (typeof value === "number") return el("span", "jt-num", JSON.stringify(value));
    if (typeof value === "boolean") return el("span", "jt-bool", String(value));
    return el("span", "jt-null", "null");
  }

  function label(key) {
    return typeof key === "number" ? el("span", "jt-index", String(key)) : el("span", "jt-key", JSON.stringify(key));
  }

  // Keys and strings are shown as JSON (quoted and escaped), so what is seen is what is stored.
  function jsonNode(key, value, depth) {
    const composite = value !== null && typeof value === "object";
    if (!composite || Object.keys(value).length === 0) {
      const line = el("div", "jt-line");
      if (key !== null) line.append(label(key), ": ");
      if (composite) line.append(el("span", "jt-punct", Array.isArray(value) ? "[]" : "{}"));
      else line.append(scalar(value));
      return line;
    }
    const isArray = Array.isArray(value);
    const keys = isArray
      ? value.map(function (_, index) {
          return index;
        })
      : Object.keys(value);
    const node = el("details", "jt-node");
    const summary = el("summary");
    if (key !== null) summary.append(label(key), ": ");
    summary.append(
      el("span", "jt-punct", isArray ? "[" : "{"),
      el(
        "span",
        "jt-hint",
        interpolate(
          isArray
            ? ngettext("%(count)s item", "%(count)s items", keys.length)
            : ngettext("%(count)s key", "%(count)s keys", keys.length),
          { count: keys.length },
          true,
        ),
      ),
      el("span", "jt-punct", isArray ? "]" : "}"),
    );
    node.append(summary);
    let built = false;
    function build() {
      if (built) return;
      built = true;
      const children = el("div", "jt-children");
      for (const child of keys) children.append(jsonNode(child, value[child], depth + 1));
      node.append(children);
    }
    node.addEventListener("toggle", function () {
      if (node.open) build();
    });
    if (depth < 2) {
      build();
      node.open = true;
    }
    return node;
  }

  function jsonTree(raw) {
    const tree = el("div", "jt");
    tree.append(jsonNode(null, raw === undefined ? null : raw, 0));
    return tree;
  }

  // --- copying JSON ---------------------------------------------------------------------------

  function say(root, text) {
    root.querySelector(".dbg-status").textContent = text;
  }

  // The Clipboard API where the page may use it (HTTPS or localhost); otherwise, or when it
  // fails, a hidden textarea and execCommand("copy"); when that fails too, a dialog with the
  // text selected for the reader to copy. ``what`` names the value ("the entry"), translated.
  async function copyJson(root, value, what) {
    const text = JSON.stringify(value, null, 2);
    const copied = interpolate(gettext("Copied %(what)s as JSON."), { what: what }, true);
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        say(root, copied);
        return;
      } catch (e) {
        /* not allowed here: the fallback below */
      }
    }
    if (copyWithTextarea(text)) say(root, copied);
    else showCopyDialog(text, what);
  }

  function copyWithTextarea(text) {
    const focused = document.activeElement;
    const area = el("textarea", "dbg-copy-buffer");
    area.value = text;
    area.setAttribute("readonly", "");
    document.body.append(area);
    area.select();
    let copied = false;
    try {
      copied = document.execCommand("copy");
    } catch (e) {
      copied = false;
    }
    area.remove();
    if (focused && focused.focus) focused.focus();
    return copied;
  }

  function showCopyDialog(text, what) {
    const dialog = el("dialog", "dbg-copy-dialog");
    dialog.setAttribute("aria-label", interpolate(gettext("Copy %(what)s"), { what: what }, true));
    const heading = el(
      "p",
      "",
      interpolate(
        gettext("This browser does not let the page copy: press Ctrl+C (⌘C) to copy %(what)s."),
        { what: what },
        true,
      ),
    );
    const area = el("textarea", "");
    area.value = text;
    area.readOnly = true;
    area.rows = 16;
    const close = el("button", "secondary", gettext("Close"));
    close.type = "button";
    close.addEventListener("click", function () {
      dialog.close();
    });
    dialog.addEventListener("close", function () {
      dialog.remove();
    });
    dialog.addEventListener("keydown", function (event) {
      if (event.key === "Escape") event.stopPropagation(); // closes the dialog, not the run
    });
    dialog.append(heading, area, close);
    document.body.append(dialog);
    dialog.showModal();
    area.focus();
    area.select();
  }

  // --- Langfuse links ---------------------------------------------------------------------

  // What the Langfuse button answered, kept per group: the panel may be reloaded meanwhile.
  function note(groupKey, text, link) {
    state.notes.set(groupKey, [text, link]);
    const root = panel();
    const group =
      root && root.querySelector('.dbg-group[data-group-key="' + CSS.escape(groupKey) + '"]');
    if (group) showNote(group, text, link);
  }

  function showNote(group, text, link) {
    const line = group.querySelector(".dbg-note");
    line.replaceChildren(text);
    if (link) {
      const anchor = el("a", "", gettext("open the trace"));
      anchor.href = link;
      anchor.target = "_blank";
      anchor.rel = "noopener noreferrer";
      line.append(" ", anchor, pgettext("end of a sentence", "."));
    }
    line.hidden = false;
  }

  function webUrl(value) {
    try {
      const url = new URL(value);
      return url.protocol === "http:" || url.protocol === "https:" ? url : null;
    } catch (e) {
      return null;
    }
  }

  async function openLangfuse(button) {
    const group = button.closest(".dbg-group").dataset.groupKey;
    button.disabled = true;
    note(group, gettext("Looking up the Langfuse trace…"));
    let response;
    let body = null;
    try {
      response = await fetch(button.dataset.url, { headers: { Accept: "application/json" } });
      body = await response.json().catch(function () {
        return null;
      });
    } catch (e) {
      note(group, gettext("The server cannot be reached."));
      return;
    } finally {
      button.disabled = false;
    }
    if (!response.ok || !body) {
      const message = body && body.error ? body.error.message : response.statusText;
      note(
        group,
        interpolate(
          gettext("No Langfuse link: %(message)s (%(status)s)."),
          { message: message, status: response.status },
          true,
        ),
      );
      return;
    }
    if (!body.available) {
      note(
        group,
        body.reason === "trace_not_available"
          ? gettext("There is no Langfuse trace for this run: runs are exported when they end, while Langfuse is configured.")
          : gettext("Langfuse is unavailable: it is not configured, or its address is not valid."),
      );
      return;
    }
    // The server checked the URL; it is checked again here before it is opened.
    const url = webUrl(body.url);
    if (!url) {
      note(group, gettext("Refused to open a Langfuse link that is not http or https."));
      return;
    }
    // Browsers allow a pop-up only shortly after a click; past that it would be blocked.
    if (navigator.userActivation && !navigator.userActivation.isActive) {
      note(group, gettext("The browser blocked the pop-up:"), url.href);
      return;
    }
    window.open(url.href, "_blank", "noopener,noreferrer");
    note(
      group,
      gettext("Opened the Langfuse trace in a new tab. If the browser blocked the pop-up,"),
      url.href,
    );
  }

  // --- the panel's buttons ----------------------------------------------------------------

  host.addEventListener("click", function (event) {
    const button = event.target.closest("button");
    const root = panel();
    if (!button || !root || !root.contains(button)) return;
    const row = button.closest(".dbg-entry");
    const group = button.closest(".dbg-group");
    if (button.classList.contains("dbg-close")) {
      closePanel();
    } else if (button.classList.contains("dbg-filter")) {
      state.filter = button.dataset.filter;
      for (const other of root.querySelectorAll(".dbg-filter")) {
        other.setAttribute("aria-pressed", String(other === button));
      }
      applyFilters(root);
    } else if (button.classList.contains("dbg-expand")) {
      toggleRow(row);
    } else if (button.classList.contains("dbg-copy-entry")) {
      copyJson(root, entries.get(row.dataset.key), gettext("the entry"));
    } else if (button.classList.contains("dbg-copy-group")) {
      copyJson(root, groups.get(group.dataset.groupKey), gettext("the run"));
    } else if (button.classList.contains("dbg-copy-all")) {
      copyJson(root, data, gettext("the whole conversation"));
    } else if (button.classList.contains("dbg-langfuse")) {
      openLangfuse(button);
    } else if (button.classList.contains("dbg-range-reset")) {
      clearRange(root);
    }
  });

  // The panel was open when the page was left: it opens again on the next conversation.
  document.addEventListener("DOMContentLoaded", function () {
    syncEntry();
    if (sessionStorage.getItem(OPEN_KEY) && entryButton() && app.dataset.conversationId) {
      openPanel();
    }
  });
})();
