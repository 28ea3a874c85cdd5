// Heads summed up: a layer's head average, or attention rollout up to the layer, as a map and
// as the row of one token (which input tokens feed it).

import { toMatrix } from "../binary.js";
import { drawChart, drawHeatmap, escapeLabel, weightScale } from "./plot.js";
import { settle } from "./settle.js";
import { chosenToken, fillTokenPicker } from "./tokens.js";

export function bind(parts, set) {
  parts.kind.addEventListener("change", () => set({ agg: parts.kind.value }));
  parts.colours.addEventListener("change", () => set({ colours: parts.colours.value }));
  parts.token.addEventListener("change", () => set({ query: Number(parts.token.value) }));
  parts.residual.addEventListener("input", () => {
    parts.residualValue.textContent = Number(parts.residual.value).toFixed(2);
    settle(() => set({ residual: Number(parts.residual.value) }));
  });
}

export async function render({ session, state, parts, info, isStale }) {
  const tokens = info.tokens;
  const n = tokens.length;
  const kind = state.agg === "rollout" ? "rollout" : "average";
  const residual = Math.min(1, Math.max(0, state.residual));
  const token = chosenToken(state, tokens);
  parts.kind.value = kind;
  parts.colours.value = state.colours;
  parts.residual.value = String(residual);
  parts.residualValue.textContent = residual.toFixed(2);
  parts.residual.disabled = kind !== "rollout";
  fillTokenPicker(parts.token, tokens, token);
  const maps = await session.aggregate(kind, state.layer, kind === "rollout" ? residual : 0.5);
  if (isStale()) return null;
  const matrix = toMatrix(maps.map(0, 0), n, n);
  const name =
    kind === "rollout"
      ? `rollout through layers 0–${state.layer} (residual ${residual.toFixed(2)})`
      : `layer ${state.layer}, all ${info.num_heads} heads averaged`;
  // Rollout spreads weight thinly: in linear colours its own largest value tops the scale.
  const top = kind === "rollout" ? Math.max(...matrix.map((row) => Math.max(...row))) : 1;
  const scale = weightScale(state.colours, matrix, top);
  const own = [
    { type: "rect", x0: -0.5, x1: n - 0.5, y0: token - 0.5, y1: token + 0.5, line: { color: "#e4572e", width: 2 } },
  ];
  await drawHeatmap(parts.map, scale.options.z, tokens, tokens, {
    ...scale.options,
    title: name,
    xTitle: kind === "rollout" ? "input token" : "key",
    yTitle: "",
    hoverName: kind === "rollout" ? "share" : "weight",
    shapes: own,
    height: Math.min(900, Math.max(420, 18 * n + 140)),
  });
  const row = matrix[token];
  const x = tokens.map((_, i) => i);
  const feeds =
    kind === "rollout"
      ? `which input tokens feed “${tokens[token]}” after layer ${state.layer}`
      : `what “${tokens[token]}” attends to in layer ${state.layer}, heads averaged`;
  await drawChart(
    parts.feeds,
    [
      {
        type: "bar",
        x,
        y: row,
        marker: { color: "#0072B2" },
        customdata: tokens.map(escapeLabel),
        hovertemplate: "%{customdata}: %{y:.6f}<extra></extra>",
      },
    ],
    {
      title: feeds,
      yaxis: { title: { text: kind === "rollout" ? "share" : "weight" }, rangemode: "tozero" },
      xaxis: { tickangle: -45 },
      margin: { b: 110 },
      height: 420,
    },
    {},
    { xaxis: { labels: tokens, pixels: (parts.feeds.clientWidth || 600) - 80, perLabel: 14 } },
  );
  return {
    kind: "head",
    element: parts.map,
    where: `${kind}-L${state.layer}`,
    layer: state.layer,
    tokens,
    matrix,
    matrixName: kind === "rollout" ? "rollout" : "head_average",
    title: name,
    colour: scale.colour,
    colourBar: scale.bar,
    payload: {
      what:
        kind === "rollout"
          ? "attention rollout (Abnar & Zuidema, 2020): row i = how much of each input token token i holds after this layer"
          : "the mean of this layer's heads",
      kind,
      residual: kind === "rollout" ? residual : null,
      token,
      feeds: row,
    },
  };
}
