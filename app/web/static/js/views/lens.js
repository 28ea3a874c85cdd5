// The logit lens: the residual stream entering the first layer and after every layer, read
// through the model's final norm and its head as if that layer were the last. Rows: the
// embeddings, then each layer; columns: the positions the model predicts at. Each cell shows its
// top guess; the colour is one token's probability (or the top guess's); a click opens its top-k.

import { linearBar, viridis } from "../colors.js";
import { el, metricCard } from "../dom.js";
import { modelFits } from "./fits.js";
import { drawHeatmap, onCellClick } from "./plot.js";

/** A token as the user typed or copied it (␣ for a space, as the page shows tokens) -> its text. */
export const tokenText = (shown) => String(shown || "").replace(/␣/g, " ");

/** "3.7" -> [3, 7], or null. */
function parseCell(text) {
  const match = /^(\d+)\.(\d+)$/.exec(String(text || ""));
  return match ? [Number(match[1]), Number(match[2])] : null;
}

/**
 * Whether the open model can show a view that reads its language-model head (`kind`: "any"
 * for the lens, "next_token" for direct attribution and patching); where it cannot, the panel
 * says why, offers a model that can, and hides its results.
 */
export function headReady(scene, kind) {
  const fits = (m) =>
    m.predicts == null ? null : kind === "next_token" ? m.predicts === "next_token" : m.predicts !== "none";
  const why = (model) =>
    model.predicts === "masked"
      ? `${model.id} predicts masked tokens: its head transforms and normalises the stream first, so no piece has a direct effect on a logit.`
      : `${model.id} has no language-model head (a sentence encoder), so there is no logit to read.`;
  return modelFits(scene, fits, why);
}

export function bind(parts, set) {
  parts.token.addEventListener("change", () => set({ lensToken: parts.token.value.trim() ? parts.token.value : "" }));
  parts.shade.addEventListener("change", () => set({ lensShade: parts.shade.value }));
}

const rowLabel = (row) => (row === "embeddings" ? "emb" : row.replace("after layer ", "L"));
const percent = (p) => `${(100 * p).toFixed(p < 0.001 ? 3 : 1)}%`;

/** The first row from which the token stays the top guess at a column, or -1. */
function settlesAt(ranks, column) {
  let from = -1;
  ranks.forEach((row, r) => {
    if (row[column] !== 1) from = -1;
    else if (from < 0) from = r;
  });
  return from;
}

function cellDetails(answer, row, column) {
  const position = answer.positions[column];
  const head = el(
    "tr",
    {},
    ["rank", "token", "probability"].map((t) => el("th", { text: t, attrs: { scope: "col" } })),
  );
  const body = answer.top[row][column].map((c, i) =>
    el("tr", { className: c.token_id === answer.token.token_id ? "changed" : "" }, [
      el("td", { text: String(i + 1) }),
      el("td", { className: "tok", text: c.token }),
      el("td", { text: percent(c.probability) }),
    ]),
  );
  return [
    el("caption", {
      text: `${answer.rows[row]}, position ${position} (“${answer.tokens[position]}”): ${answer.token.token} has ${percent(answer.token_probability[row][column])}, rank ${answer.token_rank[row][column].toLocaleString("en")}`,
    }),
    el("thead", {}, [head]),
    el("tbody", {}, body),
  ];
}

export async function render(scene) {
  const { session, state, parts, set, isStale } = scene;
  parts.token.value = state.lensToken || "";
  parts.shade.value = state.lensShade;
  if (!headReady(scene, "any")) return null;
  const token = state.lensToken ? { text: tokenText(state.lensToken) } : null;
  const answer = await session.lens(token);
  if (isStale()) return null;
  const byToken = state.lensShade !== "top";
  const z = byToken ? answer.token_probability : answer.top.map((row) => row.map((cell) => cell[0].probability));
  const guesses = answer.top.map((row) => row.map((cell) => cell[0].token));
  const columns = answer.positions.map((p) => answer.tokens[p]);
  const rows = answer.rows.map(rowLabel);
  const last = answer.positions.length - 1;
  const settled = settlesAt(answer.token_rank, last);
  const final = answer.token_probability[answer.rows.length - 1][last];
  parts.summary.textContent = `${answer.token.token} at the last position (“${columns[last]}”): ${
    settled < 0
      ? "never the top guess"
      : settled === 0
        ? "the top guess from the embeddings on"
        : `the top guess from ${answer.rows[settled]} on`
  }, ending at ${percent(final)}. Each row reads the stream ${answer.final_norm ? `through the final ${answer.final_norm} and ` : ""}the model's own head; the last row is the model's prediction.`;
  parts.metrics.replaceChildren(
    metricCard("followed token", answer.token.token),
    metricCard("final probability", percent(final)),
    metricCard("top guess from", settled < 0 ? "never" : rows[settled]),
  );
  const what = byToken ? `probability of ${answer.token.token}` : "the top guess's probability";
  const hover = answer.top.map((row) =>
    row.map(
      (cell) =>
        `top: ${cell
          .slice(0, 3)
          .map((c) => `${c.token} ${percent(c.probability)}`)
          .join(", ")}`,
    ),
  );
  await drawHeatmap(parts.plot, z, rows, columns, {
    title: `Logit lens: ${what} (colour) and each cell's top guess (text) · click a cell for its top ${answer.top_k}`,
    zmin: 0,
    zmax: 1,
    cellText: guesses,
    hoverText: hover,
    hoverName: byToken ? answer.token.token : "top guess",
    yTitle: "residual stream after",
    xTitle: answer.predicts === "masked" ? "mask position" : "position (predicting the next token)",
    height: Math.min(900, Math.max(320, 20 * rows.length + 170)),
  });
  onCellClick(parts.plot, (row, column) => set({ lensCell: `${row}.${column}` }));
  const [row, column] = parseCell(state.lensCell) ?? [answer.rows.length - 1, last];
  const inRange = row < answer.rows.length && column < answer.positions.length;
  parts.cell.replaceChildren(...(inRange ? cellDetails(answer, row, column) : []));
  return {
    kind: "head",
    element: parts.plot,
    where: `logit-lens-${byToken ? slugToken(answer.token.token) : "top"}`,
    tokens: columns,
    rowTokens: rows,
    matrix: z,
    matrixName: byToken ? "token_probability" : "top_probability",
    corner: "row \\ position",
    title: `Logit lens: ${what} after each layer`,
    scope: "every layer, read through the final norm and the head",
    colour: (v) => viridis(v),
    colourBar: linearBar(1, "probability"),
    payload: { what: "the logit lens: each row's stream through the final norm and the LM head", ...answer },
  };
}

function slugToken(token) {
  return token.replace(/[^a-z0-9]+/gi, "") || "token";
}
