// Measures WCAG contrast on the colours the browser computed (tests/devassist/test_layout.py):
// every visible text against the background it is painted on (the first opaque background up
// its ancestors, translucent ones composited over it), and every control's boundary (its
// background or its border) against what surrounds it. A control with neither (a link-like
// button) is told by its text, which the text rule measures. Disabled controls are exempt, as
// WCAG exempts them. Leaves its helpers on window.wcag for the focus ring check.
() => {
  const parse = (value) => {
    const m = value.match(/rgba?\(([^)]*)\)/);
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const ratio = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((m, n) => n - m);
    return (x + 0.05) / (y + 0.05);
  };
  const background = (el) => {
    const layers = [];
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      const bg = parse(getComputedStyle(node).backgroundColor);
      if (bg && bg[3] > 0) {
        layers.push(bg);
        if (bg[3] >= 1) break;
      }
    }
    let colour = [255, 255, 255, 1];
    if (!layers.length || layers[layers.length - 1][3] < 1) {
      const dark = getComputedStyle(document.documentElement).colorScheme === "dark";
      colour = dark ? [18, 18, 18, 1] : colour;
    }
    for (const layer of layers.reverse()) colour = over(layer, colour);
    return colour;
  };
  const opacity = (el) => {
    let o = 1;
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      o *= Number(getComputedStyle(node).opacity);
    }
    return o;
  };
  const shown = (el) => {
    const rect = el.getBoundingClientRect();
    return rect.width > 0 && rect.height > 0 &&
      el.checkVisibility({ opacityProperty: true, visibilityProperty: true }) &&
      !el.closest(":disabled");
  };
  const name = (el) => {
    const id = el.id ? "#" + el.id : "";
    const classes = typeof el.className === "string" ? el.className.trim().split(/\s+/) : [];
    const cls = classes.filter(Boolean).map((c) => "." + c).join("");
    const text = (el.innerText || el.value || "").trim().slice(0, 30);
    return `${el.tagName.toLowerCase()}${id}${cls} "${text}"`;
  };
  window.wcag = { parse, over, ratio, background, name };
  const failures = [];
  let texts = 0;
  let controls = 0;
  for (const el of document.body.querySelectorAll("*")) {
    if (["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT"].includes(el.tagName) || !shown(el)) continue;
    const hasText = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const isField = el.matches("input:not([type=hidden]), textarea, select") &&
      (el.value || el.placeholder);
    if (hasText || isField) {
      texts += 1;
      const style = getComputedStyle(el);
      const bg = background(el);
      const fg = parse(style.color);
      const seen = over([fg[0], fg[1], fg[2], fg[3] * opacity(el)], bg);
      const r = ratio(seen, bg);
      if (r < 4.5) {
        const on = `rgb(${bg.slice(0, 3).map(Math.round)})`;
        failures.push(`text ${name(el)}: ${r.toFixed(2)} (${style.color} on ${on})`);
      }
    }
    if (el.matches("button, input:not([type=hidden]), select, textarea, a.tool, a.new-chat")) {
      controls += 1;
      const style = getComputedStyle(el);
      const around = background(el.parentElement);
      const own = parse(style.backgroundColor);
      const fill = own && own[3] > 0 ? over(own, around) : around;
      const fillRatio = ratio(fill, around);
      const border = parse(style.borderTopColor);
      const hasBorder = parseFloat(style.borderTopWidth) > 0 && border && border[3] > 0;
      const borderRatio = hasBorder ? ratio(over(border, around), around) : 1;
      if ((fillRatio > 1.05 || hasBorder) && Math.max(fillRatio, borderRatio) < 3) {
        const found = `background ${fillRatio.toFixed(2)}, border ${borderRatio.toFixed(2)}`;
        failures.push(`control ${name(el)}: ${found}`);
      }
    }
  }
  return { failures, texts, controls, dark: lum(background(document.body)) < 0.1 };
}
