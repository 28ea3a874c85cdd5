// Query/key view: a token's q vector, every k, the elementwise products and the resulting weights.

import { drawChart, drawHeatmap, escapeLabel } from "./plot.js";
import { chosenToken, fillTokenPicker } from "./tokens.js";

export function bind(parts, set) {
  parts.query.addEventListener("change", () => set({ query: Number(parts.query.value) }));
}

export async function render({ session, state, parts, isStale }) {
  const tokens = session.meta.tokens;
  const query = chosenToken(state, tokens);
  fillTokenPicker(parts.query, tokens, query);
  const detail = await session.detail({
    layer: state.layer,
    head: state.head,
    query,
    scale: false,
    fields: ["q", "k", "products", "weights", "counterfactual_weights"],
  });
  if (isStale()) return null;
  const dims = detail.q[0].map((_, i) => `${i}`);
  const label = tokens[query];
  const current = {
    kind: "head",
    element: parts.products,
    layer: state.layer,
    head: state.head,
    tokens: dims,
    rowTokens: tokens,
    matrix: detail.products,
    matrixName: "products",
    suffix: `-qk-query${query}`,
    payload: {
      what: "q ∘ k for one query: row j holds q[query] * k[j] elementwise; each row sums to the raw score q·k",
      query,
      query_token: label,
      head_dim: detail.head_dim,
      kv_head: detail.kv_head,
      model_scale: detail.model_scale,
      q: detail.q[query],
      k: detail.k,
      scores: detail.products.map((row) => row.reduce((a, b) => a + b, 0)),
      weights: detail.weights[query],
      unscaled_weights: detail.counterfactual_weights[query],
    },
  };
  drawHeatmap(parts.q, [detail.q[query]], [`q(${label})`], dims, {
    title: `query vector of “${label}” (head dim ${detail.head_dim})`,
    colorscale: "RdBu",
    zmid: 0,
    hoverName: "q",
    height: 170,
  });
  drawHeatmap(parts.k, detail.k, tokens, dims, {
    title: `key vectors (kv head ${detail.kv_head})`,
    colorscale: "RdBu",
    zmid: 0,
    xTitle: "dimension",
    hoverName: "k",
  });
  drawHeatmap(parts.products, detail.products, tokens, dims, {
    title: "q ∘ k: each row sums to the score",
    colorscale: "RdBu",
    zmid: 0,
    xTitle: "dimension",
    hoverName: "q∘k",
  });
  const keys = tokens.map((t) => escapeLabel(t));
  const scaledRow = detail.weights[query];
  const unscaledRow = detail.counterfactual_weights[query];
  const x = tokens.map((_, i) => i);
  drawChart(
    parts.bars,
    [
      {
        type: "bar",
        name: `softmax(q·k × ${detail.model_scale.toFixed(3)}) — the model`,
        x,
        y: scaledRow,
        marker: { color: "#0072B2" },
        customdata: keys,
        hovertemplate: "%{customdata}: %{y:.6f}<extra>scaled</extra>",
      },
      {
        type: "bar",
        name: "softmax(q·k) — no scale",
        x,
        y: unscaledRow,
        marker: { color: "#D55E00" },
        customdata: keys,
        hovertemplate: "%{customdata}: %{y:.6f}<extra>unscaled</extra>",
      },
    ],
    {
      title: { text: `weights of “${label}”, scaled vs unscaled`, font: { size: 14 } },
      barmode: "group",
      xaxis: { tickangle: -45 },
      yaxis: { range: [0, 1], title: { text: "weight" } },
      legend: { orientation: "h", y: -0.35 },
      margin: { b: 110 },
      height: 400,
    },
    {},
    { xaxis: { labels: tokens, pixels: (parts.bars.clientWidth || 600) - 80, perLabel: 14 } },
  );
  return current;
}
