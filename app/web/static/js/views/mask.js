// The mask a real model used: scores before softmax (forbidden cells are −∞) and weights after.

import { linearBar, viridis } from "../colors.js";
import { metricCard as metric } from "../dom.js";
import { maskedScores } from "../stats.js";
import { drawHeatmap } from "./plot.js";

export async function render({ session, state, parts, info, isStale }) {
  const detail = await session.detail({
    layer: state.layer,
    head: state.head,
    fields: ["scaled_scores", "mask", "weights"],
  });
  if (isStale()) return null;
  const tokens = detail.tokens;
  const n = tokens.length;
  const segments = session.meta.segments;
  const masked = maskedScores(detail);
  let allowed = 0;
  for (const row of detail.mask) for (const ok of row) allowed += ok ? 1 : 0;
  const sentences = [];
  const window = slidingWindow(detail.mask, info.causal);
  if (window !== null) {
    const side = info.causal
      ? `itself and the ${window - 1} tokens before it`
      : `the tokens within ${window} positions of it, on both sides`;
    sentences.push(
      `This layer uses a sliding window, as its model built it: a token may only look at ${side}. Every other cell gets −∞ before softmax and exactly 0 after. Other layers of this model may look further (switch the layer to see each one's own mask).`,
    );
  } else if (info.causal) {
    sentences.push(
      "This is a decoder, so it uses a causal mask: a token may only look at itself and earlier tokens. Cells above the diagonal get −∞ before softmax and exactly 0 after.",
    );
  } else {
    sentences.push(
      "This is a bidirectional encoder: every token may look at every token, so nothing is masked here. " +
        "A single sentence needs no mask. In a batch, shorter sentences are padded to the longest one, " +
        "and the padding mask then sets every padded key to −∞ before softmax, so no real token attends " +
        "to padding (padded query rows are computed but ignored).",
    );
  }
  if (segments)
    sentences.push(
      "With a sentence pair, segment A and segment B share one attention matrix; the lines mark where B starts, and the off-diagonal blocks are cross-segment attention.",
    );
  parts.explain.textContent = sentences.join(" ");
  const metrics = [
    metric("allowed pairs", `${allowed} of ${n * n}`),
    metric("masked (−∞) cells", String(n * n - allowed)),
  ];
  const shapes = [];
  if (segments) {
    const b = segments.indexOf(1);
    if (b > 0) {
      let cross = 0;
      let total = 0;
      detail.weights.forEach((row, q) =>
        row.forEach((w, k) => {
          total += w;
          if (segments[q] !== segments[k]) cross += w;
        }),
      );
      metrics.push(metric("cross-segment share", `${((100 * cross) / total).toFixed(1)} %`));
      const edge = b - 0.5;
      shapes.push(
        { type: "line", x0: edge, x1: edge, y0: -0.5, y1: n - 0.5, line: { color: "#e4572e", width: 2 } },
        { type: "line", y0: edge, y1: edge, x0: -0.5, x1: n - 0.5, line: { color: "#e4572e", width: 2 } },
      );
    }
  }
  parts.metrics.replaceChildren(...metrics);
  const common = { xTitle: "key", yTitle: "query", shapes };
  await drawHeatmap(parts.before, masked, tokens, tokens, {
    ...common,
    title: "before softmax: scaled scores, blank = −∞",
    hoverName: "score",
  });
  await drawHeatmap(parts.after, detail.weights, tokens, tokens, {
    ...common,
    title: "after softmax: weights (masked = 0)",
    zmin: 0,
    zmax: 1,
    hoverName: "weight",
  });
  return {
    kind: "head",
    element: parts.after,
    layer: state.layer,
    head: state.head,
    tokens,
    matrix: detail.weights,
    title: "weights after the mask",
    colour: viridis,
    colourBar: linearBar(),
    suffix: "-mask",
    payload: { mask: detail.mask },
  };
}

/** The window of a mask that hides earlier keys (a sliding window): for a causal mask the
 * keys a row reads at most (itself included), else the farthest key on either side; null for
 * a plain causal or full mask. */
function slidingWindow(mask, causal) {
  const narrowed = mask.some((row, q) => row.slice(0, q + 1).some((ok) => !ok));
  if (!narrowed) return null;
  if (causal) return Math.max(...mask.map((row) => row.filter(Boolean).length));
  return Math.max(...mask.map((row, q) => row.lastIndexOf(true) - q));
}
