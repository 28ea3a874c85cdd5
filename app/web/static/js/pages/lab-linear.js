// Linear attention (POST /api/lab/linear): features, state, both orders, weights, cost.

import { api } from "../api.js";
import { $, metricCard } from "../dom.js";
import { count, labels, labForm, read } from "../lab.js";
import { drawChart, drawHeatmap } from "../views/plot.js";

const fields = { n: $("#linear-n"), d: $("#linear-d"), causal: $("#linear-causal"), seed: $("#linear-seed") };

async function run(signal) {
  const v = read(fields);
  const r = await api.lab("linear", { n: v.n, d: v.d, causal: v.causal, seed: v.seed }, { signal });
  const last = r.curve_n.length - 1;
  $("#linear-metrics").replaceChildren(
    metricCard("φ(Q)(φ(K)ᵀV) vs (φ(Q)φ(K)ᵀ)V, max |Δ|", r.reorder_max_abs_diff.toExponential(1), "reorder"),
    metricCard("weights vs softmax's (mean total variation)", r.mean_total_variation.toFixed(3), "tv"),
    metricCard("fewer MACs than softmax from n =", String(r.crossover_n), "crossover"),
    metricCard(
      `MACs at n = ${r.curve_n[last].toLocaleString("en-US")}`,
      `${count(r.curve_macs_linear[last])} vs ${count(r.curve_macs_softmax[last])}`,
      "macs",
    ),
  );
  const toks = labels("t", r.q.length);
  const common = { zmin: 0, zmax: 1, numbered: false, xTitle: "key", yTitle: "query", hoverName: "weight" };
  await drawHeatmap($("#linear-implied"), r.implied_weights, toks, toks, {
    ...common,
    title: "weights linear attention implies: φ(q)·φ(k) normalised",
  });
  await drawHeatmap($("#linear-softmax"), r.softmax_weights, toks, toks, {
    ...common,
    title: "softmax(q·k/√d) on the same q, k",
  });
  await drawHeatmap($("#linear-phi"), r.phi_q, toks, labels("d", r.phi_q[0].length), {
    numbered: false,
    xTitle: "feature",
    yTitle: "query",
    hoverName: "φ(q)",
    title: "φ(Q) = elu(Q) + 1: every feature positive",
  });
  await drawHeatmap($("#linear-state"), r.state, labels("d", r.state.length), labels("v", r.state[0].length), {
    showText: true,
    numbered: false,
    xTitle: "value dim",
    yTitle: "feature",
    hoverName: "state",
    title: v.causal
      ? "the state after the last token (prefix sum of φ(k)vᵀ)"
      : "the state φ(K)ᵀV: d × d, whatever n is",
  });
  await drawChart(
    $("#linear-curve"),
    [
      {
        type: "scatter",
        mode: "lines+markers",
        name: "softmax: n²(d_k + d_v)",
        x: r.curve_n,
        y: r.curve_macs_softmax,
        line: { color: "#D55E00" },
      },
      {
        type: "scatter",
        mode: "lines+markers",
        name: "linear: 2n·d_k·d_v + 2n·d_k",
        x: r.curve_n,
        y: r.curve_macs_linear,
        line: { color: "#0072B2" },
      },
    ],
    {
      title: `multiply-accumulates against n (d = ${v.d}), up to a million tokens`,
      xaxis: { type: "log", title: { text: "tokens n" } },
      yaxis: { type: "log", title: { text: "MACs" } },
      height: 360,
    },
  );
}

labForm({ form: $("#linear-form"), error: $("#linear-error"), fields, run })();
