// How alike every two heads are on this text, in cluster order (redundant heads form blocks)
// or in layer order (boxes mark the heads that share a key/value head).

import { linearBar, viridis } from "../colors.js";
import { metricCard } from "../dom.js";
import { drawHeatmap, onCellClick } from "./plot.js";

export function bind(parts, set) {
  parts.order.addEventListener("change", () => set({ order: parts.order.value }));
}

/** Mean similarity of pairs of distinct heads: sharing a key/value head, in the same layer
 * otherwise, and in different layers. */
function pairMeans(matrix, heads, group) {
  const sums = { shared: [0, 0], layer: [0, 0], other: [0, 0] };
  for (let a = 0; a < matrix.length; a++) {
    for (let b = a + 1; b < matrix.length; b++) {
      const sameLayer = Math.floor(a / heads) === Math.floor(b / heads);
      const kind =
        sameLayer && Math.floor((a % heads) / group) === Math.floor((b % heads) / group)
          ? "shared"
          : sameLayer
            ? "layer"
            : "other";
      sums[kind][0] += matrix[a][b];
      sums[kind][1] += 1;
    }
  }
  return Object.fromEntries(Object.entries(sums).map(([k, [sum, count]]) => [k, count ? sum / count : null]));
}

const share = (v) => (v === null ? "–" : v.toFixed(3)); // null: no such pair (one layer)

export async function render({ session, state, parts, info, open, isStale }) {
  const order = state.order === "layer" ? "layer" : "cluster";
  parts.order.value = order;
  const data = await session.similarity();
  if (isStale()) return null;
  const heads = info.num_heads;
  const group = heads / info.num_kv_heads;
  const count = data.similarity.length;
  const indices = order === "cluster" ? data.order : Array.from({ length: count }, (_, i) => i);
  const label = (i) => {
    const h = i % heads;
    return `L${Math.floor(i / heads)} h${h}${group > 1 ? ` · kv${Math.floor(h / group)}` : ""}`;
  };
  const labels = indices.map(label);
  const matrix = indices.map((a) => indices.map((b) => data.similarity[a][b]));
  const shapes = [];
  if (order === "layer") {
    // a box per key/value group (GQA), or per layer when every head has its own keys
    const size = group > 1 ? group : heads;
    for (let start = 0; start < count; start += size) {
      shapes.push({
        type: "rect",
        x0: start - 0.5,
        x1: start + size - 0.5,
        y0: start - 0.5,
        y1: start + size - 0.5,
        line: { color: "#e4572e", width: 1 },
      });
    }
  }
  const means = pairMeans(data.similarity, heads, group);
  const cards = [];
  if (group > 1) cards.push(metricCard("heads sharing a key/value head", share(means.shared)));
  cards.push(metricCard(group > 1 ? "other heads of the same layer" : "heads of the same layer", share(means.layer)));
  cards.push(metricCard("heads of different layers", share(means.other)));
  cards.push(
    metricCard(
      "compared",
      data.exact
        ? `every row, exact (${data.compute_ms.toFixed(0)} ms)`
        : `${data.rows_compared} rows × ${data.key_bins} key bins (${data.compute_ms.toFixed(0)} ms)`,
    ),
  );
  parts.metrics.replaceChildren(...cards);
  const title = `head similarity (1 − Jensen-Shannon), ${order === "cluster" ? "alike heads together" : "by layer and head"} · click a cell to open the row's head`;
  await drawHeatmap(parts.map, matrix, labels, labels, {
    title,
    zmin: 0,
    zmax: 1,
    numbered: false,
    hoverName: "similarity",
    shapes,
    height: Math.min(900, Math.max(480, 3 * count + 200)),
  });
  onCellClick(parts.map, (row) => open(Math.floor(indices[row] / heads), indices[row] % heads));
  return {
    kind: "head",
    element: parts.map,
    where: `head-similarity-${order}`,
    tokens: labels,
    rowTokens: labels,
    matrix,
    matrixName: "similarity",
    corner: "head \\ head",
    title,
    colour: viridis,
    colourBar: linearBar(1, "similarity"),
    payload: {
      what: data.measure,
      order,
      head_order: indices,
      exact: data.exact,
      rows_compared: data.rows_compared,
      key_bins: data.key_bins,
      mean_similarity: means,
    },
  };
}
