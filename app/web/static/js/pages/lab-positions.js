// Positions (POST /api/lab/positions) and a RoPE head switched off (POST /api/lab/rope-head).

import { api } from "../api.js";
import { $, metricCard, readPageData } from "../dom.js";
import { describeModel, fillModels, labels, labForm, read } from "../lab.js";
import { drawHeatmap } from "../views/plot.js";

const page = readPageData();
const fields = {
  n: $("#positions-n"),
  d: $("#positions-d"),
  offset: $("#positions-offset"),
  hd: $("#positions-hd"),
  seed: $("#positions-seed"),
};
const ropeFields = { model: $("#rope-model"), text: $("#rope-text"), layer: $("#rope-layer"), head: $("#rope-head") };
$("#rope-text").value = page.example_text;

async function encodings(signal) {
  const v = read(fields);
  const r = await api.lab(
    "positions",
    { n: v.n, d_model: v.d, offset: v.offset, head_dim: v.hd, seed: v.seed },
    { signal },
  );
  $("#positions-metrics").replaceChildren(
    metricCard(`max |PE[p+${v.offset}] − M PE[p]|`, r.shift_max_error.toExponential(1), "shift"),
    metricCard("RoPE q·k: largest spread along a diagonal", r.rope_diagonal_spread.toExponential(1), "rope-spread"),
    metricCard("q·k unrotated = RoPE at offset 0", r.unrotated_score.toFixed(4), "unrotated"),
  );
  const pos = labels("p", r.encoding.length);
  await drawHeatmap($("#positions-pe"), r.encoding, pos, labels("d", r.encoding[0].length), {
    numbered: false,
    zmid: 0,
    colorscale: "RdBu",
    xTitle: "dimension",
    yTitle: "position",
    hoverName: "PE",
    title: "sinusoidal encoding: fast pairs on the left, slow on the right",
  });
  await drawHeatmap($("#positions-dot"), r.encoding_dot, pos, pos, {
    numbered: false,
    xTitle: "position",
    yTitle: "position",
    hoverName: "PE·PE",
    title: "PE[p]·PE[q]: a function of the distance p − q",
  });
  const dims = labels("d", r.shift_matrix.length);
  await drawHeatmap($("#positions-shift"), r.shift_matrix, dims, dims, {
    numbered: false,
    zmid: 0,
    colorscale: "RdBu",
    xTitle: "in",
    yTitle: "out",
    hoverName: "M",
    title: `M for a shift of ${v.offset}: 2 × 2 rotations on the diagonal`,
  });
  await drawHeatmap($("#positions-rope"), r.rope_scores, pos, pos, {
    numbered: false,
    zmid: 0,
    colorscale: "RdBu",
    xTitle: "key position",
    yTitle: "query position",
    hoverName: "q·k",
    title: "one q and one k placed at every position, rotated by RoPE: constant along diagonals",
  });
}

async function replay(signal) {
  const v = read(ropeFields);
  const r = await api.lab("rope-head", { model: v.model, text: v.text, layer: v.layer, head: v.head }, { signal });
  $("#rope-metrics").replaceChildren(
    metricCard("replay with RoPE vs the model, max |Δ|", r.replay_max_abs_diff.toExponential(1), "rope-replay"),
    metricCard(
      "weight on the previous token: with / without",
      `${r.previous_token_share[0].toFixed(3)} / ${r.previous_token_share[1].toFixed(3)}`,
      "rope-previous",
    ),
    metricCard(
      "weight on the first token: with / without",
      `${r.first_token_share[0].toFixed(3)} / ${r.first_token_share[1].toFixed(3)}`,
      "rope-first",
    ),
  );
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query", hoverName: "weight" };
  $("#rope-plots").hidden = false;
  await drawHeatmap($("#rope-with"), r.with_rope, r.tokens, r.tokens, {
    ...common,
    title: `L${r.layer} H${r.head} with RoPE (as the model computes it)`,
  });
  await drawHeatmap($("#rope-without"), r.without_rope, r.tokens, r.tokens, {
    ...common,
    title: "the same head with RoPE switched off",
  });
}

async function start() {
  labForm({ form: $("#positions-form"), error: $("#positions-error"), fields, run: encodings })();
  const models = await fillModels(ropeFields.model, { rotaryOnly: true });
  if (!models.length) {
    $("#rope-error").textContent = "No model with a rotary embedding (RoPE) is available on this server.";
    $("#rope-error").hidden = false;
    return;
  }
  const go = labForm({ form: $("#rope-form"), error: $("#rope-error"), fields: ropeFields, run: replay });
  describeModel(ropeFields.model, $("#rope-model-note"), models, page.lab_tokens);
  // A model that is not loaded yet takes seconds to load: that waits for the Replay button.
  if (models.find((m) => m.id === ropeFields.model.value)?.loaded) go();
  else $("#rope-metrics").textContent = "Press Replay: the model loads the first time (up to half a minute).";
}
start();
