// Numbers written as the page's language writes them, for the pages' scripts. Loaded by
// base.html after the JavaScript catalogue (whose get_format() it reads) and before the apps.

// A number with `places` decimals, as the server's floatformat writes it for the page's language.
window.decimal = function (value, places) {
  "use strict";
  return Number(value).toFixed(places).replace(".", get_format("DECIMAL_SEPARATOR"));
};
