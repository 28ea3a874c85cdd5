// Sparse patterns on a real head (POST /api/lab/sparse).

import { api } from "../api.js";
import { $, el, readPageData } from "../dom.js";
import { describeModel, fillModels, labForm, read } from "../lab.js";
import { drawChart, drawHeatmap } from "../views/plot.js";

const page = readPageData();
const fields = {
  model: $("#sparse-model"),
  text: $("#sparse-text"),
  layer: $("#sparse-layer"),
  head: $("#sparse-head"),
  window: $("#sparse-window"),
  dilation: $("#sparse-dilation"),
  global: $("#sparse-global"),
  random: $("#sparse-random"),
  seed: $("#sparse-seed"),
  block: $("#sparse-block"),
};
$("#sparse-text").value = page.example_text;

async function compare(signal) {
  const v = read(fields);
  const globals = String(v.global)
    .split(/[\s,]+/)
    .filter(Boolean)
    .map(Number);
  if (globals.some((g) => !Number.isInteger(g) || g < 0))
    throw new Error("Global tokens are token positions such as 0, 5.");
  const r = await api.lab(
    "sparse",
    {
      model: v.model,
      text: v.text,
      layer: v.layer,
      head: v.head,
      window: v.window,
      dilation: v.dilation,
      global_tokens: globals,
      num_random: v.random,
      seed: v.seed,
      block_size: v.block,
    },
    { signal },
  );
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query", hoverName: "weight" };
  await drawHeatmap($("#sparse-full"), r.full_weights, r.tokens, r.tokens, {
    ...common,
    title: `L${r.layer} H${r.head}, full attention${r.causal ? " (causal)" : ""}`,
  });
  await drawChart(
    $("#sparse-dropped"),
    [
      {
        type: "bar",
        name: "attention mass dropped",
        x: r.patterns.map((p) => p.kind),
        y: r.patterns.map((p) => p.dropped_mass),
        marker: { color: "#D55E00" },
        hovertemplate: "%{x}: %{y:.3f} dropped<extra></extra>",
      },
      {
        type: "bar",
        name: "share of pairs scored",
        x: r.patterns.map((p) => p.kind),
        y: r.patterns.map((p) => p.pairs / p.full_pairs),
        marker: { color: "#0072B2" },
        hovertemplate: "%{x}: %{y:.3f} of the pairs<extra></extra>",
      },
    ],
    {
      title: "each pattern: the head's attention it drops (mean over rows) and the pairs it scores",
      barmode: "group",
      yaxis: { range: [0, 1] },
      height: 380,
      margin: { b: 110 },
      legend: { orientation: "h", y: -0.45 },
    },
  );
  const grid = $("#sparse-grid");
  grid.replaceChildren();
  for (const p of r.patterns) {
    const plot = el("div", { className: "plot" });
    const caption = el("figcaption", { text: p.label }, [
      el("span", {
        className: "why",
        text: ` Scores ${p.pairs} of ${p.full_pairs} pairs; drops ${(100 * p.dropped_mass).toFixed(1)} % of the head's attention; output moves ${(100 * p.output_change).toFixed(1)} %.`,
      }),
    ]);
    grid.append(el("figure", { className: "stage", attrs: { "data-kind": p.kind } }, [caption, plot]));
    await drawHeatmap(plot, p.weights, r.tokens, r.tokens, { ...common, showScale: false });
  }
}

async function start() {
  const models = await fillModels(fields.model);
  const go = labForm({ form: $("#sparse-form"), error: $("#sparse-error"), fields, run: compare });
  describeModel(fields.model, $("#sparse-model-note"), models, page.lab_tokens);
  go();
}
start();
