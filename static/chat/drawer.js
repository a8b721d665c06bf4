// On narrow screens the chat's sidebar is a drawer (static/css/app.css): the top bar's button
// opens it, Escape, the backdrop or the button close it. While it is open the chat behind it is
// inert, so Tab stays in the drawer; closing gives the focus back to the button.
(function () {
  "use strict";

  const app = document.getElementById("chat-app");
  const toggle = document.getElementById("drawer-toggle");
  if (!app || !toggle) return;
  const sidebar = document.getElementById("sidebar");
  const backdrop = document.getElementById("drawer-backdrop");
  const chat = app.querySelector(".chat-main");
  const narrow = window.matchMedia("(max-width: 720px)");

  function isOpen() {
    return app.classList.contains("drawer-open");
  }

  function setOpen(open, moveFocus) {
    app.classList.toggle("drawer-open", open);
    toggle.setAttribute("aria-expanded", String(open));
    chat.inert = open;
    if (!moveFocus) return;
    if (open) sidebar.querySelector("a, input, button").focus();
    else toggle.focus();
  }

  toggle.addEventListener("click", function () {
    setOpen(!isOpen(), true);
  });
  backdrop.addEventListener("click", function () {
    setOpen(false, true);
  });
  // Capturing, before chat.js's shortcuts: Escape closes the drawer rather than stopping a run,
  // and Ctrl+K opens it so that the search it focuses can be seen.
  window.addEventListener(
    "keydown",
    function (event) {
      if (event.key === "Escape" && isOpen()) {
        event.stopPropagation();
        setOpen(false, true);
      } else if (event.key === "k" && (event.ctrlKey || event.metaKey) && narrow.matches) {
        setOpen(true, false);
      }
    },
    true
  );
  narrow.addEventListener("change", function () {
    if (!narrow.matches && isOpen()) setOpen(false, false);
  });
})();
