// The admin's step tree (templates/traces/admin/): a "show more" link, or a closed node opened
// for the first time, loads the next window of rows from the server and puts it in its place.
// Without JavaScript the links open the window's rows as a page of their own. Its words come
// translated in the tree's data- attributes (templates/traces/admin/_tree.html).
(function () {
  "use strict";

  async function load(link) {
    const item = link.closest("li");
    if (!item || item.dataset.loading) return;
    const words = link.closest(".step-tree").dataset;
    item.dataset.loading = "1";
    link.textContent = words.loadingLabel;
    const response = await fetch(link.href, { credentials: "same-origin" });
    if (!response.ok) {
      link.textContent = words.failedLabel.replace("{status}", response.status);
      delete item.dataset.loading;
      return;
    }
    // Rows rendered (and escaped) by the server's templates.
    const rows = document.createElement("template");
    rows.innerHTML = await response.text();
    item.replaceWith(rows.content);
  }

  document.addEventListener("click", function (event) {
    const link = event.target.closest(".step-tree a[data-window]");
    if (!link) return;
    event.preventDefault();
    load(link);
  });

  // "toggle" does not bubble: listen while it is captured.
  document.addEventListener(
    "toggle",
    function (event) {
      const details = event.target;
      if (!(details instanceof HTMLDetailsElement) || !details.open) return;
      if (!details.closest(".step-tree")) return;
      const level = details.querySelector(":scope > ul");
      if (!level || level.querySelector(":scope > li.step-tree-node")) return;
      const link = level.querySelector(":scope > li.step-tree-more > a[data-window]");
      if (link) load(link);
    },
    true,
  );
})();
