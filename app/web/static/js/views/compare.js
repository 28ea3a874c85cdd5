// Two heads side by side: the open head (A) against another layer and head (B), optionally on
// another text or another model; their difference wherever the tokens line up.

import { signedBar } from "../colors.js";
import { fillIndexSelect, metricCard } from "../dom.js";
import { drawHeatmap, weightScale } from "./plot.js";

/** "5.2" -> {layer: 5, head: 2}, or null. */
export function parseHead(text) {
  const match = /^\s*(\d+)\s*\.\s*(\d+)\s*$/.exec(String(text || ""));
  return match ? { layer: Number(match[1]), head: Number(match[2]) } : null;
}

export function bind(parts, set) {
  const head = () => set({ compare: `${parts.layer.value}.${parts.head.value}` });
  parts.layer.addEventListener("change", head);
  parts.head.addEventListener("change", head);
  parts.text.addEventListener("change", () => set({ compareText: parts.text.value.trim() }));
  parts.model.addEventListener("change", () => set({ compareModel: parts.model.value }));
  parts.colours.addEventListener("change", () => set({ colours: parts.colours.value }));
}

/** Blue below zero, white at zero, red above (B gives more weight than A). */
const SIGNED = [
  [0, "#2166ac"],
  [0.5, "#f7f7f7"],
  [1, "#b2182b"],
];

function diverging(difference) {
  // At least ±0.001: B the same as A (all zeros) is white under a readable colour bar, not ±1e-9.
  const largest = Math.max(1e-3, ...difference.map((row) => Math.max(...row.map(Math.abs))));
  return { zmin: -largest, zmax: largest, zmid: 0, colorscale: SIGNED };
}

export async function render({ session, state, info, parts, models, isStale }) {
  const sameModel = !state.compareModel || state.compareModel === session.model;
  const other = models.find((m) => m.id === (sameModel ? session.model : state.compareModel));
  parts.model.replaceChildren(
    new Option(`the same model (${session.model.split("/").pop()})`, ""),
    ...models.filter((m) => m.available && m.id !== session.model).map((m) => new Option(m.id, m.id)),
  );
  parts.model.value = sameModel ? "" : state.compareModel;
  parts.text.value = state.compareText || "";
  parts.colours.value = state.colours;
  // B's layer and head: the URL's, else A's own (so "the same head on another text" compares
  // one head, not two); B's pickers then choose another head of this run.
  const asked = parseHead(state.compare) || { layer: state.layer, head: state.head };
  const layers = sameModel ? info.num_layers : (other?.num_layers ?? 1);
  const heads = sameModel ? info.num_heads : (other?.num_heads ?? 1);
  fillIndexSelect(parts.layer, layers, asked.layer);
  fillIndexSelect(parts.head, heads, asked.head);
  const b = { layer: Number(parts.layer.value), head: Number(parts.head.value) };
  const body = { layer: state.layer, head: state.head, other: { ...b } };
  if (!sameModel) body.other.model = state.compareModel;
  if (state.compareText) body.other.text = state.compareText;
  const answer = await session.compare(body);
  if (isStale()) return null;
  const itself = sameModel && !state.compareText && b.layer === state.layer && b.head === state.head;
  parts.alignment.textContent = itself
    ? "B is the open head on the same text: choose another layer and head, a text or a model for B."
    : answer.alignment;
  const changed = answer.differing_tokens.map((i) => `${i} “${answer.a.tokens[i]}” → “${answer.b.tokens[i]}”`);
  parts.metrics.replaceChildren(
    ...(answer.aligned
      ? [
          metricCard("rows moved (mean total variation)", answer.mean_row_distance.toFixed(3)),
          metricCard("largest |B − A|", answer.max_abs_difference.toFixed(3)),
          metricCard("tokens that differ", changed.length ? changed.join("; ") : "none"),
        ]
      : [metricCard("difference", "not drawn: positions do not line up")]),
  );
  const name = (side) => `${side.model.split("/").pop()} · layer ${side.layer} · head ${side.head}`;
  // A and B in the chosen colour scale; their difference is signed, always linear.
  const common = { xTitle: "key", yTitle: "query", hoverName: "weight" };
  const scaleA = weightScale(state.colours, answer.a.weights);
  await drawHeatmap(parts.a, scaleA.options.z, answer.a.tokens, answer.a.tokens, {
    ...common,
    ...scaleA.options,
    title: `A: ${name(answer.a)}`,
  });
  if (isStale()) return null;
  const scaleB = weightScale(state.colours, answer.b.weights);
  await drawHeatmap(parts.b, scaleB.options.z, answer.b.tokens, answer.b.tokens, {
    ...common,
    ...scaleB.options,
    title: `B: ${name(answer.b)}${state.compareText ? " · the other text" : ""}`,
  });
  if (isStale()) return null;
  parts.difference.hidden = !answer.aligned;
  if (answer.aligned) {
    const rows = answer.b.tokens.map((t, i) =>
      answer.differing_tokens.includes(i) ? `${answer.a.tokens[i]}→${t}` : t,
    );
    await drawHeatmap(parts.difference, answer.difference, rows, rows, {
      ...diverging(answer.difference),
      xTitle: "key",
      yTitle: "query",
      hoverName: "B − A",
      title: "B − A: red where B gives more weight, blue where A does",
    });
  }
  const where = `compare-L${answer.a.layer}H${answer.a.head}-vs-L${answer.b.layer}H${answer.b.head}`;
  const shown = answer.aligned ? answer.difference : answer.b.weights;
  const difference = (v) =>
    v >= 0 ? `rgba(178,24,43,${Math.min(1, Math.abs(v))})` : `rgba(33,102,172,${Math.min(1, Math.abs(v))})`;
  return {
    kind: "head",
    element: answer.aligned ? parts.difference : parts.b,
    layer: answer.a.layer,
    head: answer.a.head,
    tokens: answer.b.tokens,
    rowTokens: answer.b.tokens,
    matrix: shown,
    matrixName: answer.aligned ? "difference" : "b_weights",
    where,
    title: `${name(answer.b)} minus ${name(answer.a)}`,
    payload: answer,
    scope: `B: layer ${answer.b.layer} head ${answer.b.head}${state.compareText ? " on the other text" : ""} − A: layer ${answer.a.layer} head ${answer.a.head}`,
    colour: answer.aligned ? difference : scaleB.colour,
    colourBar: answer.aligned ? signedBar(difference, "B − A") : scaleB.bar,
  };
}
