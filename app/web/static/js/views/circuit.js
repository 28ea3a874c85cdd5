// The circuit: heads as nodes, a column a layer, and edges from earlier heads into later heads'
// queries, keys and values, read off this text (how much of each later head's scores and
// output an earlier head wrote) or off a clean/corrupted pair (edge attribution patching).
// The strongest edges are drawn, thinned by a threshold the user moves; a node opens its head,
// an edge opens the trace of the later head's score.

import { api } from "../api.js";
import { el, metricCard } from "../dom.js";
import { headReady, tokenText } from "./lens.js";
import { EXAMPLE } from "./patching.js";
import { drawChart } from "./plot.js";

const INPUT_NAMES = { q: "query", k: "key", v: "value" };
const INPUT_COLOURS = { q: "#1f6fb4", k: "#c0392b", v: "#2e8b57" };
const WIDTHS = [1, 2.5, 4.5, 7]; // pixels, by the edge's share of the largest, in quarters
const ARRIVES = { q: -0.2, k: 0, v: 0.2 }; // an edge ends just above (query), at or below (value) its head

export function bind(parts, set) {
  parts.by.addEventListener("change", () => set({ circuitBy: parts.by.value }));
  parts.inputs.addEventListener("change", () => set({ circuitInputs: parts.inputs.value }));
  parts.threshold.addEventListener("change", () => set({ circuitMin: Number(parts.threshold.value) / 100 }));
  parts.corrupted.addEventListener("change", () =>
    set({ circuitCorrupted: parts.corrupted.value.trim() ? parts.corrupted.value : "" }),
  );
  parts.target.addEventListener("change", () =>
    set({ circuitTarget: parts.target.value.trim() ? parts.target.value : "" }),
  );
  parts.contrast.addEventListener("change", () =>
    set({ circuitContrast: parts.contrast.value.trim() ? parts.contrast.value : "" }),
  );
  parts.example.addEventListener("click", () =>
    set({ text: EXAMPLE[0], circuitCorrupted: EXAMPLE[1], circuitTarget: "", circuitContrast: "" }),
  );
}

/** The request's body from the view's state. */
function body(state) {
  const inputs = state.circuitInputs === "all" ? ["q", "k", "v"] : [state.circuitInputs];
  const out = { by: state.circuitBy, inputs, top: state.circuitBy === "weights" ? 120 : 400 };
  if (state.circuitBy === "edges") {
    out.corrupted = state.circuitCorrupted;
    if (state.circuitTarget) out.target = { text: tokenText(state.circuitTarget) };
    if (state.circuitContrast) out.contrast = { text: tokenText(state.circuitContrast) };
  }
  return out;
}

const POLL_MS = 400;

/**
 * While a circuit from the weights waits for the model's composition scores (computed once a
 * loaded model: SmolLM2 about 5 s), says on the wait line which stage runs and how far it has
 * come (GET /api/models/{id}/composition). Returns the function that stops following.
 */
function followComposition(scene) {
  if (!scene.progress || scene.state.circuitBy !== "weights") return () => {};
  let stopped = false;
  (async () => {
    while (!stopped) {
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      const status = stopped ? null : await api.compositionStatus(scene.state.model).catch(() => null);
      if (stopped || !status || status.state === "ready") return;
      if (status.state === "computing")
        scene.progress(
          `Scoring every pair of heads from the weights, once for this model: ${status.stage} (${Math.round(100 * status.fraction)} %)…`,
          status.fraction,
        );
    }
  })();
  return () => {
    stopped = true;
  };
}

const label = (layer, head) => `L${layer} H${head}`;
const signed = (v) => `${v >= 0 ? "+" : "−"}${Math.abs(v).toPrecision(3)}`;

/** The later head an edge's trace opens: under GQA an edge of edge patching into a shared
 * key/value head opens the first query head of its group (the text's and the weights' edges
 * name query heads). */
function queryHead(edge, answer) {
  if (answer.by !== "edges" || edge.input === "q") return edge.to_head;
  return edge.to_head * (answer.heads / answer.kv_heads);
}

/** Line traces for the edges, a trace per input and width band (Plotly draws one width a
 * trace), and a trace of their midpoints that carries the hover and the click. */
function edgeTraces(edges, answer, largest) {
  const bands = new Map();
  const mid = { x: [], y: [], text: [], customdata: [], colour: [] };
  for (const [index, edge] of edges.entries()) {
    const share = Math.abs(edge.value) / largest;
    const band = Math.min(WIDTHS.length - 1, Math.floor(share * WIDTHS.length));
    const key = `${edge.input}${band}${edge.value < 0 ? "-" : "+"}`;
    if (!bands.has(key)) bands.set(key, { edge, band, x: [], y: [] });
    // drawn into a query head (a shared key/value head's first), its input's side of the dot
    const to = queryHead(edge, answer) + ARRIVES[edge.input];
    bands.get(key).x.push(edge.from_layer, edge.to_layer, null);
    bands.get(key).y.push(edge.from_head, to, null);
    mid.x.push((edge.from_layer + edge.to_layer) / 2);
    mid.y.push((edge.from_head + to) / 2);
    mid.customdata.push(index);
    mid.colour.push(INPUT_COLOURS[edge.input]);
    mid.text.push(
      `${label(edge.from_layer, edge.from_head)} → ${label(edge.to_layer, edge.to_head)}'s ${INPUT_NAMES[edge.input]}: ${signed(edge.value)}`,
    );
  }
  const lines = [...bands.values()].map(({ edge, band, x, y }) => ({
    type: "scatter",
    mode: "lines",
    x,
    y,
    hoverinfo: "skip",
    showlegend: false,
    line: { color: INPUT_COLOURS[edge.input], width: WIDTHS[band], dash: edge.value < 0 ? "dot" : "solid" },
    opacity: 0.35 + 0.15 * band,
  }));
  const points = {
    type: "scatter",
    mode: "markers",
    name: "edges",
    x: mid.x,
    y: mid.y,
    customdata: mid.customdata,
    text: mid.text,
    hovertemplate: "%{text}<extra>click: trace the later head</extra>",
    marker: { size: 7, color: mid.colour, opacity: 0.6, symbol: "diamond" },
    showlegend: false,
  };
  return [...lines, points];
}

/** Every head as a node, sized by its part in the drawn edges. */
function nodeTrace(answer, edges) {
  const touched = new Map();
  for (const edge of edges) {
    for (const [layer, head] of [
      [edge.from_layer, edge.from_head],
      [edge.to_layer, edge.to_head],
    ]) {
      const key = `${layer}.${head}`;
      touched.set(key, (touched.get(key) || 0) + Math.abs(edge.value));
    }
  }
  const most = Math.max(1e-12, ...touched.values());
  const x = [];
  const y = [];
  const size = [];
  const text = [];
  for (let layer = 0; layer < answer.layers; layer++) {
    for (let head = 0; head < answer.heads; head++) {
      const part = touched.get(`${layer}.${head}`) || 0;
      x.push(layer);
      y.push(head);
      size.push(part ? 7 + 13 * Math.sqrt(part / most) : 4);
      text.push(`${label(layer, head)}${part ? ` · edges ${part.toPrecision(3)}` : ""}`);
    }
  }
  return {
    type: "scatter",
    mode: "markers",
    name: "heads",
    x,
    y,
    text,
    hovertemplate: "%{text}<extra>click: open the head</extra>",
    marker: { size, color: size.map((s) => (s > 4 ? "#333" : "#bbb")), line: { width: 0 } },
    showlegend: false,
  };
}

function legend() {
  return Object.entries(INPUT_NAMES).map(([input, name]) => ({
    type: "scatter",
    mode: "lines",
    x: [null],
    y: [null],
    name: `into its ${name}`,
    line: { color: INPUT_COLOURS[input], width: 3 },
  }));
}

export async function render(scene) {
  const { session, state, parts, set, open, isStale } = scene;
  parts.by.value = state.circuitBy;
  parts.inputs.value = state.circuitInputs;
  parts.threshold.value = String(Math.round(100 * state.circuitMin));
  parts.thresholdValue.textContent = `${Math.round(100 * state.circuitMin)} %`;
  parts.corrupted.value = state.circuitCorrupted || "";
  parts.target.value = state.circuitTarget || "";
  parts.contrast.value = state.circuitContrast || "";
  const edgesMode = state.circuitBy === "edges";
  parts.pair.hidden = !edgesMode;
  if (edgesMode) {
    if (!headReady(scene, "next_token")) return null;
    if (!state.circuitCorrupted) {
      parts.summary.textContent =
        "Edge attribution patching needs a corrupted text with as many tokens as yours that changes the answer: type one, or use the name-swap example.";
      parts.results.hidden = true;
      return null;
    }
  }
  const stopFollowing = followComposition(scene);
  let answer;
  try {
    answer = await session.circuit(body(state));
  } finally {
    stopFollowing();
  }
  if (isStale()) return null;
  parts.results.hidden = false;
  const largest = Math.max(1e-12, answer.largest);
  const shown = answer.edges.filter((e) => Math.abs(e.value) >= state.circuitMin * largest);
  const what = edgesMode
    ? `the share of logit(${answer.metric.target}) − logit(${answer.metric.contrast}) at position ${answer.metric.position} that patching the edge alone would recover (clean ${answer.metric.clean.toFixed(2)}, corrupted ${answer.metric.corrupted.toFixed(2)})`
    : answer.by === "weights"
      ? `its composition score from the weights alone, less random heads' (${answer.metric.baseline.k.toFixed(3)}); the same for every text`
      : "the share of the later head's attention-weighted score (query, key) or of its output (value) the earlier head wrote on this text";
  parts.summary.textContent = `Each edge: ${what}.`;
  const strongest = answer.edges[0];
  parts.metrics.replaceChildren(
    metricCard("edges drawn", `${shown.length} of ${answer.edge_count}`),
    metricCard(
      "strongest",
      strongest
        ? `${label(strongest.from_layer, strongest.from_head)} → ${label(strongest.to_layer, strongest.to_head)}.${strongest.input}`
        : "–",
    ),
    metricCard("its value", strongest ? signed(strongest.value) : "–"),
  );
  const traces = [...edgeTraces(shown, answer, largest), nodeTrace(answer, shown), ...legend()];
  await drawChart(parts.graph, traces, {
    title: `Heads by layer; edges of at least ${Math.round(100 * state.circuitMin)} % of the strongest (${signed(answer.largest)}); dotted: negative · click a head to open it, an edge to trace it`,
    height: Math.min(760, Math.max(380, 34 * answer.heads + 170)),
    xaxis: {
      title: { text: "layer" },
      dtick: answer.layers > 16 ? 2 : 1,
      range: [-0.6, answer.layers - 0.4],
      zeroline: false,
    },
    yaxis: { title: { text: "head" }, dtick: 1, range: [answer.heads - 0.5, -0.5], zeroline: false },
    legend: { orientation: "h", y: -0.18 },
    hovermode: "closest",
    margin: { b: 90 },
  });
  if (isStale()) return null;
  parts.graph.removeAllListeners?.("plotly_click");
  parts.graph.on("plotly_click", (event) => {
    const point = event.points?.[0];
    if (!point) return;
    if (point.data.name === "heads") open(point.x, point.y);
    else if (point.data.name === "edges") {
      const edge = shown[point.customdata];
      set({ view: "trace", layer: edge.to_layer, head: queryHead(edge, answer) });
    }
  });
  parts.list.replaceChildren(
    ...shown.slice(0, 12).map((edge) =>
      el("li", {
        text: `${label(edge.from_layer, edge.from_head)} → ${label(edge.to_layer, edge.to_head)}'s ${INPUT_NAMES[edge.input]}: ${signed(edge.value)}`,
      }),
    ),
  );
  return {
    kind: "head",
    element: parts.graph,
    where: `circuit-${answer.by}`,
    tokens: ["from layer", "from head", "to layer", "to head", "input (0 q, 1 k, 2 v)", "value"],
    rowTokens: shown.map((_, i) => `edge ${i}`),
    matrix: shown.map((e) => [e.from_layer, e.from_head, e.to_layer, e.to_head, "qkv".indexOf(e.input), e.value]),
    matrixName: "edges",
    corner: "edge",
    title: `Circuit (${{ edges: "edge attribution patching", weights: "composition from the weights", text: "this text" }[answer.by]})`,
    scope: "every head",
    // the edges drawn are the table above; the whole answer (every edge found) beside it
    payload: { what: `circuit edges: ${what}`, threshold: state.circuitMin, answer },
  };
}
