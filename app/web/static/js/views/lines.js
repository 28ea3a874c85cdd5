// Token-to-token view: queries left, keys right, a line per weight above a threshold.

import { headColour } from "../colors.js";
import { el as make } from "../dom.js";
import { nextTask } from "./plot.js";
import { settle } from "./settle.js";

const SVG = "http://www.w3.org/2000/svg";
const ROW = 20;
const CHAR = 7.3; // pixels a character of the 12 px monospace labels takes
const LONG_TEXT = 128; // tokens past which the drawing is built over two tasks

/** Width of the drawing and where the two label columns end/start: the labels' own width,
 * the rest for the lines, fitting the container (a phone included). */
function geometry(tokens, available) {
  const longest = Math.max(1, ...tokens.map((t) => t.length));
  const label = Math.min(170, Math.max(36, Math.ceil(longest * CHAR) + 10));
  const width = Math.max(available, 2 * label + 90);
  return { width, leftX: label, rightX: width - label };
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

/** The heads drawn together: the state's overlay (those of this layer), else the open head. */
export function overlayHeads(state, info) {
  const chosen = (state.overlay || []).filter((h) => h < info.num_heads);
  return chosen.length ? chosen : [state.head];
}

export function bind(parts, set) {
  parts.threshold.addEventListener("input", () => {
    parts.thresholdValue.textContent = Number(parts.threshold.value).toFixed(2);
    settle(() => set({ threshold: Number(parts.threshold.value) }));
  });
  parts.heads.addEventListener("change", () => {
    const chosen = [...parts.heads.querySelectorAll("input:checked")].map((b) => Number(b.value));
    set({ overlay: chosen.length ? chosen : null });
  });
}

/** One checkbox per head of the layer, ticked for the heads drawn. */
function showHeadPicks(fieldset, heads, count) {
  if (fieldset.querySelectorAll("input").length !== count) {
    fieldset.querySelectorAll("label").forEach((n) => n.remove());
    for (let h = 0; h < count; h++) {
      const box = make("input", { attrs: { type: "checkbox", value: String(h) } });
      const label = make("label", {}, [box, make("span", { text: `h${h}` })]);
      label.style.color = headColour(h, count);
      fieldset.append(label);
    }
  }
  for (const box of fieldset.querySelectorAll("input")) box.checked = heads.includes(Number(box.value));
}

/** The lines of the heads drawn (head by head, query by query): {q, k, w, colour} each. */
function linesAbove(maps, heads, n, threshold, numHeads) {
  const found = [];
  for (const h of heads) {
    const flat = maps.map(0, h);
    const colour = headColour(h, numHeads);
    for (let i = 0; i < flat.length; i++) {
      const w = flat[i];
      if (w >= threshold && w > 0) found.push({ q: Math.floor(i / n), k: i % n, w, colour });
    }
  }
  return found;
}

/** Hovering or focusing a label shows only its lines and dims the other labels; leaving shows all.
 * One listener per kind on the drawing (not four per label: a long text has a thousand labels). */
function bindFocus(root, lineNodes, labelNodes) {
  function focus(side, index) {
    for (const line of lineNodes)
      line.style.display = index === null || Number(line.dataset[side]) === index ? "" : "none";
    for (const label of labelNodes) {
      label.classList.toggle(
        "dim",
        index !== null && !(label.dataset.side === side && Number(label.dataset.index) === index),
      );
    }
  }
  const labelOf = (event) =>
    event.target instanceof SVGTextElement && event.target.dataset.side ? event.target : null;
  const enter = (event) => {
    const label = labelOf(event);
    if (label) focus(label.dataset.side, Number(label.dataset.index));
  };
  const leave = (event) => {
    if (labelOf(event)) focus(null, null);
  };
  root.addEventListener("mouseover", enter);
  root.addEventListener("focusin", enter);
  root.addEventListener("mouseout", leave);
  root.addEventListener("focusout", leave);
}

export async function render({ session, state, parts, info, isStale }) {
  const heads = overlayHeads(state, info);
  showHeadPicks(parts.heads, heads, info.num_heads);
  parts.threshold.value = String(state.threshold);
  parts.thresholdValue.textContent = state.threshold.toFixed(2);

  const maps = await session.layer(state.layer);
  if (isStale()) return null;
  const tokens = maps.meta.tokens;
  const n = tokens.length;
  const threshold = state.threshold;
  const { width: WIDTH, leftX: LEFT_X, rightX: RIGHT_X } = geometry(tokens, Math.min(720, parts.lines.clientWidth - 2));
  const root = svg("svg", {
    width: WIDTH,
    height: n * ROW + 30,
    role: "img",
    "aria-label": `Attention lines for heads ${heads.join(", ")} of layer ${state.layer}`,
  });
  root.append(svg("text", { x: LEFT_X, y: 14, "text-anchor": "end" }));
  root.lastChild.textContent = "query";
  root.append(svg("text", { x: RIGHT_X, y: 14 }));
  root.lastChild.textContent = "key";
  const lineLayer = svg("g", {});
  root.append(lineLayer);
  const lineNodes = linesAbove(maps, heads, n, threshold, info.num_heads).map(({ q, k, w, colour }) => {
    const line = svg("line", {
      x1: LEFT_X + 6,
      y1: 30 + q * ROW - 4,
      x2: RIGHT_X - 6,
      y2: 30 + k * ROW - 4,
      stroke: colour,
      "stroke-width": 1 + 3 * w,
      "stroke-opacity": Math.min(1, 0.1 + w),
    });
    line.dataset.q = q;
    line.dataset.k = k;
    return line;
  });
  lineLayer.append(...lineNodes);
  if (n > LONG_TEXT) {
    await nextTask(); // a long text: building and laying out the drawing are two tasks, not one
    if (isStale()) return null;
  }
  const labelNodes = [];
  tokens.forEach((token, i) => {
    for (const [x, side, anchor] of [
      [LEFT_X, "q", "end"],
      [RIGHT_X, "k", "start"],
    ]) {
      const text = svg("text", { x, y: 30 + i * ROW, "text-anchor": anchor, tabindex: "0" });
      text.textContent = token; // user text: never parsed as markup
      text.dataset.side = side;
      text.dataset.index = i;
      labelNodes.push(text);
    }
  });
  root.append(...labelNodes);
  bindFocus(root, lineNodes, labelNodes);
  parts.lines.replaceChildren(root);
  // The numbers behind the drawing, for export: built when an export asks for them (a 512-token
  // map as nested arrays is a quarter of a million numbers).
  const built = new Map(); // head -> its rows, built once an export reads them
  const matrixOf = (h) => {
    if (!built.has(h))
      built.set(
        h,
        Array.from({ length: n }, (_, q) => Array.from(maps.map(0, h).subarray(q * n, (q + 1) * n))),
      );
    return built.get(h);
  };
  const main = heads.includes(state.head) ? state.head : heads[0];
  const named = heads.length === 1 ? `head ${heads[0]}` : `heads ${heads.slice(0, -1).join(", ")} and ${heads.at(-1)}`;
  return {
    kind: "svg",
    element: root,
    layer: state.layer,
    head: main,
    tokens,
    suffix: "-lines",
    scope: `layer ${state.layer} · ${named}`,
    subtitle: "queries left, keys right: a line per weight, wider and darker the larger it is",
    notes: [
      heads.length === 1 ? `${named} drawn` : `${named} overlaid, a colour each`,
      threshold > 0 ? `lines below ${Number(threshold.toPrecision(3))} hidden` : "every weight above 0 drawn",
    ],
    keys: heads.map((h) => ({ text: `h${h}`, colour: headColour(h, info.num_heads) })),
    get matrix() {
      return matrixOf(main);
    },
    get payload() {
      return {
        overlaid_heads: heads,
        threshold,
        weights_by_head: Object.fromEntries(heads.map((h) => [h, matrixOf(h)])),
      };
    },
  };
}
