// The same real head without the 1/sqrt(d) scale, or at another temperature.

import { linearBar, viridis } from "../colors.js";
import { el, metricCard } from "../dom.js";
import { meanEntropy, meanMax } from "../stats.js";
import { drawHeatmap } from "./plot.js";
import { settle } from "./settle.js";

/** The controls write the state; render sets them back from it. */
export function bind(parts, set) {
  parts.unscaled.addEventListener("change", () => set({ unscaled: parts.unscaled.checked }));
  parts.temperature.addEventListener("input", () => {
    const temperature = Number((10 ** Number(parts.temperature.value)).toFixed(4));
    parts.temperatureValue.textContent = temperature.toFixed(2);
    settle(() => set({ temperature }));
  });
}

export async function render({ session, state, parts, isStale }) {
  const { temperature, unscaled } = state;
  parts.unscaled.checked = unscaled;
  parts.temperature.value = String(Math.log10(temperature));
  parts.temperatureValue.textContent = temperature.toFixed(2);
  const detail = await session.detail({
    layer: state.layer,
    head: state.head,
    scale: !unscaled,
    temperature: Number(temperature.toFixed(4)),
    fields: ["weights", "counterfactual_weights"],
  });
  if (isStale()) return null;
  const tokens = detail.tokens;
  const label = `${unscaled ? "no 1/√d scale" : `× ${detail.model_scale.toFixed(3)}`}, temperature ${temperature.toFixed(2)}`;
  const cards = [
    ["model: mean entropy (nats)", meanEntropy(detail.weights).toFixed(3)],
    ["what-if: mean entropy", meanEntropy(detail.counterfactual_weights).toFixed(3)],
    ["model: mean max weight", meanMax(detail.weights).toFixed(3)],
    ["what-if: mean max weight", meanMax(detail.counterfactual_weights).toFixed(3)],
  ].map(([label, value]) => metricCard(label, value));
  const sharp = meanMax(detail.weights) > 0.95; // nothing left to sharpen: say so, not "no change"
  const hint = sharp
    ? [
        el("p", {
          className: "help",
          text: "This head already puts nearly all of each row on one key, so removing the scale changes little here: try a broader head (layer 1 head 3 of MiniLM).",
        }),
      ]
    : [];
  parts.metrics.replaceChildren(...cards, ...hint);
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query", hoverName: "weight" };
  await drawHeatmap(parts.model, detail.weights, tokens, tokens, {
    ...common,
    title: `as the model computes it (× ${detail.model_scale.toFixed(3)})`,
  });
  await drawHeatmap(parts.counterfactual, detail.counterfactual_weights, tokens, tokens, { ...common, title: label });
  // Not the model's map: the file name and the JSON say which counterfactual it is.
  const suffix = `-what-if-${unscaled ? "unscaled" : "scaled"}-T${detail.counterfactual_temperature}`;
  return {
    kind: "head",
    element: parts.counterfactual,
    layer: state.layer,
    head: state.head,
    tokens,
    matrix: detail.counterfactual_weights,
    matrixName: "counterfactual_weights",
    title: `what-if: ${label}`,
    colour: viridis,
    colourBar: linearBar(),
    suffix,
    payload: {
      what: "counterfactual weights: this head recomputed at another scale and temperature, not what the model computed",
      counterfactual: { scale: detail.counterfactual_scale, temperature: detail.counterfactual_temperature, unscaled },
      model_scale: detail.model_scale,
      model_weights: detail.weights,
    },
  };
}
