// Scaled vs unscaled softmax: live numbers from POST /api/lab/scaling, and a real head.

import { api } from "../api.js";
import { $, metricCard, readPageData, showError } from "../dom.js";
import { modelNote } from "../lab.js";
import { meanEntropy } from "../stats.js";
import { keepInputsInUrl } from "../urlstate.js";
import { drawChart, drawHeatmap, plotlyReady } from "../views/plot.js";

const page = readPageData();

function metric(id, label, value) {
  return metricCard(label, value, id);
}

let pending = null;
async function update() {
  const d_k = 2 ** Number($("#dk").value);
  const temperature = Number((10 ** Number($("#temp").value)).toFixed(3));
  $("#dk-value").textContent = String(d_k);
  $("#temp-value").textContent = temperature.toFixed(2);
  if (pending) pending.abort();
  pending = new AbortController();
  let r;
  try {
    r = await api.scaling(
      { d_k, temperature, n_keys: Number($("#keys").value), seed: Number($("#seed").value) },
      { signal: pending.signal },
    );
  } catch (err) {
    if (err.name !== "AbortError") showError($("#scaling-error"), err.message);
    return;
  }
  showError($("#scaling-error"), "");
  $("#scaling-metrics").replaceChildren(
    metric("variance-unscaled", "var(q·k), unscaled (theory d_k)", r.variance_unscaled.toFixed(1)),
    metric("variance-scaled", "var(q·k/√d_k) (theory 1)", r.variance_scaled.toFixed(3)),
    metric("entropy-scaled", "entropy, scaled (nats)", r.scaled.entropy.toFixed(3)),
    metric("entropy-unscaled", "entropy, unscaled (nats)", r.unscaled.entropy.toFixed(3)),
    metric("max-scaled", "max weight, scaled", r.scaled.max_weight.toFixed(3)),
    metric("max-unscaled", "max weight, unscaled", r.unscaled.max_weight.toFixed(3)),
    metric("jacobian-scaled", "‖Jacobian‖, scaled", r.scaled.jacobian_norm.toFixed(4)),
    metric("jacobian-unscaled", "‖Jacobian‖, unscaled", r.unscaled.jacobian_norm.toFixed(4)),
  );
  await plotlyReady();
  const keys = r.scaled.weights.map((_, i) => `k${i}`);
  const bars = (side, colour, title) =>
    drawChart(
      $(side === "scaled" ? "#bars-scaled" : "#bars-unscaled"),
      [
        {
          type: "bar",
          x: keys,
          y: r[side].weights,
          marker: { color: colour },
          hovertemplate: "%{x}: %{y:.6f}<extra></extra>",
        },
      ],
      {
        title: { text: title, font: { size: 14 } },
        yaxis: { range: [0, 1], title: { text: "softmax weight" } },
        height: 320,
      },
    );
  bars("scaled", "#0072B2", `scaled: softmax(q·k / √${d_k})`);
  bars("unscaled", "#D55E00", "unscaled: softmax(q·k)");
  drawChart(
    $("#entropy-curve"),
    [
      {
        type: "scatter",
        mode: "lines+markers",
        name: "scaled",
        x: r.curve_d_k,
        y: r.curve_entropy_scaled,
        line: { color: "#0072B2" },
      },
      {
        type: "scatter",
        mode: "lines+markers",
        name: "unscaled",
        x: r.curve_d_k,
        y: r.curve_entropy_unscaled,
        line: { color: "#D55E00" },
      },
      {
        type: "scatter",
        mode: "lines",
        name: "uniform (log n)",
        x: [r.curve_d_k[0], r.curve_d_k.at(-1)],
        y: [r.max_entropy, r.max_entropy],
        line: { dash: "dot", color: "#888" },
      },
      {
        type: "scatter",
        mode: "markers",
        name: `d_k = ${d_k}`,
        x: [d_k, d_k],
        y: [r.scaled.entropy, r.unscaled.entropy],
        marker: { size: 12, color: "#e4572e", symbol: "diamond" },
      },
    ],
    {
      title: { text: "mean entropy of softmax against d_k", font: { size: 14 } },
      xaxis: { type: "log", title: { text: "d_k" } },
      yaxis: { title: { text: "entropy (nats)" }, rangemode: "tozero" },
      height: 340,
    },
  );
}

async function compareRealHead() {
  const error = $("#real-error");
  const body = {
    model: page.default_model,
    text: $("#real-text").value,
    layer: Number($("#real-layer").value),
    head: Number($("#real-head").value),
    scale: false,
  };
  let d;
  try {
    d = await api.detail(body);
  } catch (err) {
    showError(error, err.message);
    return;
  }
  showError(error, "");
  $("#real-metrics").replaceChildren(
    metric("real-entropy-scaled", "mean entropy with the scale", meanEntropy(d.weights).toFixed(3)),
    metric("real-entropy-unscaled", "mean entropy without it", meanEntropy(d.counterfactual_weights).toFixed(3)),
  );
  await plotlyReady();
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query", hoverName: "weight" };
  drawHeatmap($("#real-scaled"), d.weights, d.tokens, d.tokens, {
    ...common,
    title: `${d.model} L${d.layer} H${d.head}: as computed (× ${d.model_scale.toFixed(3)})`,
  });
  drawHeatmap($("#real-unscaled"), d.counterfactual_weights, d.tokens, d.tokens, {
    ...common,
    title: "without the 1/√d scale",
  });
}

for (const id of ["#dk", "#temp", "#keys", "#seed"]) $(id).addEventListener("input", update);
$("#scaling-form").addEventListener("submit", (e) => e.preventDefault());
$("#real-text").value = page.example_text;
keepInputsInUrl({
  dk: $("#dk"),
  temp: $("#temp"),
  keys: $("#keys"),
  seed: $("#seed"),
  text: $("#real-text"),
  layer: $("#real-layer"),
  head: $("#real-head"),
});
$("#real-form").addEventListener("submit", (e) => {
  e.preventDefault();
  compareRealHead();
});
update();
compareRealHead();
// The real head's model, and the longest sentence it takes (the detail route reads every map).
api.models().then(({ models }) => {
  const model = models.find((m) => m.id === page.default_model);
  if (model) $("#real-model-note").textContent = modelNote(model, model.full_map_tokens);
});
