// Numbers written as the page's language writes them, for the pages' scripts. Loaded by
// base.html after the JavaScript catalogue (whose get_format() it reads) and before the apps.

// A number with `places` decimals, as the server's floatformat writes it for the page's language.
window.decimal = function (value, places) {
  "use strict";
  return Number(value).toFixed(places).replace(".", get_format("DECIMAL_SEPARATOR"));
};

// A cost as the server's `cost` filter writes it (traces/templatetags/trace_format.py): 4
// decimals, more for one below a tenth of a cent, to its first two significant digits, at most 8.
window.costText = function (value) {
  "use strict";
  const amount = Number(value);
  const places = amount <= 0 || amount >= 0.001
    ? 4 : Math.min(8, Math.max(4, 1 - Math.floor(Math.log10(amount))));
  return decimal(amount, places);
};
