// Small DOM helpers. User text only ever reaches the page through textContent.

export const $ = (selector, root = document) => root.querySelector(selector);

export function readPageData() {
  const el = document.getElementById("page-data");
  return el ? JSON.parse(el.textContent) : {};
}

export function showError(el, message) {
  el.textContent = message;
  el.hidden = !message;
}

export function el(tag, { text, className, attrs } = {}, children = []) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child);
  return node;
}

/** A small labelled number card (class "metric"); data-metric=id when given. */
export function metricCard(label, value, id) {
  const attrs = id ? { "data-metric": id } : {};
  return el("div", { className: "metric", attrs }, [
    el("div", { className: "label", text: label }),
    el("div", { className: "value", text: value }),
  ]);
}

/** Fills a <select> with the indices 0 … count-1 (labelled prefix + index) and chooses one;
 * the options are rebuilt only when their count or labels change. */
export function fillIndexSelect(select, count, chosen, prefix = "") {
  const first = select.options[0];
  if (select.options.length !== count || (first && first.text !== `${prefix}0`)) {
    select.replaceChildren(...Array.from({ length: count }, (_, i) => new Option(`${prefix}${i}`, String(i))));
  }
  select.value = String(Math.min(chosen, count - 1));
}
