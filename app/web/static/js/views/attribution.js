// Direct logit attribution: what each head (and each MLP, and the embeddings) writes toward one
// token's logit at one position, read through the final norm with its scale frozen. A head's
// cell opens what it writes from each token it read.

import { el, fillIndexSelect, metricCard } from "../dom.js";
import { headLabels } from "./heads.js";
import { headReady, tokenText } from "./lens.js";
import { drawChart, drawHeatmap, onCellClick } from "./plot.js";

/** Blue below zero, white at zero, red above: a contribution's sign. */
export const SIGNED = [
  [0, "#2166ac"],
  [0.5, "#f7f7f7"],
  [1, "#b2182b"],
];

/** "5.2" -> {layer: 5, head: 2}, or null. */
export function parseHead(text) {
  const match = /^\s*(\d+)\s*\.\s*(\d+)\s*$/.exec(String(text || ""));
  return match ? { layer: Number(match[1]), head: Number(match[2]) } : null;
}

export function bind(parts, set) {
  parts.position.addEventListener("change", () => set({ dlaPosition: Number(parts.position.value), dlaSource: "" }));
  parts.target.addEventListener("change", () =>
    set({ dlaTarget: parts.target.value.trim() ? parts.target.value : "", dlaSource: "" }),
  );
  parts.contrast.addEventListener("change", () =>
    set({ dlaContrast: parts.contrast.value.trim() ? parts.contrast.value : "", dlaSource: "" }),
  );
}

const signed = (v) => `${v >= 0 ? "+" : "−"}${Math.abs(v).toFixed(3)}`;

/** The head that pushes most toward the target (sign 1) or against it (sign -1):
 * {layer, head, value}. */
export function strongest(heads, sign = 1) {
  let best = { layer: 0, head: 0, value: 0 };
  heads.forEach((row, layer) =>
    row.forEach((value, head) => {
      if (sign * value > sign * best.value) best = { layer, head, value };
    }),
  );
  return best;
}

function candidateButtons(answer, set) {
  return answer.candidates.map((c) => {
    const button = el("button", {
      text: `${c.token} ${(100 * c.probability).toFixed(1)}%`,
      className: "chip",
      attrs: { type: "button" },
    });
    button.classList.toggle("chosen", c.token_id === answer.target.token_id);
    button.addEventListener("click", () => set({ dlaTarget: c.token, dlaSource: "" }));
    return button;
  });
}

export async function render(scene) {
  const { session, state, info, parts, set, open, isStale } = scene;
  if (!headReady(scene, "next_token")) return null;
  const tokens = info.tokens;
  const position =
    Number.isInteger(state.dlaPosition) && state.dlaPosition < tokens.length ? state.dlaPosition : tokens.length - 1;
  fillIndexSelect(parts.position, tokens.length, position);
  [...parts.position.options].forEach((option, i) => (option.textContent = `${i} · ${tokens[i]}`));
  parts.target.value = state.dlaTarget || "";
  parts.contrast.value = state.dlaContrast || "";
  const body = { position };
  if (state.dlaTarget) body.target = { text: tokenText(state.dlaTarget) };
  if (state.dlaContrast) body.contrast = { text: tokenText(state.dlaContrast) };
  const first = await session.attribution(body);
  if (isStale()) return null;
  const source = parseHead(state.dlaSource) ?? strongest(first.heads);
  const answer = await session.attribution({ ...body, source: { layer: source.layer, head: source.head } });
  if (isStale()) return null;
  const what = answer.contrast
    ? `logit(${answer.target.token}) − logit(${answer.contrast.token})`
    : `the logit of ${answer.target.token}`;
  parts.candidates.replaceChildren(el("span", { text: "The model's guesses here:" }), ...candidateButtons(answer, set));
  const top = strongest(answer.heads);
  const against = strongest(answer.heads, -1);
  const mlpTotal = answer.mlps.reduce((a, b) => a + b, 0);
  const headTotal = answer.heads.flat().reduce((a, b) => a + b, 0);
  parts.metrics.replaceChildren(
    metricCard(answer.contrast ? "logit difference" : "logit", answer.logit.toFixed(3)),
    metricCard("all heads", signed(headTotal)),
    metricCard("all MLPs", signed(mlpTotal)),
    metricCard("embeddings", signed(answer.embeddings)),
    metricCard("pushes most toward", `L${top.layer} h${top.head} ${signed(top.value)}`),
    metricCard("pushes most against", `L${against.layer} h${against.head} ${signed(against.value)}`),
    metricCard("parts' sum − logit", (answer.total - answer.logit).toExponential(1)),
  );
  parts.summary.textContent = `Position ${position} (“${tokens[position]}”): ${what}, taken apart into what each piece writes directly. ${answer.convention}`;
  const labels = headLabels(info);
  const largest = Math.max(1e-6, ...answer.heads.flat().map(Math.abs));
  const mark = [
    {
      type: "rect",
      x0: source.head - 0.5,
      x1: source.head + 0.5,
      y0: source.layer - 0.5,
      y1: source.layer + 0.5,
      line: { color: "#222", width: 2 },
    },
  ];
  await drawHeatmap(parts.heads, answer.heads, labels.layers, labels.heads, {
    title: `Each head's direct effect on ${what} (red: toward, blue: against) · click a head for the tokens it writes from`,
    zmin: -largest,
    zmax: largest,
    zmid: 0,
    colorscale: SIGNED,
    hoverName: "direct effect",
    numbered: false,
    showText: true,
    digits: 2,
    shapes: mark,
    height: Math.min(820, Math.max(300, 22 * info.num_layers + 150)),
  });
  onCellClick(parts.heads, (layer, head) => set({ dlaSource: `${layer}.${head}` }));
  if (isStale()) return null;
  const layers = labels.layers;
  const perLayer = answer.heads.map((row) => row.reduce((a, b) => a + b, 0));
  await drawChart(
    parts.layers,
    [
      { type: "bar", name: "heads", x: layers, y: perLayer, marker: { color: "#b2182b" } },
      { type: "bar", name: "MLP", x: layers, y: answer.mlps, marker: { color: "#4d7ea8" } },
      { type: "bar", name: "output bias", x: layers, y: answer.attention_bias, marker: { color: "#999" } },
    ],
    {
      title: `Layer by layer: its heads, its MLP and its attention's bias (embeddings ${signed(answer.embeddings)}, final biases ${signed(answer.bias)})`,
      barmode: "group",
      height: 320,
      yaxis: { title: { text: "direct effect" }, zeroline: true },
      xaxis: { type: "category" },
      legend: { orientation: "h", y: -0.25 },
    },
  );
  if (isStale()) return null;
  const split = answer.source;
  const share = split.values;
  await drawChart(
    parts.source,
    [
      {
        type: "bar",
        x: tokens.map((_, i) => i),
        y: share,
        customdata: split.weights,
        marker: { color: share.map((v) => (v >= 0 ? "#b2182b" : "#2166ac")) },
        hovertemplate: "key %{x}<br>writes %{y:.4f}<br>attention weight %{customdata:.4f}<extra></extra>",
      },
    ],
    {
      title: `Layer ${split.layer} head ${split.head} writes ${signed(answer.heads[split.layer][split.head])} toward ${what} from these tokens (weight × value, read along the logit direction)`,
      height: 300,
      yaxis: { title: { text: "direct effect" } },
      xaxis: { title: { text: "key token it read" } },
      margin: { b: 90 },
    },
    {},
    { xaxis: { labels: tokens, pixels: (parts.source.clientWidth || 600) - 80, perLabel: 14 } },
  );
  parts.openHead.textContent = `Open layer ${split.layer} head ${split.head} in the heatmap`;
  parts.openHead.onclick = () => open(split.layer, split.head);
  return {
    kind: "head",
    element: parts.heads,
    where: `direct-attribution-p${position}`,
    tokens: labels.heads,
    rowTokens: labels.layers,
    matrix: answer.heads,
    matrixName: "heads",
    corner: "layer \\ head",
    title: `Direct effect of each head on ${what} at position ${position}`,
    scope: "every layer and head",
    payload: { what: "direct logit attribution: each piece's direct effect, final norm frozen", ...answer },
  };
}
