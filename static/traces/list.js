// The trace list: running traces update in place from their watch websockets; the focus
// follows "Show 3 new traces" and the filters follow Back and Forward.
(function () {
  "use strict";
  const sockets = new Map();

  function watch(row) {
    const id = row.dataset.trace;
    if (sockets.has(id)) return;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const url = scheme + location.host + "/api/traces/" + id + "/watch?after_seq=" + row.dataset.running;
    const socket = new WebSocket(url);
    sockets.set(id, socket);
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      const current = document.getElementById("t-" + id);
      if (!current || current.dataset.running === undefined) { socket.close(); return; }
      if (message.event === "step_added") current.querySelector(".quiet-mark")?.remove();  // a span came
      const totals = message.totals || message.trace;
      if (totals) {
        for (const name of ["total_steps", "error_count", "total_tokens", "total_cost"]) {
          const cell = current.querySelector('[data-total="' + name + '"]');
          if (cell && name in totals) {
            // The cost as the server's cost filter shows it in the page's language.
            cell.textContent = name === "total_cost" ? costText(totals[name]) : totals[name];
          }
        }
      }
      if (message.event === "trace_completed") {
        // No longer running: no scan watches the row again while its refresh is on its way
        // (a second socket replayed the end after the refresh had replaced the row, and
        // refreshed it from the page's own URL: a whole page inside the row).
        delete current.dataset.running;
        socket.close();
        // The row is the request's source: htmx keeps one request a source at a time, and
        // rows ending together from one source (the page's body) dropped all but two.
        htmx.ajax("GET", current.dataset.rowUrl, { source: current, target: current, swap: "outerHTML" });
      }
    };
    socket.onclose = () => sockets.delete(id);
  }

  function scan() {
    // A row the list no longer shows (another filter, another page) needs no socket.
    for (const [id, socket] of sockets) {
      if (document.getElementById("t-" + id)?.dataset.running === undefined) socket.close();
    }
    document.querySelectorAll("tr[data-running]").forEach(watch);
  }
  // The filters outside the list show the list's: Back and Forward restore a list and its
  // address from htmx's history, and the form as the page first drew it.
  function formFromAddress() {
    const form = document.querySelector("form.trace-filters");
    const params = new URLSearchParams(location.search);
    for (const field of form ? form.elements : []) {
      if (field.name) field.value = params.get(field.name) ?? "";
    }
  }

  let focusedNotice = false;
  scan();
  document.body.addEventListener("htmx:beforeSwap", () => {
    focusedNotice = Boolean(document.activeElement?.closest("#new-traces"));
  });
  document.body.addEventListener("htmx:afterSettle", (event) => {
    scan();
    if (event.detail.requestConfig?.elt?.classList.contains("new-traces-link")) {
      // "Show 3 new traces" went with the list it replaced: the focus goes to the new list's
      // first trace, not back to the top of the page.
      document.querySelector("#trace-list tbody a")?.focus();
    } else if (focusedNotice) {
      // A new count redrew the button under the focus: the focus stays on it.
      document.querySelector("#new-traces button")?.focus();
    }
  });
  document.body.addEventListener("htmx:historyRestore", () => {
    formFromAddress();
    scan();
  });
})();
