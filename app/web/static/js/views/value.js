// Where a head looks against what it takes: its weights beside ‖α·v‖ (Kobayashi et al., 2020).

import { linearBar, viridis } from "../colors.js";
import { el, metricCard } from "../dom.js";
import { drawHeatmap } from "./plot.js";

/** Each row divided by its sum (rows of zeros stay zeros), so norms compare with weights. */
function rowShares(matrix) {
  return matrix.map((row) => {
    const total = row.reduce((a, b) => a + b, 0);
    return total > 0 ? row.map((x) => x / total) : row.map(() => 0);
  });
}

/** Mean over rows of the total variation distance between two row-stochastic matrices. */
function meanDistance(a, b) {
  const rows = a.map((row, i) => row.reduce((sum, x, j) => sum + Math.abs(x - b[i][j]), 0) / 2);
  return rows.reduce((s, x) => s + x, 0) / rows.length;
}

/** The key most rows look at most, and its mean share under each view. */
function biggestSink(weights, shares) {
  const n = weights[0].length;
  const mean = (m, j) => m.reduce((s, row) => s + row[j], 0) / m.length;
  let best = 0;
  for (let j = 1; j < n; j++) if (mean(weights, j) > mean(weights, best)) best = j;
  return { key: best, weight: mean(weights, best), share: mean(shares, best) };
}

export async function render({ session, state, parts, isStale }) {
  const detail = await session.detail({ layer: state.layer, head: state.head, fields: ["weights", "value_weighted"] });
  if (isStale()) return null;
  const tokens = detail.tokens;
  const shares = rowShares(detail.value_weighted);
  const sink = biggestSink(detail.weights, shares);
  const moved = meanDistance(detail.weights, shares);
  // A head with one key a row moves nothing: say why, so the view does not look broken.
  const hint =
    moved < 0.01
      ? [
          el("p", {
            className: "help",
            text: "This head puts nearly all of each row on one key, so what each query takes is that key's value alone and nothing moves: try a broader head (layer 2 head 3 of MiniLM).",
          }),
        ]
      : [];
  parts.metrics.replaceChildren(
    metricCard("rows moved (mean total variation)", moved.toFixed(3)),
    metricCard(`“${tokens[sink.key]}”: mean weight`, sink.weight.toFixed(3)),
    metricCard(`“${tokens[sink.key]}”: mean share of ‖α·v‖`, sink.share.toFixed(3)),
    ...hint,
  );
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query" };
  await drawHeatmap(parts.weights, detail.weights, tokens, tokens, {
    ...common,
    hoverName: "weight",
    title: "attention weights α",
  });
  if (isStale()) return null;
  await drawHeatmap(parts.norms, shares, tokens, tokens, {
    ...common,
    hoverName: "share of ‖α·v‖",
    title: "‖α·v‖, each row's share",
  });
  return {
    kind: "head",
    element: parts.norms,
    layer: state.layer,
    head: state.head,
    tokens,
    matrix: shares,
    matrixName: "value_weighted_shares",
    title: "value-weighted attention (row shares of ‖α·v‖)",
    colour: viridis,
    colourBar: linearBar(1, "share"),
    suffix: "-value-weighted",
    payload: {
      what: "‖α·v‖ per query and key (value_weighted), and each row's shares of it",
      value_weighted: detail.value_weighted,
      weights: detail.weights,
    },
  };
}
