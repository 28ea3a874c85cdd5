// Cross-attention on a real encoder layer (POST /api/lab/cross) and on typed matrices
// (POST /api/core/attention, which takes q and k of different lengths).

import { api } from "../api.js";
import { $, metricCard, readPageData } from "../dom.js";
import { describeModel, fillModels, labels, labForm, read } from "../lab.js";
import { drawChart, drawHeatmap } from "../views/plot.js";

const page = readPageData();
const fields = {
  model: $("#cross-model"),
  a: $("#cross-a"),
  b: $("#cross-b"),
  layer: $("#cross-layer"),
  head: $("#cross-head"),
};
$("#cross-b").value = page.example_text;

async function attend(signal) {
  const v = read(fields);
  const r = await api.lab("cross", { model: v.model, text_a: v.a, text_b: v.b, layer: v.layer }, { signal });
  const head = Math.min(v.head, r.weights.length - 1);
  const w = r.weights[head];
  const strongest = w.map((row) => row.indexOf(Math.max(...row)));
  $("#cross-metrics").replaceChildren(
    metricCard("map shape (A × B)", `${r.tokens_a.length} × ${r.tokens_b.length}`, "shape"),
    metricCard("heads in the layer", String(r.weights.length), "heads"),
  );
  await drawHeatmap($("#cross-map"), w, r.tokens_a, r.tokens_b, {
    zmin: 0,
    zmax: 1,
    xTitle: "key (sentence B)",
    yTitle: "query (sentence A)",
    hoverName: "weight",
    title: `L${r.layer} H${head}: each token of A over the tokens of B`,
  });
  await drawChart(
    $("#cross-norms"),
    [
      {
        type: "bar",
        x: r.tokens_a.map((t, i) => `${i} · ${t} → ${r.tokens_b[strongest[i]]}`),
        y: r.output_norms[head],
        hovertemplate: "%{x}<br>|output| %{y:.3f}<extra></extra>",
      },
    ],
    {
      title: "length of each A token's output (weights × B's values), with the B token it reads most",
      height: 340,
      margin: { b: 120 },
    },
  );
}

function parse(text, name) {
  const rows = text
    .trim()
    .split(/\n+/)
    .map((line) =>
      line
        .trim()
        .split(/[\s,]+/)
        .map(Number),
    );
  if (!rows.length || rows.some((r) => r.some((x) => !Number.isFinite(x))))
    throw new Error(`${name}: type numbers, one row a line`);
  return rows;
}

const typed = { q: $("#typed-q"), k: $("#typed-k"), v: $("#typed-v") };

async function attendTyped(signal) {
  const q = parse(typed.q.value, "Q");
  const k = parse(typed.k.value, "K");
  const r = await api.coreAttention({ q, k, v: parse(typed.v.value, "V") }, { signal });
  await drawHeatmap($("#typed-map"), r.weights, labels("q", q.length), labels("k", k.length), {
    zmin: 0,
    zmax: 1,
    showText: true,
    xTitle: "key",
    yTitle: "query",
    hoverName: "weight",
    numbered: false,
    title: `softmax(QKᵀ/√d): ${q.length} queries × ${k.length} keys`,
  });
}

async function start() {
  const models = await fillModels(fields.model, { encodersOnly: true });
  const go = labForm({ form: $("#cross-form"), error: $("#cross-error"), fields, run: attend });
  describeModel(fields.model, $("#cross-model-note"), models, page.lab_tokens);
  go();
  labForm({ form: $("#typed-form"), error: $("#typed-error"), fields: typed, run: attendTyped })();
}
start();
