// The same real head without the 1/sqrt(d) scale, or at another temperature.

import { viridis } from "../colors.js";
import { metricCard } from "../dom.js";
import { meanEntropy, meanMax } from "../stats.js";
import { drawHeatmap } from "./plot.js";

export async function renderWhatIf(ctx) {
  const token = ctx.renderToken;
  const { session, state, el } = ctx;
  const { temperature, unscaled } = state;
  const detail = await session.detail({
    layer: state.layer, head: state.head, scale: unscaled ? false : true, temperature: Number(temperature.toFixed(4)),
    fields: ["weights", "counterfactual_weights"],
  });
  if (ctx.isStale(token)) return;
  const tokens = detail.tokens;
  const label = `${unscaled ? "no 1/√d scale" : `× ${detail.model_scale.toFixed(3)}`}, temperature ${temperature.toFixed(2)}`;
  const cards = [
    ["model: mean entropy (nats)", meanEntropy(detail.weights).toFixed(3)],
    ["what-if: mean entropy", meanEntropy(detail.counterfactual_weights).toFixed(3)],
    ["model: mean max weight", meanMax(detail.weights).toFixed(3)],
    ["what-if: mean max weight", meanMax(detail.counterfactual_weights).toFixed(3)],
  ].map(([label, value]) => metricCard(label, value));
  el.whatifMetrics.replaceChildren(...cards);
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query", hoverName: "weight" };
  await drawHeatmap(el.whatifModel, detail.weights, tokens, tokens, { ...common, title: `as the model computes it (× ${detail.model_scale.toFixed(3)})` });
  await drawHeatmap(el.whatifCounterfactual, detail.counterfactual_weights, tokens, tokens, { ...common, title: label });
  // Not the model's map: the file name and the JSON say which counterfactual it is.
  const suffix = `-what-if-${unscaled ? "unscaled" : "scaled"}-T${detail.counterfactual_temperature}`;
  ctx.current = {
    kind: "head", element: el.whatifCounterfactual, layer: state.layer, head: state.head, tokens,
    matrix: detail.counterfactual_weights, matrixName: "counterfactual_weights", title: `what-if: ${label}`, colour: viridis, suffix,
    payload: {
      what: "counterfactual weights: this head recomputed at another scale and temperature, not what the model computed",
      counterfactual: { scale: detail.counterfactual_scale, temperature: detail.counterfactual_temperature, unscaled },
      model_scale: detail.model_scale, model_weights: detail.weights,
    },
  };
}
