// What every lab page shares: inputs kept in the URL, one request at a time (a newer one aborts
// the older, so a slow answer never overwrites a newer view), errors shown, numbers formatted.

import { api } from "./api.js";
import { VIRIDIS_LUT } from "./colors.js";
import { el, showError } from "./dom.js";
import { keepInputsInUrl } from "./urlstate.js";
import { plotlyReady } from "./views/plot.js";

/**
 * Wire a lab form. fields: {urlName: input}; run(signal) computes and draws (awaiting the API
 * with that signal). Changes recompute after a short pause; range sliders while they move.
 * Returns the function that recomputes now.
 */
export function labForm({ form, error, fields, run }) {
  keepInputsInUrl(fields);
  let pending = null;
  let timer = null;
  async function go() {
    if (pending) pending.abort();
    const controller = new AbortController();
    pending = controller;
    try {
      await plotlyReady();
      await run(controller.signal);
      if (!controller.signal.aborted) showError(error, "");
    } catch (err) {
      if (err.name !== "AbortError" && !controller.signal.aborted) showError(error, err.message);
    }
  }
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(go, 200);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go();
  });
  form.addEventListener("change", later);
  for (const input of Object.values(fields)) if (input.type === "range") input.addEventListener("input", later);
  return go;
}

/** The value of each input: numbers for number/range inputs, booleans for checkboxes. */
export function read(fields) {
  const out = {};
  for (const [name, input] of Object.entries(fields)) {
    if (input.type === "checkbox") out[name] = input.checked;
    else if (input.type === "number" || input.type === "range") out[name] = Number(input.value);
    else out[name] = input.value;
  }
  return out;
}

/** Fill a <select> with the server's available models (encoders only, or models with RoPE
 * only, if asked: a model whose config is not known yet is offered, and the page says why if it
 * cannot run it), keeping a current choice that is still there. */
export async function fillModels(select, { encodersOnly = false, rotaryOnly = false } = {}) {
  const { models } = await api.models();
  const usable = models.filter(
    (m) => m.available && (!encodersOnly || !m.causal) && (!rotaryOnly || m.rotary !== false),
  );
  const current = select.value;
  select.replaceChildren(...usable.map((m) => el("option", { text: m.id, attrs: { value: m.id } })));
  if (usable.some((m) => m.id === current)) select.value = current;
  return usable;
}

/** What `model` (an /api/models entry) is, and the longest text this page takes with it. */
export function modelNote(model, tokens) {
  return `${model.description} This page takes texts of up to ${tokens.toLocaleString("en")} tokens.`;
}

/** Keeps `note` describing the model chosen in `select` (one of `models`) with this page's
 * limit: `tokens`. Call it once the select holds the URL's choice (after labForm). */
export function describeModel(select, note, models, tokens) {
  const describe = () => {
    const model = models.find((m) => m.id === select.value);
    note.textContent = model ? modelNote(model, tokens) : "";
  };
  describe();
  select.addEventListener("change", describe);
}

const UNITS = ["B", "kB", "MB", "GB", "TB", "PB"];

/** 23040 -> "23.0 kB" (powers of 1000, as drive and memory makers print them). */
export function bytes(n) {
  let i = 0;
  let x = n;
  while (x >= 1000 && i < UNITS.length - 1) {
    x /= 1000;
    i += 1;
  }
  return `${i ? x.toFixed(x < 10 ? 2 : 1) : x} ${UNITS[i]}`;
}

/** 1234567 -> "1,234,567"; large counts also as powers of ten. */
export function count(n) {
  const text = Math.round(n).toLocaleString("en-US");
  return n >= 1e9 ? `${text} (${n.toExponential(2)})` : text;
}

/** A scrollable numbers table; every cell is text. */
export function numbersTable(caption, headers, rows, id) {
  const table = el("table", { className: "numbers", attrs: id ? { id } : {} }, [
    el("caption", { text: caption }),
    el("thead", {}, [
      el(
        "tr",
        {},
        headers.map((h) => el("th", { text: h, attrs: { scope: "col" } })),
      ),
    ]),
    el(
      "tbody",
      {},
      rows.map((row) =>
        el(
          "tr",
          {},
          row.map((cell) => el("td", { text: String(cell) })),
        ),
      ),
    ),
  ]);
  return el("div", { className: "table-wrap", attrs: { tabindex: "0", role: "region", "aria-label": caption } }, [
    table,
  ]);
}

/** "k0", "k1", ... labels for seeded matrices. */
export const labels = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

/** One map (rows of weights in [0, 1]) onto a canvas, a pixel a weight, colour ∝ √weight (as
 * the explorer's grid, so a faint pattern still shows). */
function paintMap(canvas, map) {
  const n = map.length;
  const cols = n ? map[0].length : 0;
  canvas.width = cols;
  canvas.height = n;
  if (!n || !cols) return;
  const context = canvas.getContext("2d");
  const image = context.createImageData(cols, n);
  for (let r = 0; r < n; r++) {
    for (let c = 0; c < cols; c++) {
      const w = Math.max(0, Math.min(1, map[r][c]));
      const [red, green, blue] = VIRIDIS_LUT[Math.round(Math.sqrt(w) * 255)];
      const o = (r * cols + c) * 4;
      image.data.set([red, green, blue, 255], o);
    }
  }
  context.putImageData(image, 0, 0);
}

/**
 * Small multiples of a layer's heads: a thumbnail of each map in `maps` (heads, seq, seq), named
 * by label(h) (text). Each is a button calling onPick(h), the chosen one pressed; or, given
 * href(h), a link there.
 */
export function headThumbnails(container, maps, { label, chosen = -1, onPick, href }) {
  container.replaceChildren(
    ...maps.map((map, h) => {
      const canvas = el("canvas", { attrs: { "aria-hidden": "true" } });
      paintMap(canvas, map);
      const attrs = href ? { href: href(h) } : { type: "button", "aria-pressed": String(h === chosen) };
      const item = el(href ? "a" : "button", { className: "head-thumb", attrs }, [
        canvas,
        el("span", { text: label(h) }),
      ]);
      if (onPick) item.addEventListener("click", () => onPick(h));
      return item;
    }),
  );
}

/** The explorer's URL for a model, text, layer and head (on the view a head opens in, the
 * explorer's default: no view named). */
export function explorerLink(model, text, layer, head = 0) {
  const params = new URLSearchParams({ model, text, layer: String(layer), head: String(head) });
  return `/?${params}`;
}
