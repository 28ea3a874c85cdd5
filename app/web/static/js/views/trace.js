// Trace a score: one head's pre-softmax score from a query to a key, taken apart into the
// residual stream's pieces (the embeddings, every earlier head's and MLP's output, the bias
// terms) through the query and through the key, and into (query piece, key piece) pairs.
// The key by default is the one the query weighs most; a head piece opens that head here, on
// the key's position for a key-side piece, so a chain of heads can be followed backwards.

import { el, metricCard } from "../dom.js";
import { SIGNED } from "./attribution.js";
import { drawChart, drawHeatmap, onCellClick } from "./plot.js";
import { chosenToken, fillTokenPicker } from "./tokens.js";

const BARS = 12; // pieces a side drawn as bars, the largest by size
const COLOURS = { plus: "#b2182b", minus: "#2166ac" }; // SIGNED's ends: toward, against

export function bind(parts, set) {
  parts.query.addEventListener("change", () =>
    set({ query: Number(parts.query.value), traceKey: null, traceContrast: null }),
  );
  parts.key.addEventListener("change", () => set({ traceKey: Number(parts.key.value), traceContrast: null }));
  parts.contrast.addEventListener("change", () =>
    set({ traceContrast: parts.contrast.value === "" ? null : Number(parts.contrast.value) }),
  );
  parts.side.addEventListener("change", () => set({ traceSide: parts.side.value }));
  parts.top.addEventListener("change", () => set({ traceTop: Number(parts.top.value) }));
}

const signed = (v) => `${v >= 0 ? "+" : "−"}${Math.abs(v).toPrecision(3)}`;
const argmax = (values) => values.reduce((best, v, i) => (v > values[best] ? i : best), 0);

/** The matrix's row and column labels: the pieces shown, then the two pieces of their own. */
function matrixPieces(answer) {
  const bias = answer.pieces.length - 1;
  return [
    ...answer.shown.map((i) => answer.pieces[i]),
    { kind: "other", label: "every other piece" },
    answer.pieces[bias],
  ];
}

/** What opening a head piece does: that head, here; a key-side piece at the key's position. */
function follow(piece, side, answer, set) {
  if (piece?.kind !== "head") return;
  const query = side === "key" ? answer.key : answer.query;
  set({ layer: piece.layer, head: piece.head, query, traceKey: null, traceContrast: null });
}

/** A button that opens a head piece (null for any other piece). */
function followButton(piece, side, answer, set) {
  if (piece?.kind !== "head") return null;
  const where = side === "key" ? answer.key : answer.query;
  const button = el("button", {
    text: `Trace ${piece.label} at “${answer.tokens[where]}”`,
    className: "secondary",
    attrs: { type: "button" },
  });
  button.style.margin = "2px 0"; // apart when a pair's two buttons wrap onto lines of their own
  button.addEventListener("click", () => follow(piece, side, answer, set));
  return button;
}

/** The largest pieces of one side as horizontal bars, largest at the top; a head's bar opens it. */
async function sideBars(target, values, answer, side, title, set) {
  const order = values
    .map((_, i) => i)
    .sort((a, b) => Math.abs(values[b]) - Math.abs(values[a]))
    .slice(0, BARS)
    .reverse();
  const labels = order.map((i) => answer.pieces[i].label);
  await drawChart(
    target,
    [
      {
        type: "bar",
        orientation: "h",
        x: order.map((i) => values[i]),
        y: labels,
        customdata: order,
        marker: { color: order.map((i) => (values[i] >= 0 ? COLOURS.plus : COLOURS.minus)) },
        hovertemplate: "%{y}: %{x:.4f}<extra></extra>",
      },
    ],
    {
      title,
      height: 24 * order.length + 130,
      xaxis: { title: { text: "part of the score" }, zeroline: true },
      yaxis: { type: "category", automargin: true },
      margin: { l: 110 },
    },
  );
  onCellClick(target, (index) => follow(answer.pieces[order[index]], side, answer, set));
}

export async function render(scene) {
  const { session, state, info, parts, set, isStale } = scene;
  const tokens = info.tokens;
  const query = chosenToken(state, tokens);
  const head = { layer: state.layer, head: state.head };
  const top = state.traceTop ?? 12; // the notebook widget keeps no such field: the default
  const ask = (key, contrast) => {
    const body = { ...head, query, key, top };
    if (contrast !== null && contrast !== undefined && contrast !== key) body.contrast = contrast;
    return session.trace(body);
  };
  // A key the query can read (a causal model's query reads no later key); with none in the
  // link, the key the query weighs most, found from a first trace of the query on itself.
  const readable = (j) => Number.isInteger(j) && j < tokens.length && !(info.causal && j > query);
  const chosen = readable(state.traceKey) ? state.traceKey : null;
  const contrast = readable(state.traceContrast) ? state.traceContrast : null;
  let key = chosen ?? query;
  let answer = await ask(key, contrast);
  if (isStale()) return null;
  if (chosen === null && argmax(answer.weights) !== key) {
    key = argmax(answer.weights);
    answer = await ask(key, contrast);
    if (isStale()) return null;
  }
  fillTokenPicker(parts.query, tokens, query);
  fillTokenPicker(parts.key, tokens, key);
  const others = tokens.map((_, i) => i).filter((i) => i !== key && answer.weights[i] > 0);
  const contrastKey = others.map((i) => `${i}`).join(",");
  if (parts.contrast._keys !== contrastKey) {
    parts.contrast.replaceChildren(
      new Option("the next highest weight", ""),
      ...others.map((i) => new Option(`${i}: ${tokens[i]}`, String(i))),
    );
    parts.contrast._keys = contrastKey;
  }
  parts.contrast.value = contrast === null || contrast === key ? "" : String(contrast);
  parts.top.value = String(top);
  const versus = state.traceSide === "versus" && answer.versus;
  parts.side.value = versus ? "versus" : "score";
  const sides = versus ? answer.versus : answer.trace;
  const q = `“${tokens[answer.query]}”`;
  const k = `“${tokens[answer.key]}”`;
  const c = answer.contrast === null ? null : `“${tokens[answer.contrast]}”`;
  const what = versus ? `score(${q} → ${k}) − score(${q} → ${c})` : `the score of ${q} → ${k}`;

  parts.metrics.replaceChildren(
    metricCard("score", answer.score.toFixed(4), "score"),
    metricCard("weight", answer.weight.toFixed(4), "weight"),
    ...(answer.capped === null ? [] : [metricCard("after the softcap", answer.capped.toFixed(4), "capped")]),
    ...(answer.position_bias ? [metricCard("position bias", signed(answer.position_bias), "bias")] : []),
    metricCard("parts' sum − score", (answer.parts_sum - answer.score).toExponential(1), "sum"),
    metricCard("at most (float rounding)", answer.bound.toExponential(1), "bound"),
    ...(answer.versus
      ? [
          metricCard(
            `against ${c} (weight ${answer.weights[answer.contrast].toFixed(3)})`,
            signed(answer.versus.score),
            "versus",
          ),
        ]
      : []),
  );
  parts.summary.replaceChildren(...answer.summary.map((line) => el("li", { text: line })));
  parts.convention.textContent = answer.convention;

  await drawChart(
    parts.row,
    [
      {
        type: "bar",
        x: tokens.map((_, i) => i),
        y: answer.weights,
        marker: {
          color: tokens.map((_, i) => (i === answer.key ? "#b2182b" : i === answer.contrast ? "#2166ac" : "#999")),
        },
        hovertemplate: "key %{x}<br>weight %{y:.4f}<extra>click: trace this key</extra>",
      },
    ],
    {
      title: `Layer ${answer.layer} head ${answer.head}: what ${q} weighs each key (red: the key traced, blue: the contrast) · click a key to trace it`,
      height: 260,
      yaxis: { title: { text: "weight" }, range: [0, 1] },
      margin: { b: 60 },
    },
    {},
    { xaxis: { labels: tokens, pixels: (parts.row.clientWidth || 600) - 80, perLabel: 14 } },
  );
  onCellClick(parts.row, (index) => set({ traceKey: index, traceContrast: null }));
  if (isStale()) return null;
  await sideBars(
    parts.querySide,
    sides.query_side,
    answer,
    "query",
    `Through the query at ${q}: the largest parts of ${what} · click a head to trace it`,
    set,
  );
  if (isStale()) return null;
  await sideBars(
    parts.keySide,
    sides.key_side,
    answer,
    "key",
    `Through the key at ${k}: the largest parts · click a head to trace it at ${k}`,
    set,
  );
  if (isStale()) return null;

  const pieces = matrixPieces(answer);
  const labels = pieces.map((p) => p.label);
  const largest = Math.max(1e-9, ...sides.matrix.flat().map(Math.abs));
  // 22 px a column at least, the labels and the colour bar beside: its frame scrolls sideways
  parts.matrix.style.minWidth = `${22 * labels.length + 200}px`;
  const title = `Pairs: a query-side piece (row) meeting a key-side piece (column), summing to ${what} · click a pair to follow its heads`;
  // above its frame, which may scroll sideways
  parts.matrixTitle.textContent = `${title}. Rows: the query side at ${q}; columns: the key side at ${k}.`;
  await drawHeatmap(parts.matrix, sides.matrix, labels, labels, {
    yTitle: `query side at ${q}`,
    zmin: -largest,
    zmax: largest,
    zmid: 0,
    colorscale: SIGNED,
    hoverName: "part",
    numbered: false,
    showText: true,
    digits: 2,
    height: Math.min(900, Math.max(340, 24 * labels.length + 190)),
  });
  onCellClick(parts.matrix, (row, column) => {
    const buttons = [followButton(pieces[row], "query", answer, set), followButton(pieces[column], "key", answer, set)];
    parts.pair.replaceChildren(
      el("span", {
        text: `${labels[row]} (query) meeting ${labels[column]} (key): ${signed(sides.matrix[row][column])}`,
      }),
      ...buttons.filter(Boolean),
    );
  });
  parts.pair.replaceChildren(el("span", { text: "Click a pair of the matrix to follow its heads." }));
  parts.pairs.replaceChildren(
    ...sides.pairs.map((pair) => {
      const side = (index, kind) => (index < 0 ? null : followButton(answer.pieces[index], kind, answer, set));
      const buttons = [side(pair.query_piece, "query"), side(pair.key_piece, "key")].filter(Boolean);
      return el("li", {}, [el("span", { text: pair.text }), ...buttons.flatMap((b) => [" ", b])]);
    }),
  );
  return {
    kind: "head",
    element: parts.matrix,
    layer: answer.layer,
    head: answer.head,
    tokens: labels,
    rowTokens: labels,
    matrix: sides.matrix,
    matrixName: "pairs",
    corner: "query piece \\ key piece",
    where: `trace-L${answer.layer}-H${answer.head}-q${answer.query}-k${answer.key}${versus ? `-vs${answer.contrast}` : ""}`,
    title: `Layer ${answer.layer} head ${answer.head}: ${what} taken apart into pairs of pieces`,
    payload: { what: `one attention score taken apart: ${answer.convention}`, ...answer },
  };
}
