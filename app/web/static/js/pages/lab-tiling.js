// FlashAttention's online softmax, step by step (POST /api/lab/tiling). The answer holds every
// step; moving the step slider redraws from it without asking the server again.

import { api } from "../api.js";
import { $, metricCard } from "../dom.js";
import { labels, labForm, numbersTable, read } from "../lab.js";
import { drawHeatmap } from "../views/plot.js";

const fields = {
  nq: $("#tiling-nq"),
  nk: $("#tiling-nk"),
  d: $("#tiling-d"),
  bq: $("#tiling-bq"),
  bk: $("#tiling-bk"),
  causal: $("#tiling-causal"),
  seed: $("#tiling-seed"),
  step: $("#tiling-step"),
};
let answer = null;
let asked = "";

const show = (x) => (x === null ? "−∞" : x.toFixed(4));

async function draw(signal) {
  const v = read(fields);
  const body = { n_q: v.nq, n_k: v.nk, d: v.d, block_q: v.bq, block_k: v.bk, causal: v.causal, seed: v.seed };
  if (JSON.stringify(body) !== asked) {
    answer = await api.lab("tiling", body, { signal });
    asked = JSON.stringify(body);
    fields.step.max = String(answer.steps.length - 1);
  }
  const r = answer;
  const index = Math.min(Number(fields.step.value), r.steps.length - 1);
  fields.step.value = String(index);
  const s = r.steps[index];
  $("#tiling-step-value").textContent = `${index + 1} of ${r.steps.length}`;
  $("#tiling-metrics").replaceChildren(
    metricCard("max |tiled − exact| (final output)", r.max_abs_diff.toExponential(1), "max-diff"),
    metricCard("largest score block held", `${r.largest_block_cells} of ${r.full_cells} cells`, "block"),
    metricCard("tiles computed / skipped", `${r.blocks_computed} / ${r.blocks_skipped}`, "tiles"),
    metricCard(
      "this step",
      s.skipped
        ? "skipped: every pair is masked"
        : `queries ${s.q_start}–${s.q_stop - 1}, keys ${s.k_start}–${s.k_stop - 1}`,
      "step",
    ),
  );
  const qs = labels("q", r.q.length);
  const ks = labels("k", r.k.length);
  const box = {
    type: "rect",
    xref: "x",
    yref: "y",
    x0: s.k_start - 0.5,
    x1: s.k_stop - 0.5,
    y0: s.q_start - 0.5,
    y1: s.q_stop - 0.5,
    line: { color: "#e4572e", width: 3 },
  };
  await drawHeatmap($("#tiling-full"), r.exact_weights, qs, ks, {
    zmin: 0,
    zmax: 1,
    numbered: false,
    xTitle: "key",
    yTitle: "query",
    hoverName: "exact weight",
    title: "exact weights (never formed by the tiled order); the box is this step's tile",
    shapes: [box],
  });
  const tileRows = qs.slice(s.q_start, s.q_stop);
  const tileCols = ks.slice(s.k_start, s.k_stop);
  const scores = s.scores ?? tileRows.map(() => tileCols.map(() => null));
  await drawHeatmap($("#tiling-tile"), scores, tileRows, tileCols, {
    showText: true,
    numbered: false,
    xTitle: "key",
    yTitle: "query",
    hoverName: "scaled score",
    title: s.skipped ? "skipped tile (masked)" : "this tile's scaled scores q·k/√d",
    colorscale: "RdBu",
    zmid: 0,
  });
  $("#tiling-rows").replaceChildren(
    numbersTable(
      "Each query row of the block after this step",
      ["query", "running max m", "running sum l", "rescaled by e^(m_old − m_new)"],
      tileRows.map((q, i) => [q, show(s.row_max[i]), s.row_sum[i].toFixed(4), s.correction[i].toFixed(4)]),
      "tiling-row-table",
    ),
  );
  const dims = labels("d", r.v[0].length);
  const exactRows = r.exact_output.slice(s.q_start, s.q_stop);
  await drawHeatmap($("#tiling-partial"), s.partial_output, tileRows, dims, {
    showText: true,
    numbered: false,
    xTitle: "dim",
    yTitle: "query",
    hoverName: "acc / l",
    title: `partial output acc / l after keys 0–${s.k_stop - 1}`,
    colorscale: "RdBu",
    zmid: 0,
  });
  await drawHeatmap($("#tiling-exact"), exactRows, tileRows, dims, {
    showText: true,
    numbered: false,
    xTitle: "dim",
    yTitle: "query",
    hoverName: "exact output",
    title: "exact output of these rows",
    colorscale: "RdBu",
    zmid: 0,
  });
}

labForm({ form: $("#tiling-form"), error: $("#tiling-error"), fields, run: draw })();
