// Multi-head vs GQA vs MQA on a real layer (POST /api/lab/heads), and KV-cache bytes
// (POST /api/lab/kv-cache).

import { api } from "../api.js";
import { headColour } from "../colors.js";
import { $, metricCard, readPageData } from "../dom.js";
import { bytes, describeModel, fillModels, labForm, numbersTable, read } from "../lab.js";
import { drawChart, drawHeatmap } from "../views/plot.js";

const page = readPageData();
const fields = {
  model: $("#heads-model"),
  text: $("#heads-text"),
  layer: $("#heads-layer"),
  kv: $("#heads-kv"),
  head: $("#heads-head"),
};
$("#heads-text").value = page.example_text;

async function compare(signal) {
  const v = read(fields);
  const r = await api.lab("heads", { model: v.model, text: v.text, layer: v.layer, kv_heads: v.kv }, { signal });
  const head = Math.min(v.head, r.num_heads - 1);
  const kind = r.kv_heads === r.num_heads ? "multi-head" : r.kv_heads === 1 ? "MQA" : "GQA";
  const mean = r.moved.reduce((a, b) => a + b, 0) / r.moved.length;
  $("#heads-metrics").replaceChildren(
    metricCard("as trained", `${r.num_heads} query / ${r.model_kv_heads} K/V heads`, "trained"),
    metricCard(`pooled (${kind})`, `${r.num_heads} query / ${r.kv_heads} K/V heads`, "pooled"),
    metricCard("mean map movement (total variation)", mean.toFixed(3), "moved-mean"),
    metricCard("replay vs transformers, max |Δ|", r.replay_max_abs_diff.toExponential(1), "replay"),
  );
  $("#heads-groups").replaceChildren(
    numbersTable(
      `Which K/V head each query head reads (other sizes this model can pool to: ${r.options.join(", ")})`,
      ["query head", ...r.group_of.map((_, h) => String(h))],
      [
        ["K/V head, as trained", ...r.group_of],
        [`K/V head, pooled to ${r.kv_heads}`, ...r.pooled_group_of],
        ["map moved (TV)", ...r.moved.map((m) => m.toFixed(3))],
      ],
      "heads-group-table",
    ),
  );
  const common = { zmin: 0, zmax: 1, xTitle: "key", yTitle: "query", hoverName: "weight" };
  await drawHeatmap($("#heads-own"), r.weights[head], r.tokens, r.tokens, {
    ...common,
    title: `L${r.layer} H${head} with its own K/V head ${r.group_of[head]}`,
  });
  await drawHeatmap($("#heads-pooled"), r.pooled_weights[head], r.tokens, r.tokens, {
    ...common,
    title: `the same head reading pooled K/V head ${r.pooled_group_of[head]} of ${r.kv_heads}`,
  });
  await drawChart(
    $("#heads-moved"),
    [
      {
        type: "bar",
        x: r.moved.map((_, h) => `H${h}`),
        y: r.moved,
        marker: { color: r.pooled_group_of.map((g) => headColour(g, r.kv_heads)) },
        hovertemplate: "%{x}: %{y:.4f}<extra></extra>",
      },
    ],
    {
      title:
        "how far each head's map moves when its K/V head is shared (mean total variation over rows; colour = pooled K/V head)",
      yaxis: { range: [0, 1], title: { text: "total variation" } },
      height: 320,
    },
  );
}

const kvFields = {
  layers: $("#kv-layers"),
  heads: $("#kv-heads"),
  kvheads: $("#kv-kv"),
  dim: $("#kv-dim"),
  bytes: $("#kv-bytes"),
  tokens: $("#kv-tokens"),
  batch: $("#kv-batch"),
};

async function countCache(signal) {
  const v = read(kvFields);
  const r = await api.lab(
    "kv-cache",
    {
      layers: v.layers,
      heads: v.heads,
      kv_heads: v.kvheads,
      head_dim: v.dim,
      bytes_per_value: Number(v.bytes),
      tokens: v.tokens,
      batch: v.batch,
    },
    { signal },
  );
  $("#kv-table").replaceChildren(
    numbersTable(
      `KV cache for ${r.tokens.toLocaleString("en-US")} tokens × batch ${r.batch}`,
      ["sharing", "K/V heads", "bytes a token", "in all"],
      r.rows.map((row) => [
        row.name,
        row.kv_heads,
        `${row.bytes_per_token.toLocaleString("en-US")} B`,
        bytes(row.total_bytes),
      ]),
      "kv-cache-table",
    ),
  );
}

async function start() {
  const models = (await fillModels(fields.model)).filter((m) => m.head_dim);
  for (const m of models) $("#kv-preset").append(new Option(m.id, m.id));
  $("#kv-preset").addEventListener("change", () => {
    const m = models.find((x) => x.id === $("#kv-preset").value);
    if (!m) return;
    kvFields.layers.value = m.num_layers;
    kvFields.heads.value = m.num_heads;
    kvFields.kvheads.value = m.num_kv_heads;
    kvFields.dim.value = m.head_dim;
    for (const name of ["layers", "heads", "kvheads", "dim"])
      kvFields[name].dispatchEvent(new Event("change", { bubbles: true }));
  });
  const go = labForm({ form: $("#heads-form"), error: $("#heads-error"), fields, run: compare });
  describeModel(fields.model, $("#heads-model-note"), models, page.lab_tokens);
  go();
  labForm({ form: $("#kv-form"), error: $("#kv-error"), fields: kvFields, run: countCache })();
}
start();
