// The trace page: lazy tree expansion, selection and the detail pane, keyboard navigation,
// jumps to steps anywhere in the tree, and live updates over /api/traces/{id}/watch.
(function () {
  "use strict";
  const view = document.getElementById("trace-view");
  if (!view) return;
  const base = view.dataset.base;
  let lastSeq = Number(view.dataset.lastSeq || 0);
  let completed = view.dataset.status !== "running";

  const tree = () => document.getElementById("tree");
  const rowOf = (id) => document.getElementById("s-" + id);
  const selected = () => tree() && tree().querySelector("li.node.selected");

  function load(url, target, swap) {
    return htmx.ajax("GET", url, { target: target, swap: swap || "innerHTML" });
  }

  function expand(li, open) {
    const ul = li.querySelector(":scope > ul.children");
    if (!ul) return Promise.resolve();
    const wantOpen = open === undefined ? !li.classList.contains("open") : open;
    li.classList.toggle("open", wantOpen);
    li.setAttribute("aria-expanded", String(wantOpen));
    if (wantOpen && !ul.dataset.loaded) {
      ul.dataset.loaded = "1";
      const toggle = li.querySelector(":scope > .row .tog");
      return load(toggle.dataset.children, ul, "innerHTML");
    }
    return Promise.resolve();
  }

  function select(li, opts) {
    if (!li) return;
    const prev = selected();
    if (prev) prev.classList.remove("selected");
    li.classList.add("selected");
    for (let up = li.parentElement.closest("li.node"); up; up = up.parentElement.closest("li.node")) {
      if (!up.classList.contains("open")) expand(up, true);
    }
    li.querySelector(":scope > .row").scrollIntoView({ block: "nearest" });
    const link = li.querySelector(":scope > .row a.name");
    load(link.dataset.detail, "#detail");
    if (!opts || opts.push !== false) {
      history.replaceState(null, "", base + "?step=" + li.dataset.id);
    }
  }

  function jumpTo(id) {
    const li = rowOf(id);
    if (li) {
      select(li);
      return;
    }
    // Not loaded: the server renders the tree with the path to the step opened.
    load(base + "?step=" + id, "#tree", "outerHTML").then(() => select(rowOf(id)));
  }

  function visibleRows() {
    return Array.from(tree().querySelectorAll("li.node")).filter((li) => li.offsetParent !== null);
  }

  function move(delta) {
    const rows = visibleRows();
    if (!rows.length) return;
    const index = rows.indexOf(selected());
    const next = index < 0 ? (delta > 0 ? 0 : rows.length - 1) : index + delta;
    if (next >= 0 && next < rows.length) select(rows[next]);
  }

  function jumpNext(kind) {
    const current = selected();
    const after = current ? current.dataset.seq : 0;
    fetch(base + "next/?kind=" + kind + "&after=" + after, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((body) => {
        if (body.step_id) jumpTo(body.step_id);
        else flash(kind === "error" ? "No errors in this trace." : "No slow steps in this trace.");
      });
  }

  function flash(text) {
    const state = document.getElementById("live-state");
    state.textContent = text;
  }

  view.addEventListener("click", (event) => {
    const toggle = event.target.closest(".tog[data-children]");
    if (toggle) {
      expand(toggle.closest("li.node"));
      return;
    }
    const jump = event.target.closest("[data-jump-to]");
    if (jump) {
      event.preventDefault();
      jumpTo(jump.dataset.jumpTo);
      return;
    }
    const button = event.target.closest("[data-jump]");
    if (button) {
      jumpNext(button.dataset.jump);
      return;
    }
    if (event.target.closest("[data-close-timeline]")) {
      document.getElementById("timeline").innerHTML = "";
      return;
    }
    const row = event.target.closest("li.node > .row");
    if (row && !event.target.closest(".more")) {
      event.preventDefault();
      select(row.parentElement);
    }
  });

  document.addEventListener("keydown", (event) => {
    const tag = (event.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "textarea" || tag === "select" || event.ctrlKey || event.metaKey || event.altKey) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    const current = selected();
    switch (event.key) {
      case "j": case "ArrowDown": move(1); break;
      case "k": case "ArrowUp": move(-1); break;
      case "e": jumpNext("error"); break;
      case "s": jumpNext("slow"); break;
      case "/": document.getElementById("trace-q").focus(); break;
      case "Enter": case "o": if (current) expand(current); break;
      case "ArrowRight": case "l": if (current) expand(current, true); break;
      case "ArrowLeft": case "h": if (current) expand(current, false); break;
      default: return;
    }
    event.preventDefault();
  });

  // However far someone expands, the tree keeps about MAX_ROWS rows: past that, the loaded
  // children of collapsed nodes are dropped, then the earliest window of the longest list of
  // siblings gives way to a "show earlier steps" link (what was dropped loads again on demand).
  const MAX_ROWS = 2000;
  const WINDOW = 50;
  const rowCount = () => tree().querySelectorAll("li.node").length;

  function moreLink(className, url, text) {
    const li = document.createElement("li");
    li.className = className;
    const link = document.createElement("a");
    link.href = url;
    link.textContent = text;
    link.setAttribute("hx-get", url);
    link.setAttribute("hx-target", "closest li");
    link.setAttribute("hx-swap", "outerHTML");
    li.appendChild(link);
    return li;
  }

  // Drops a window of WINDOW rows from the longest loaded list of siblings: its earliest one,
  // or with ``latest`` (after the user loaded earlier steps) its last one, leaving a link that
  // loads it again. False when no list is long enough.
  function dropWindow(latest) {
    let longest = null;
    let most = WINDOW;
    tree().querySelectorAll("ul.tree, ul.children[data-loaded]").forEach((ul) => {
      const kids = ul.querySelectorAll(":scope > li.node");
      if (kids.length > most && !ul.querySelector(".selected")) {
        longest = ul;
        most = kids.length;
      }
    });
    if (!longest) return false;
    const kids = Array.from(longest.querySelectorAll(":scope > li.node"));
    const owner = longest.closest("li.node");
    const children = owner ? owner.querySelector(":scope > .row .tog").dataset.children
                           : base + "children/root/";
    if (latest) {
      const dropped = kids.slice(kids.length - WINDOW);
      if (dropped[0].dataset.index === undefined) return false;
      const next = longest.querySelector(":scope > li.more:not(.prev)");
      if (next) next.remove();
      dropped.forEach((li) => li.remove());
      const url = children + "?offset=" + dropped[0].dataset.index + "&dir=next";
      const li = moreLink("more", url, "show more steps");
      longest.appendChild(li);
      htmx.process(li);
      return true;
    }
    const first = kids[WINDOW];
    if (first.dataset.index === undefined) return false;
    const prev = longest.querySelector(":scope > li.more.prev");
    if (prev) prev.remove();
    kids.slice(0, WINDOW).forEach((li) => li.remove());
    const offset = Math.max(0, Number(first.dataset.index) - WINDOW);
    const li = moreLink("more prev", children + "?offset=" + offset + "&dir=prev", "show earlier steps");
    longest.insertBefore(li, first);
    htmx.process(li);
    return true;
  }

  function prune(event) {
    if (!tree() || rowCount() <= MAX_ROWS) return;
    tree().querySelectorAll("li.node:not(.open) > ul.children[data-loaded]").forEach((ul) => {
      if (ul.querySelector(".selected")) return;
      ul.innerHTML = "";
      delete ul.dataset.loaded;
    });
    const config = event && event.detail && event.detail.requestConfig;
    const latest = Boolean(config && String(config.path).includes("dir=prev"));
    while (rowCount() > MAX_ROWS && dropWindow(latest)) { /* one window at a time */ }
  }
  document.body.addEventListener("htmx:afterSettle", prune);

  // A deep link (or a jump that re-rendered the tree) names the selected step.
  function selectFromTree() {
    const id = tree() && tree().dataset.selected;
    if (id && rowOf(id) && !selected()) select(rowOf(id), { push: false });
  }
  selectFromTree();

  // --- live ------------------------------------------------------------------------------------

  function formatMs(value) {
    if (value === null || value === undefined) return "—";
    if (value < 1000) return Math.round(value) + " ms";
    const s = value / 1000;
    if (s < 60) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  }

  function setTotals(totals) {
    if (!totals) return;
    for (const [name, value] of Object.entries(totals)) {
      const cell = view.querySelector('[data-total="' + name + '"]');
      if (!cell) continue;
      if (name === "total_cost") cell.textContent = Number(value).toFixed(4);
      else if (name === "total_duration_ms") cell.textContent = formatMs(value);
      else cell.textContent = value;
      if (name === "error_count") cell.classList.toggle("has-errors", value > 0);
    }
  }

  const pending = new Set();
  const added = new Set();  // rows to insert: only steps that step_added announced
  let flushTimer = null;

  function queue(id) {
    pending.add(id);
    if (!flushTimer) flushTimer = setTimeout(flush, 150);
  }

  function ancestorsInDom(parentId) {
    const ids = [];
    for (let li = parentId ? rowOf(parentId) : null; li; li = li.parentElement.closest("li.node")) {
      ids.push(li.dataset.id);
    }
    return ids;
  }

  function flush() {
    flushTimer = null;
    const ids = Array.from(pending);
    pending.clear();
    if (!ids.length) return;
    fetch(base + "rows/?ids=" + ids.join(","), { credentials: "same-origin" })
      .then((r) => r.text())
      .then((html) => {
        const box = document.createElement("div");
        box.innerHTML = html;
        box.querySelectorAll("template").forEach(place);
        htmx.process(tree());
      });
  }

  function place(template) {
    const fresh = template.content.querySelector("li.node");
    const existing = rowOf(template.dataset.id);
    if (existing) {
      const keep = ["open", "selected"].filter((c) => existing.classList.contains(c));
      for (const attr of Array.from(fresh.attributes)) {
        if (attr.name !== "aria-expanded") existing.setAttribute(attr.name, attr.value);
      }
      keep.forEach((c) => existing.classList.add(c));
      existing.querySelector(":scope > .row").replaceWith(fresh.querySelector(":scope > .row"));
      if (!existing.querySelector(":scope > ul.children")) {
        const ul = fresh.querySelector(":scope > ul.children");
        if (ul) existing.appendChild(ul);
      }
      return;
    }
    if (!added.has(template.dataset.id)) return;  // in a window that is not loaded
    added.delete(template.dataset.id);
    const parentId = template.dataset.parent;
    const container = parentId
      ? (rowOf(parentId) && rowOf(parentId).querySelector(":scope > ul.children"))
      : tree().querySelector("ul.tree");
    if (!container || (parentId && !container.dataset.loaded)) return;
    if (container.querySelector(":scope > li.more:not(.prev)")) return;  // further windows wait
    const empty = container.querySelector(":scope > li.empty");
    if (empty) empty.remove();
    fresh.classList.add("fresh");
    container.appendChild(fresh);
  }

  function onEvent(message) {
    if (message.seq > lastSeq && message.event !== "connected") lastSeq = message.seq;
    if (message.event === "connected") {
      flash("live");
      setTotals(message.trace);
    } else if (message.event === "step_added") {
      setTotals(message.totals);
      added.add(message.step.step_id);
      queue(message.step.step_id);
      ancestorsInDom(message.step.parent_id).forEach(queue);
    } else if (message.event === "step_updated") {
      setTotals(message.totals);
      queue(message.step_id);
    } else if (message.event === "trace_completed") {
      completed = true;
      setTotals(message.trace);
      const badge = document.getElementById("trace-status");
      badge.textContent = message.trace.status;
      badge.className = "status-badge st-" + message.trace.status;
      view.dataset.status = message.trace.status;
      flash("finished: " + message.trace.status);
    }
  }

  let retry = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + view.dataset.watch + "?after_seq=" + lastSeq);
    socket.onopen = () => { retry = 500; };
    socket.onmessage = (event) => onEvent(JSON.parse(event.data));
    socket.onclose = () => {
      if (completed) { socket.close(); return; }
      flash("connection lost, reconnecting…");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
    view.socket = socket;
  }
  if (!completed) connect();

  setInterval(() => {
    view.querySelectorAll(".elapsed[data-started]").forEach((el) => {
      const started = Date.parse(el.dataset.started);
      if (!isNaN(started)) el.textContent = formatMs(Math.max(0, Date.now() - started)) + "…";
    });
  }, 1000);
})();
