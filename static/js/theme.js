// The theme switch's answer carries a "theme-changed" event (HX-Trigger): apply the new theme to
// <html> at once. The server renders data-theme on every page, so a reload shows it from the
// first paint.
document.addEventListener("theme-changed", function (event) {
  "use strict";
  document.documentElement.dataset.theme = event.detail.theme;
});
