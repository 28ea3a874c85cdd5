// Step by step: QKᵀ -> scale -> mask -> softmax -> weights × V, each stage a heatmap.

import { linearBar, viridis } from "../colors.js";
import { el as make } from "../dom.js";
import { maskedScores, poolLabels, poolMax } from "../stats.js";
import { drawHeatmap } from "./plot.js";

const POOL_ABOVE = 256; // tokens

const STAGES = [
  ["scores", "1. Raw scores QKᵀ", "how well each query matches each key"],
  ["scaled", "2. Scaled", "× scale ÷ temperature"],
  ["masked", "3. Masked", "forbidden pairs become −∞ (blank)"],
  ["weights", "4. Softmax weights", "each row sums to 1"],
  ["output", "5. Output = weights × V", "each token's new vector for this head"],
];

/** Build (once) the five stage figures inside `container`; returns {key: plotElement}. */
export function stageFigures(container) {
  if (container.dataset.built) {
    return Object.fromEntries(STAGES.map(([key]) => [key, container.querySelector(`[data-stage="${key}"]`)]));
  }
  const plots = {};
  for (const [key, title, why] of STAGES) {
    const plot = make("div", { className: "plot", attrs: { "data-stage": key } });
    const caption = make("figcaption", { text: title }, [make("span", { className: "why", text: why })]);
    container.append(make("figure", { className: "stage" }, [caption, plot]));
    plots[key] = plot;
  }
  container.dataset.built = "1";
  return plots;
}

/**
 * Draw the stages. data: {scores, scaled, masked (null = −∞), weights, output} matrices;
 * rows/cols: token labels; dims: output column labels.
 */
export async function drawStages(plots, data, rows, cols, dims, scaleNote) {
  // Above POOL_ABOVE tokens these small charts have fewer pixels than cells: each shows the
  // largest value of a block of tokens (and says so); the Heatmap tab has every single cell.
  const f =
    Math.max(rows.length, cols.length) > POOL_ABOVE ? Math.ceil(Math.max(rows.length, cols.length) / POOL_ABOVE) : 1;
  const shown = (m) => (f > 1 ? poolMax(m, f) : m);
  const rowLabels = f > 1 ? poolLabels(rows, f) : rows;
  const colLabels = f > 1 ? poolLabels(cols, f) : cols;
  const note = f > 1 ? ` (each cell: the largest of a ${f} × ${f} block of tokens)` : "";
  const small = rows.length * cols.length <= 400;
  const common = { showText: small, xTitle: "key", yTitle: "query" };
  plots.scaled.parentElement.querySelector(".why").textContent = scaleNote;
  await drawHeatmap(plots.scores, shown(data.scores), rowLabels, colLabels, {
    ...common,
    hoverName: "score",
    title: note,
  });
  await drawHeatmap(plots.scaled, shown(data.scaled), rowLabels, colLabels, {
    ...common,
    hoverName: "scaled",
    title: note,
  });
  await drawHeatmap(plots.masked, shown(data.masked), rowLabels, colLabels, {
    ...common,
    hoverName: "masked",
    title: note,
  });
  await drawHeatmap(plots.weights, shown(data.weights), rowLabels, colLabels, {
    ...common,
    zmin: 0,
    zmax: 1,
    hoverName: "weight",
    title: note,
  });
  await drawHeatmap(plots.output, data.output, rows, dims, {
    showText: rows.length * dims.length <= 400,
    xTitle: "value dim",
    yTitle: "query",
    hoverName: "output",
  });
}

/** The stages of a real head, from the detail API. */
export async function render({ session, state, parts, isStale }) {
  const detail = await session.detail({
    layer: state.layer,
    head: state.head,
    fields: ["scores", "scaled_scores", "mask", "weights", "output"],
  });
  if (isStale()) return null;
  const tokens = detail.tokens;
  const plots = stageFigures(parts.stages);
  const masked = maskedScores(detail);
  const anyMasked = detail.mask.some((row) => row.includes(false));
  plots.masked.parentElement.querySelector(".why").textContent = anyMasked
    ? "forbidden pairs become −∞ (blank)"
    : "nothing is masked: an encoder looks both ways and one sentence has no padding (in a padded batch, padded keys would be −∞ here)";
  const extras = [];
  if (detail.softcap != null)
    extras.push(`then the model caps them, tanh(s ÷ ${detail.softcap}) × ${detail.softcap}, before the softmax`);
  if (detail.position_bias) extras.push("then the model adds its position bias (T5) before the softmax");
  if (extras.length) plots.masked.parentElement.querySelector(".why").textContent += `; ${extras.join("; ")}`;
  plots.weights.parentElement.querySelector(".why").textContent =
    detail.sink != null
      ? `each row sums to less than 1: this head's attention sink (logit ${detail.sink.toFixed(2)}) takes the rest and writes nothing`
      : "each row sums to 1";
  const dims = detail.output[0].map((_, i) => `d${i}`);
  const unit =
    Math.abs(detail.model_scale * Math.sqrt(detail.head_dim) - 1) < 1e-6
      ? `1/√${detail.head_dim}`
      : "the model's own factor";
  await drawStages(
    plots,
    { scores: detail.scores, scaled: detail.scaled_scores, masked, weights: detail.weights, output: detail.output },
    tokens,
    tokens,
    dims,
    `× ${detail.model_scale.toFixed(4)} (${unit})`,
  );
  return {
    kind: "head",
    element: plots.weights,
    layer: state.layer,
    head: state.head,
    tokens,
    matrix: detail.weights,
    title: "softmax weights",
    colour: viridis,
    colourBar: linearBar(),
    suffix: "-stages",
    payload: {
      scores: detail.scores,
      scaled_scores: detail.scaled_scores,
      mask: detail.mask,
      output: detail.output,
      model_scale: detail.model_scale,
    },
  };
}
