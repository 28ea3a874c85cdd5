// Query-key space (after AttentionViz): one head's queries and keys in one plane, moved in the
// two ways that leave every weight unchanged so a query sits near the keys it attends to.
// Hovering a query draws its strongest keys; a layer's heads can be drawn as small multiples.

import { metricCard } from "../dom.js";
import { drawChart, escapeLabel } from "./plot.js";

const QUERY = "#2563eb";
const KEY = "#d9480f";

export function bind(parts, set) {
  parts.scope.addEventListener("change", () => set({ qkScope: parts.scope.value }));
  parts.method.addEventListener("change", () => set({ qkMethod: parts.method.value }));
}

const LABELLED_TOKENS = 40; // up to this many tokens, each point shows its token

/** The two point traces of one head's plane on axes `x{n}`/`y{n}` ("" for the first). */
function pointTraces(space, tokens, n = "", showLegend = true) {
  const labels = tokens.map((t, i) => `${i} · ${escapeLabel(t)}`);
  const labelled = n === "" && tokens.length <= LABELLED_TOKENS;
  // A white outline sets crowded points apart, but costs a quarter of the drawing time: only
  // where each point is labelled (a 512-token head draws 1,024 points in one task).
  const outline = labelled ? { width: 1, color: "#fff" } : { width: 0 };
  const common = {
    type: "scatter",
    mode: labelled ? "markers+text" : "markers",
    xaxis: `x${n}`,
    yaxis: `y${n}`,
    hovertext: labels,
    text: labelled ? tokens.map(escapeLabel) : undefined,
    textposition: "top center",
    textfont: { size: 10, color: "#4b5563" },
    showlegend: showLegend,
  };
  return [
    {
      ...common,
      name: "query",
      x: space.queries.map((p) => p[0]),
      y: space.queries.map((p) => p[1]),
      marker: { color: QUERY, size: 8, symbol: "circle", line: outline },
      customdata: space.strongest.map((keys, i) =>
        keys.map((k, r) => `${labels[k]} ${space.strongest_weights[i][r].toFixed(3)}`).join("<br>"),
      ),
      hovertemplate: "query %{hovertext}<br>strongest keys:<br>%{customdata}<extra></extra>",
    },
    {
      ...common,
      name: "key",
      x: space.keys.map((p) => p[0]),
      y: space.keys.map((p) => p[1]),
      marker: { color: KEY, size: 9, symbol: "triangle-up", line: outline },
      hovertemplate: "key %{hovertext}<extra></extra>",
    },
  ];
}

/** Lines from query i to its strongest keys, thicker for more weight. */
function strongestLines(space, i, n = "") {
  const [qx, qy] = space.queries[i];
  return space.strongest[i].map((k, r) => ({
    type: "line",
    xref: `x${n}`,
    yref: `y${n}`,
    x0: qx,
    y0: qy,
    x1: space.keys[k][0],
    y1: space.keys[k][1],
    line: { color: "#111827", width: 0.5 + 5 * space.strongest_weights[i][r] },
    opacity: 0.7,
    layer: "below",
  }));
}

/** Hovering a query (trace 2h of head h) draws its lines; leaving keeps `fixed` lines only. */
function wireHover(element, spaces, fixed) {
  element._qk = { spaces, fixed };
  if (element._qkHover) return;
  element._qkHover = true;
  element.on("plotly_hover", (event) => {
    const point = event.points?.[0];
    if (!point || point.curveNumber % 2 !== 0) return;
    const h = point.curveNumber / 2;
    const n = h === 0 ? "" : String(h + 1);
    window.Plotly.relayout(element, { shapes: strongestLines(element._qk.spaces[h], point.pointNumber, n) });
  });
  element.on("plotly_unhover", () => window.Plotly.relayout(element, { shapes: element._qk.fixed }));
}

function describe(answer, space) {
  const explained = space.explained
    ? ` · the axes hold ${(100 * space.explained[0]).toFixed(0)}% and ${(100 * space.explained[1]).toFixed(0)}% of the variance`
    : "";
  return `${answer.method.toUpperCase()} of layer ${answer.layer} · head ${space.head} (key/value head ${space.kv_head})${explained}`;
}

async function drawOne(parts, answer, state) {
  const [space] = answer.heads;
  const fixed = state.query !== null && state.query < answer.tokens.length ? strongestLines(space, state.query) : [];
  const size = Math.min(640, Math.max(320, parts.plot.clientWidth || 600));
  await drawChart(parts.plot, pointTraces(space, answer.tokens), {
    title: `${describe(answer, space)} · hover a query (●) to draw the keys (▲) it attends to most`,
    height: size,
    shapes: fixed,
    hovermode: "closest",
    xaxis: { zeroline: false, showticklabels: false, title: { text: "" } },
    yaxis: { zeroline: false, showticklabels: false, scaleanchor: "x", scaleratio: 1 },
    legend: { orientation: "h", y: -0.02 },
  });
  wireHover(parts.plot, [space], fixed);
  return space;
}

async function drawLayer(parts, answer, set) {
  const count = answer.heads.length;
  const width = parts.plot.clientWidth || 900;
  const columns = Math.min(count, width < 600 ? 2 : Math.ceil(Math.sqrt(count)));
  const rows = Math.ceil(count / columns);
  const traces = answer.heads.flatMap((space, h) =>
    pointTraces(space, answer.tokens, h === 0 ? "" : String(h + 1), h === 0),
  );
  const axes = {};
  const annotations = [];
  answer.heads.forEach((space, h) => {
    const n = h === 0 ? "" : String(h + 1);
    axes[`xaxis${n}`] = { showticklabels: false, zeroline: false };
    axes[`yaxis${n}`] = { showticklabels: false, zeroline: false };
    annotations.push({
      text: `head ${space.head}`,
      xref: `x${n} domain`,
      yref: `y${n} domain`,
      x: 0,
      y: 1,
      xanchor: "left",
      yanchor: "bottom",
      showarrow: false,
      font: { size: 12 },
    });
  });
  await drawChart(parts.plot, traces, {
    title: `${answer.method.toUpperCase()} of every head of layer ${answer.layer}: queries ● and keys ▲ · hover a query for its strongest keys, click to open the head`,
    height: Math.max(320, rows * (width / columns) * 0.85 + 80),
    hovermode: "closest",
    grid: { rows, columns, pattern: "independent", xgap: 0.08, ygap: 0.12 },
    annotations,
    ...axes,
    legend: { orientation: "h", y: -0.02 },
  });
  wireHover(parts.plot, answer.heads, []);
  parts.plot._qkOpen = (curve) => set({ head: answer.heads[Math.floor(curve / 2)].head, qkScope: "head" });
  if (parts.plot._qkClicks) return;
  parts.plot._qkClicks = true;
  parts.plot.on("plotly_click", (event) => {
    const point = event.points?.[0];
    if (point && parts.plot._qk.spaces.length > 1) parts.plot._qkOpen(point.curveNumber);
  });
}

export async function render({ session, state, parts, projections, set, isStale }) {
  const methods = projections || ["pca"];
  parts.method.replaceChildren(...methods.map((m) => new Option(m === "pca" ? "PCA (exact)" : "UMAP", m)));
  const method = methods.includes(state.qkMethod) ? state.qkMethod : "pca";
  parts.method.value = method;
  parts.scope.value = state.qkScope === "layer" ? "layer" : "head";
  const layerWide = parts.scope.value === "layer";
  const answer = await session.qkspace({ layer: state.layer, head: layerWide ? null : state.head, method });
  if (isStale()) return null;
  const first = answer.heads[0];
  parts.metrics.replaceChildren(
    metricCard("queries scaled by", first.query_scale.toPrecision(3)),
    metricCard("method", answer.method === "pca" ? "PCA" : "UMAP"),
    ...(first.explained
      ? [metricCard("variance on the two axes", `${(100 * (first.explained[0] + first.explained[1])).toFixed(0)}%`)]
      : []),
  );
  if (layerWide) {
    await drawLayer(parts, answer, set);
    return {
      kind: "head",
      element: parts.plot,
      where: `qk-space-L${answer.layer}`,
      layer: answer.layer,
      payload: answer,
    };
  }
  const space = await drawOne(parts, answer, state);
  const coords = answer.tokens.map((_, i) => [...space.queries[i], ...space.keys[i]]);
  return {
    kind: "head",
    element: parts.plot,
    layer: answer.layer,
    head: space.head,
    where: `qk-space-L${answer.layer}-H${space.head}`,
    tokens: ["query x", "query y", "key x", "key y"],
    rowTokens: answer.tokens,
    matrix: coords,
    matrixName: "coordinates",
    corner: "token \\ coordinate",
    payload: answer,
  };
}
