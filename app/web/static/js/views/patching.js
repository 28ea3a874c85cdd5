// Patching from a second text: the explorer's text is the clean run, a corrupted text (as many
// tokens) changes the answer, and each head's output (and the stream after each layer at each
// position) is copied from the clean run into the corrupted one. Attribution patching's gradient
// estimate comes at once; exact patching, on demand, reruns the model per component, beside it.

import { metricCard } from "../dom.js";
import { SIGNED } from "./attribution.js";
import { headLabels } from "./heads.js";
import { headReady, tokenText } from "./lens.js";
import { drawHeatmap } from "./plot.js";

/** The name-swap example (indirect object identification): clean, corrupted. */
export const EXAMPLE = [
  "When Mary and John went to the store, John gave a drink to",
  "When Mary and John went to the store, Mary gave a drink to",
];

export function bind(parts, set) {
  parts.corrupted.addEventListener("change", () =>
    set({ patchText: parts.corrupted.value.trim() ? parts.corrupted.value : "", patchExact: false }),
  );
  parts.target.addEventListener("change", () =>
    set({ patchTarget: parts.target.value.trim() ? parts.target.value : "", patchExact: false }),
  );
  parts.contrast.addEventListener("change", () =>
    set({ patchContrast: parts.contrast.value.trim() ? parts.contrast.value : "", patchExact: false }),
  );
  parts.example.addEventListener("click", () =>
    set({ text: EXAMPLE[0], patchText: EXAMPLE[1], patchTarget: "", patchContrast: "", patchExact: false }),
  );
  parts.exact.addEventListener("click", () => set({ patchExact: true }));
}

const RECOVERY = { zmin: -1, zmax: 1, zmid: 0, colorscale: SIGNED, hoverName: "recovered" };

function clip(grid) {
  return grid.map((row) => row.map((v) => Math.max(-1, Math.min(1, v))));
}

/** The components with the largest recovery: "L23 h3 0.58, ...". */
function leaders(grid, count = 3) {
  return grid
    .flatMap((row, layer) => row.map((value, head) => ({ layer, head, value })))
    .sort((a, b) => Math.abs(b.value) - Math.abs(a.value))
    .slice(0, count)
    .map((c) => `L${c.layer} h${c.head} ${c.value.toFixed(2)}`)
    .join(", ");
}

let running = null; // the exact run's AbortController, while one streams

async function drawPair(answer, heads, stream, info, title) {
  const labels = headLabels(info);
  await drawHeatmap(heads, clip(answer.heads), labels.layers, labels.heads, {
    ...RECOVERY,
    numbered: false,
    showText: true,
    digits: 2,
    title: `${title}: each head's output copied from the clean run`,
    height: Math.min(820, Math.max(300, 22 * info.num_layers + 150)),
  });
  const rows = answer.tokens.map((t, i) => (answer.differ.includes(i) ? `${t}→${answer.corrupted_tokens[i]}` : t));
  await drawHeatmap(stream, clip(answer.stream), labels.layers, rows, {
    ...RECOVERY,
    numbered: true,
    title: `${title}: the stream after each layer, at each position`,
    yTitle: "after layer",
    height: Math.min(820, Math.max(300, 22 * info.num_layers + 150)),
  });
}

/** The server refused the texts (the explorer shows why in this panel): say what to do. */
export function refused(parts) {
  parts.results.hidden = true;
  parts.summary.textContent =
    "Patching needs two texts that line up token for token and whose answers differ: change the corrupted text (as many tokens as yours, with the change that should move the answer, as the name-swap example does), or type a target and a contrast token above.";
}

export async function render(scene) {
  const { session, state, info, parts, isStale } = scene;
  parts.corrupted.value = state.patchText || "";
  parts.target.value = state.patchTarget || "";
  parts.contrast.value = state.patchContrast || "";
  if (running && !state.patchExact) running.abort();
  if (!headReady(scene, "next_token")) return null;
  if (!state.patchText) {
    parts.summary.textContent =
      "Write a corrupted text above: the same number of tokens as your text, with the change that should move the answer (for example a name swapped). Or use the example.";
    parts.results.hidden = true;
    return null;
  }
  const body = { corrupted: state.patchText };
  if (state.patchTarget) body.target = { text: tokenText(state.patchTarget) };
  if (state.patchContrast) body.contrast = { text: tokenText(state.patchContrast) };
  const answer = await session.patching(body);
  if (isStale()) return null;
  parts.results.hidden = false;
  const changed = answer.differ.map((i) => `${i} “${answer.tokens[i]}” → “${answer.corrupted_tokens[i]}”`).join("; ");
  parts.summary.textContent = `Metric: logit(${answer.target}) − logit(${answer.contrast}) at position ${answer.position} (“${answer.tokens[answer.position]}”). Each cell: the share of the clean − corrupted difference that copying it from the clean run recovers (1: all of it, 0: nothing, below 0: it moves the other way). Changed: ${changed || "no token (the texts are the same)"}.`;
  parts.metrics.replaceChildren(
    metricCard("clean", answer.clean.toFixed(3)),
    metricCard("corrupted", answer.corrupted.toFixed(3)),
    metricCard("strongest heads (estimate)", leaders(answer.heads)),
  );
  await drawPair(answer, parts.approxHeads, parts.approxStream, info, "Attribution patching (gradient estimate)");
  if (isStale()) return null;
  const sequences = info.num_layers * (info.num_heads + answer.tokens.length);
  parts.exact.textContent = `Run exact patching (${sequences.toLocaleString("en")} reruns)`;
  parts.exactPanel.hidden = !state.patchExact;
  parts.exactStream.hidden = !state.patchExact;
  parts.exact.hidden = state.patchExact;
  let exact = null;
  if (state.patchExact) {
    running?.abort();
    const controller = new AbortController();
    running = controller;
    parts.stop.hidden = false;
    parts.stop.onclick = () => controller.abort();
    parts.progress.hidden = false;
    try {
      exact = await session.patchingExact(
        body,
        (line) => {
          if (line.event === "progress") {
            parts.progress.value = line.layer / line.layers;
            parts.progressText.textContent = `exact patching: layer ${line.layer} of ${line.layers / 2} (${line.layer < line.layers / 2 ? "heads" : "stream"})`;
          }
        },
        controller.signal,
      );
    } catch (err) {
      if (err.name !== "AbortError") throw err;
      parts.progressText.textContent = "Exact patching stopped.";
      return null;
    } finally {
      parts.stop.hidden = true;
      parts.progress.hidden = true;
      if (running === controller) running = null;
    }
    if (isStale()) return null;
    parts.progressText.textContent = `exact patching: ${exact.passes.toLocaleString("en")} passes · strongest heads ${leaders(exact.heads)}`;
    await drawPair(exact, parts.exactHeads, parts.exactStream, info, "Exact patching");
  }
  const shown = exact ?? answer;
  const labels = headLabels(info);
  return {
    kind: "head",
    element: exact ? parts.exactHeads : parts.approxHeads,
    where: `patching-${shown.method}`,
    tokens: labels.heads,
    rowTokens: labels.layers,
    matrix: shown.heads,
    matrixName: "heads",
    corner: "layer \\ head",
    title: `${exact ? "Exact" : "Attribution"} patching: share of logit(${answer.target}) − logit(${answer.contrast}) recovered by each head`,
    scope: "every layer and head",
    payload: { what: "patching from a corrupted text", attribution: answer, exact },
  };
}
