// The trace page: lazy tree expansion, selection and the detail pane, keyboard navigation,
// jumps to steps anywhere in the tree, and live updates over /api/traces/{id}/watch. Its words
// are translated by the JavaScript catalogue (gettext() and friends, loaded by base.html).
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

  // Signed out meanwhile (in another tab, or the session ended), the page's own fetches are
  // redirected to the login page (they are never otherwise): the page goes there, to come back
  // here, as its htmx requests do (devassist.middleware.LoginRequiredMiddleware).
  function signedIn(response) {
    if (response.redirected) {
      const login = new URL(response.url);
      location.assign(login.pathname + "?next=" + encodeURIComponent(location.pathname + location.search));
      throw new Error("signed out");
    }
    return response;
  }

  // Each load is its target's own request: htmx.ajax without a source makes every call the
  // body's, and a request made while the body has one in flight is queued and replaced by the
  // next (its promise resolved at once): of three children loads started together, the second
  // never ran.
  function load(url, target, swap) {
    const element = typeof target === "string" ? document.querySelector(target) : target;
    if (!element) return Promise.resolve();  // nothing to load into (a notice not shown)
    return htmx.ajax("GET", url, { source: element, target: element, swap: swap || "innerHTML" });
  }

  // Opens or closes a step's children (toggles without ``open``), loading their first window
  // the first time; ``asReload``: with the levels below opened as a reload opens them.
  function expand(li, open, asReload) {
    const ul = li.querySelector(":scope > ul.children");
    if (!ul) return Promise.resolve();
    const wantOpen = open === undefined ? !li.classList.contains("open") : open;
    li.classList.toggle("open", wantOpen);
    li.setAttribute("aria-expanded", String(wantOpen));
    if (wantOpen && !ul.dataset.loaded) {
      ul.dataset.loaded = "1";
      const url = li.querySelector(":scope > .row .tog").dataset.children;
      return load(asReload ? url + "?open=true" : url, ul, "innerHTML");
    }
    return Promise.resolve();
  }

  // The layout's one column (traces.css: the tree above the details).
  const ONE_COLUMN = window.matchMedia("(max-width: 60rem)");

  // Selects a step's row and shows its details; ``reveal`` (a tap on the row): scrolled to
  // them when they are below the tree.
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
    const detail = load(link.dataset.detail, "#detail");
    if (opts && opts.reveal && ONE_COLUMN.matches) {
      // One column (a phone): the details are below the tree, out of sight; a tap shows them.
      detail.then(() => document.getElementById("detail").scrollIntoView({ block: "start" }));
    }
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
    loadTreeAt(id).then(() => select(rowOf(id)));
  }

  // The whole tree as a reload shows it, with the path to the step ``id`` (if any) opened.
  function loadTreeAt(id) {
    return load(base + (id ? "?step=" + id : ""), "#tree", "outerHTML");
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
      .then(signedIn)
      .then((r) => r.json())
      .then((body) => {
        if (body.step_id) jumpTo(body.step_id);
        else flash(kind === "error" ? gettext("No errors in this trace.") : gettext("No slow steps in this trace."));
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
      select(row.parentElement, { reveal: true });
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
      const li = moreLink("more", url, gettext("show more steps"));
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
    const li = moreLink("more prev", children + "?offset=" + offset + "&dir=prev", gettext("show earlier steps"));
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

  // The ms template filter's twin (traces/templatetags/trace_format.py): unit symbols.
  function formatMs(value) {
    if (value === null || value === undefined) return "—";
    if (value < 1000) return Math.round(value) + " ms";
    const s = value / 1000;
    if (s < 60) return decimal(s, 1) + " s";
    return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  }

  function setTotals(totals) {
    if (!totals) return;
    for (const [name, value] of Object.entries(totals)) {
      const cell = view.querySelector('[data-total="' + name + '"]');
      if (!cell) continue;
      if (name === "total_cost") cell.textContent = costText(value);
      else if (name === "total_duration_ms") cell.textContent = formatMs(value);
      else cell.textContent = value;
      if (name === "error_count") cell.classList.toggle("has-errors", value > 0);
    }
  }

  const pending = new Set();
  const added = new Set();  // rows to insert: only steps that step_added announced
  const parents = new Map();  // an announced step's parent, until it is placed
  // Lists of children whose rows moved away while windows of them are not loaded: their
  // windows' offsets and counts no longer hold, so the list is loaded again after the flush.
  const stale = new Set();
  const ROWS_PER_REQUEST = Number(view.dataset.rowsPerRequest);  // the most ids rows/ takes
  let flushTimer = null;
  // Each flush's rows are placed before the next flush asks for its own: a step announced
  // after its parent is placed after it, even when the later answer comes back first. What a
  // flush asks for is settled only then, when the earlier rows are in the page: with a new
  // step come its ancestors that are shown (their rows now have children to open).
  let placing = Promise.resolve();

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
    // The selected step changed (a running tool's live output, its end): its detail follows.
    const current = selected();
    if (current && ids.includes(current.dataset.id)) {
      load(current.querySelector(":scope > .row a.name").dataset.detail, "#detail");
    }
    placing = placing
      .then(() => {
        // Only the rows the page can show: the steps it shows (and their ancestors, whose
        // counts change), and new steps that place() would put in a list. The others load
        // when their list is opened or its next window asked for. In a burst of spans that is
        // nearly all of them: asking for every one took 402 requests during one 10,000-span
        // burst, 3 now (benchmarks/README.md, "2026-12-05 15:12").
        const flushed = new Set(ids);
        const placeable = new Map();  // new step of this flush -> whether place() can put it
        const canPlace = (id) => {
          if (!placeable.has(id)) {
            placeable.set(id, false);  // span ids that form a loop
            const parent = parents.get(id);
            const withIt = parent && flushed.has(parent) && added.has(parent);
            placeable.set(id, withIt ? canPlace(parent) : takesNew(parent));
          }
          return placeable.get(id);
        };
        const ask = new Set();
        ids.forEach((id) => {
          if (!added.has(id)) {
            if (rowOf(id)) ask.add(id);
            return;
          }
          ancestorsInDom(parents.get(id)).forEach((up) => ask.add(up));
          if (canPlace(id)) {
            ask.add(id);
          } else {  // its list loads it when opened
            added.delete(id);
            parents.delete(id);
          }
        });
        if (!ask.size) return [];
        // A burst announces hundreds of steps at once: asked for in parts, placed together.
        const all = Array.from(ask);
        const parts = [];
        for (let i = 0; i < all.length; i += ROWS_PER_REQUEST) {
          const url = base + "rows/?ids=" + all.slice(i, i + ROWS_PER_REQUEST).join(",");
          parts.push(fetch(url, { credentials: "same-origin" }).then(signedIn).then((r) => {
            if (!r.ok) throw new Error(r.statusText);
            return r.text();
          }));
        }
        return Promise.all(parts);
      })
      .then((answers) => {
        const box = document.createElement("div");
        box.innerHTML = answers.join("");
        const templates = Array.from(box.querySelectorAll("template"))
          .sort((a, b) => Number(a.dataset.seq) - Number(b.dataset.seq));
        // Children announced with their parent in this flush, by parent: a new parent with
        // more children than that had some before it (OTLP spans come children first).
        const arriving = {};
        templates.forEach((t) => {
          if (added.has(t.dataset.id)) arriving[t.dataset.parent] = (arriving[t.dataset.parent] || 0) + 1;
        });
        // The children that steps placed here load (they came after children of their own)
        // are in the page before the next flush: its rows then update theirs, not race them.
        const loading = templates.map((t) => place(t, arriving));
        htmx.process(tree());
        // Before the next flush places its rows.
        return Promise.all([...loading, reloadStale()]).then(keepSelection);
      })
      // Not answered (the server restarting, say): asked again a little later.
      .catch(() => setTimeout(() => ids.forEach(queue), 1000));
  }

  // A step that moved under a parent which arrived after it (OTLP spans, children first):
  // its row, subtree and all, goes under that parent when its children are shown, and away
  // otherwise (opening the parent loads it there). False when it went away.
  function relocate(li, parentId) {
    const parent = parentId ? rowOf(parentId) : null;
    const container = parentId
      ? (parent && parent.querySelector(":scope > ul.children"))
      : tree().querySelector("ul.tree");
    const shown = container && (!parentId || container.dataset.loaded)
      && !container.querySelector(":scope > li.more:not(.prev)");
    const twin = shown && Array.from(container.children).some((c) => c.id === li.id && c !== li);
    if (!shown || twin) {
      if (li.classList.contains("selected")) lostSelection = li.dataset.id;
      li.remove();
      return false;
    }
    const empty = container.querySelector(":scope > li.empty");
    if (empty) empty.remove();
    container.appendChild(li);
    return true;
  }

  // The selected step, when its row went away as it moved (relocate): selected again where it
  // now is once the flush has placed its rows (keepSelection).
  let lostSelection = null;

  function keepSelection() {
    const id = lostSelection;
    lostSelection = null;
    if (!id || selected()) return null;
    if (rowOf(id)) return select(rowOf(id), { push: false });
    // Its new parent's children are not shown: the tree as a deep link to it shows it.
    return loadTreeAt(id).then(() => select(rowOf(id), { push: false }));
  }

  // Whether a new step under parentId (none: the top level) could be placed: its list is shown
  // with no later window waiting, or its parent has none yet (the parent's row comes with the
  // flush, opened when it is near the top).
  function takesNew(parentId) {
    if (!parentId) return !tree().querySelector("ul.tree > li.more:not(.prev)");
    const parent = rowOf(parentId);
    if (!parent) return false;
    const list = parent.querySelector(":scope > ul.children");
    return !list || (list.dataset.loaded && !list.querySelector(":scope > li.more:not(.prev)"));
  }

  // Load again the lists that rows left while some of their windows were not loaded (stale):
  // the top level as a reload shows it (with the selected step's path open), a step's children
  // from their first window.
  function reloadStale() {
    const lists = Array.from(stale).filter((ul) => ul.isConnected);
    stale.clear();
    const top = lists.find((ul) => ul.matches("ul.tree"));
    if (top) {  // the whole tree, the other lists with it
      const current = selected();
      return loadTreeAt(current && current.dataset.id);
    }
    return Promise.all(lists.map((ul) => {
      const toggle = ul.closest("li.node").querySelector(":scope > .row .tog");
      return toggle ? load(toggle.dataset.children, ul, "innerHTML") : null;
    }));
  }

  // Puts a row the server sent (template) in the page: updates the step's row, or adds a new
  // step's in its list. Returns the load of the children it opens for the row, if any.
  function place(template, arriving) {
    const fresh = template.content.querySelector("li.node");
    const moved = rowOf(template.dataset.id);
    if (moved && (moved.dataset.parent || "") !== (template.dataset.parent || "")) {
      const left = moved.parentElement;
      if (left.querySelector(":scope > li.more")) stale.add(left);
      relocate(moved, template.dataset.parent);
    }
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
        if (ul) {
          existing.appendChild(ul);
          openLive(existing);
        }
      }
      return;
    }
    if (!added.has(template.dataset.id)) return;  // in a window that is not loaded
    added.delete(template.dataset.id);
    parents.delete(template.dataset.id);
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
    if (Number(fresh.dataset.kids) > (arriving[template.dataset.id] || 0)) {
      // It came after children of its own (an agent's next step recorded before the page
      // read this one's row, OTLP spans children first): they load as a reload shows them,
      // opened at the levels a reload opens.
      if (depthOf(fresh) < AUTO_EXPAND_DEPTH) return expand(fresh, true, true);
    } else {
      openLive(fresh);
    }
  }

  // A reload opens the first AUTO_EXPAND_DEPTH levels (goal, iterations, tool calls: the
  // results show). A step at those levels whose children begin while the page watches is
  // opened the same way; it had none when the page loaded or it arrived, so each of its
  // children arrives live (step_added) and is placed in it.
  const AUTO_EXPAND_DEPTH = 3;

  function depthOf(li) {
    let depth = 0;
    for (let up = li.parentElement.closest("li.node"); up; up = up.parentElement.closest("li.node")) depth++;
    return depth;
  }

  function openLive(li) {
    const ul = li.querySelector(":scope > ul.children");
    if (!ul || ul.dataset.loaded || depthOf(li) >= AUTO_EXPAND_DEPTH) return;
    ul.dataset.loaded = "1";
    li.classList.add("open");
    li.setAttribute("aria-expanded", "true");
  }

  // A notice of what waits for OTLP spans (#waiting-logs, #waiting-steps) as the server
  // renders it now, left open if the reader had opened it.
  function reloadNotice(id) {
    const wasOpen = document.querySelector("#" + id + " details")?.open;
    return load(base, "#" + id, "outerHTML").then(() => {
      const details = document.querySelector("#" + id + " details");
      if (wasOpen && details) details.open = true;
    });
  }

  // An OTLP trace's list of steps waiting for their parent spans: read anew, at most once a
  // second, when a top-level step comes (it may wait), a step moves (it waited) or the trace
  // ends (those still waiting never will move).
  let waitingTimer = null;
  function refreshWaitingSteps() {
    if (waitingTimer || !document.getElementById("waiting-steps")) return;
    waitingTimer = setTimeout(() => {
      waitingTimer = null;
      reloadNotice("waiting-steps");
    }, 1000);
  }

  function onEvent(message) {
    if (message.seq > lastSeq && message.event !== "connected") lastSeq = message.seq;
    if (message.event === "connected") {
      flash(gettext("live"));
      setTotals(message.trace);
    } else if (message.event === "step_added") {
      document.getElementById("trace-quiet")?.remove();  // a span came after all
      if (document.querySelector('[data-waiting-step="' + message.step.step_id + '"]')) {
        // Its waiting log records went into its step: the list of those still waiting anew.
        reloadNotice("waiting-logs");
      }
      if (!message.step.parent_id) refreshWaitingSteps();
      setTotals(message.totals);
      added.add(message.step.step_id);
      parents.set(message.step.step_id, message.step.parent_id);
      queue(message.step.step_id);
    } else if (message.event === "step_updated") {
      if (message.updates && "parent_id" in message.updates) refreshWaitingSteps();
      setTotals(message.totals);
      queue(message.step_id);
    } else if (message.event === "trace_completed") {
      completed = true;
      view.dataset.status = message.trace.status;
      // The header as the server renders it: totals, status and the task (an OTLP trace's
      // comes with its root span, which may end it).
      // Log records still waiting now wait for spans that will not come: said so.
      if (document.querySelector("#waiting-logs details")) reloadNotice("waiting-logs");
      if (document.querySelector("#waiting-steps details")) refreshWaitingSteps();
      load(base, "#trace-header", "outerHTML").then(() => {
        const header = document.getElementById("trace-header");
        const rest = document.title.indexOf(" · ");
        if (header.dataset.title && rest >= 0) document.title = header.dataset.title + document.title.slice(rest);
        const status = document.getElementById("trace-status").textContent;
        flash(interpolate(gettext("finished: %(status)s"), { status: status }, true));
      });
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
      flash(gettext("connection lost, reconnecting…"));
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
