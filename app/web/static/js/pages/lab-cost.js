// Pairs, MACs and memory from formulas (POST /api/lab/cost).

import { api } from "../api.js";
import { $, metricCard } from "../dom.js";
import { bytes, count, labForm, numbersTable, read } from "../lab.js";
import { drawChart } from "../views/plot.js";

const fields = {
  n: $("#cost-n"),
  dk: $("#cost-dk"),
  dv: $("#cost-dv"),
  window: $("#cost-window"),
  dilation: $("#cost-dilation"),
  global: $("#cost-global"),
  random: $("#cost-random"),
  block: $("#cost-block"),
  bq: $("#cost-bq"),
  bk: $("#cost-bk"),
  bytes: $("#cost-bytes"),
};
const CURVES = {
  none: ["full", "#D55E00"],
  sliding_window: ["sliding window", "#009E73"],
  bigbird: ["BigBird (bound)", "#CC79A7"],
  linear: ["linear", "#0072B2"],
  tiled: ["tiled (one block)", "#0072B2"],
};

async function run(signal) {
  const v = read(fields);
  const r = await api.lab(
    "cost",
    {
      n: v.n,
      d_k: v.dk,
      d_v: v.dv,
      window: v.window,
      dilation: v.dilation,
      n_global: v.global,
      num_random: v.random,
      block_size: v.block,
      block_q: v.bq,
      block_k: v.bk,
      bytes_per_value: Number(v.bytes),
    },
    { signal },
  );
  const full = r.rows[0];
  $("#cost-metrics").replaceChildren(
    metricCard("full attention: score memory a head", bytes(full.score_bytes), "full-bytes"),
    metricCard("FlashAttention holds at once", bytes(r.tiled_score_bytes), "tiled-bytes"),
    metricCard("linear attention MACs", count(r.linear_macs), "linear-macs"),
    metricCard("linear attention state", bytes(r.linear_state_bytes), "linear-state"),
  );
  $("#cost-table").replaceChildren(
    numbersTable(
      `One head, one layer, n = ${r.n.toLocaleString("en-US")} tokens`,
      ["pattern", "pairs scored", "share of n²", "MACs", "score memory"],
      r.rows.map((row) => [
        row.label,
        `${row.exact ? "" : "≤ "}${count(row.pairs)}`,
        `${((100 * row.pairs) / full.pairs).toPrecision(3)} %`,
        count(row.macs),
        bytes(row.score_bytes),
      ]),
      "cost-rows",
    ),
  );
  const line = (key, ys) => ({
    type: "scatter",
    mode: "lines+markers",
    name: CURVES[key][0],
    x: r.curve_n,
    y: ys,
    line: { color: CURVES[key][1] },
  });
  await drawChart(
    $("#cost-macs"),
    Object.entries(r.curve_macs).map(([k, ys]) => line(k, ys)),
    {
      title: "multiply-accumulates against n",
      xaxis: { type: "log", title: { text: "tokens" } },
      yaxis: { type: "log", title: { text: "MACs" } },
      height: 360,
    },
  );
  await drawChart(
    $("#cost-memory"),
    Object.entries(r.curve_score_bytes).map(([k, ys]) => line(k, ys)),
    {
      title: "score memory held at once (bytes)",
      xaxis: { type: "log", title: { text: "tokens" } },
      yaxis: { type: "log", title: { text: "bytes" } },
      height: 360,
    },
  );
}

labForm({ form: $("#cost-form"), error: $("#cost-error"), fields, run })();
