// Token-to-token view: queries left, keys right, a line per weight above a threshold.

import { headColour } from "../colors.js";
import { el as make } from "../dom.js";
import { settle } from "./settle.js";

const SVG = "http://www.w3.org/2000/svg";
const ROW = 20;
const CHAR = 7.3; // pixels a character of the 12 px monospace labels takes

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
  const root = svg("svg", { width: WIDTH, height: n * ROW + 30, role: "img", "aria-label": `Attention lines for heads ${heads.join(", ")} of layer ${state.layer}` });
  root.append(svg("text", { x: LEFT_X, y: 14, "text-anchor": "end" }));
  root.lastChild.textContent = "query";
  root.append(svg("text", { x: RIGHT_X, y: 14 }));
  root.lastChild.textContent = "key";
  const lineLayer = svg("g", {});
  root.append(lineLayer);
  const lines = [];
  for (const h of heads) {
    const flat = maps.map(0, h);
    const colour = headColour(h, info.num_heads);
    for (let q = 0; q < n; q++) {
      for (let k = 0; k < n; k++) {
        const w = flat[q * n + k];
        if (w < threshold || w <= 0) continue;
        const line = svg("line", {
          x1: LEFT_X + 6, y1: 30 + q * ROW - 4, x2: RIGHT_X - 6, y2: 30 + k * ROW - 4,
          stroke: colour, "stroke-width": 1 + 3 * w, "stroke-opacity": Math.min(1, 0.1 + w),
        });
        line.dataset.q = q;
        line.dataset.k = k;
        lines.push(line);
        lineLayer.append(line);
      }
    }
  }
  const labels = [];
  tokens.forEach((token, i) => {
    for (const [x, side, anchor] of [[LEFT_X, "q", "end"], [RIGHT_X, "k", "start"]]) {
      const text = svg("text", { x, y: 30 + i * ROW, "text-anchor": anchor, tabindex: "0" });
      text.textContent = token; // user text: never parsed as markup
      text.dataset.side = side;
      text.dataset.index = i;
      labels.push(text);
      root.append(text);
    }
  });
  function focus(side, index) {
    for (const line of lines) {
      const show = index === null || Number(line.dataset[side]) === index;
      line.style.display = show ? "" : "none";
    }
    for (const label of labels) {
      label.classList.toggle("dim", index !== null && !(label.dataset.side === side && Number(label.dataset.index) === index));
    }
  }
  for (const label of labels) {
    const activate = () => focus(label.dataset.side, Number(label.dataset.index));
    label.addEventListener("mouseenter", activate);
    label.addEventListener("focus", activate);
    label.addEventListener("mouseleave", () => focus(null, null));
    label.addEventListener("blur", () => focus(null, null));
  }
  parts.lines.replaceChildren(root);
  const matrixOf = (h) => Array.from({ length: n }, (_, q) => Array.from(maps.map(0, h).subarray(q * n, (q + 1) * n)));
  const main = heads.includes(state.head) ? state.head : heads[0];
  return {
    kind: "svg", element: root, layer: state.layer, head: main, tokens, matrix: matrixOf(main), suffix: "-lines",
    payload: {
      overlaid_heads: heads, threshold,
      weights_by_head: Object.fromEntries(heads.map((h) => [h, matrixOf(h)])),
    },
  };
}
