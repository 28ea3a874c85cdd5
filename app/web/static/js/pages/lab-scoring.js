// Additive vs general vs scaled dot-product scoring on the same inputs (POST /api/lab/scoring).

import { api } from "../api.js";
import { $ } from "../dom.js";
import { count, labels, labForm, numbersTable, read } from "../lab.js";
import { drawHeatmap } from "../views/plot.js";

const fields = {
  nq: $("#scoring-nq"),
  nk: $("#scoring-nk"),
  d: $("#scoring-d"),
  da: $("#scoring-da"),
  t: $("#scoring-t"),
  seed: $("#scoring-seed"),
};

async function score(signal) {
  const v = read(fields);
  const r = await api.lab(
    "scoring",
    { n_q: v.nq, n_k: v.nk, d: v.d, d_attn: v.da, temperature: v.t, seed: v.seed },
    { signal },
  );
  $("#scoring-table").replaceChildren(
    numbersTable(
      `Cost for ${r.q.length} queries × ${r.k.length} keys, width ${r.q[0].length} (scoring every pair and mixing the values)`,
      ["score", "formula", "parameters", "multiply-accumulates"],
      r.variants.map((x) => [x.name, x.formula, count(x.parameters), count(x.macs)]),
      "scoring-cost",
    ),
  );
  const rows = labels("q", r.q.length);
  const cols = labels("k", r.k.length);
  for (const [i, x] of r.variants.entries()) {
    await drawHeatmap($(`#scoring-map-${i}`), x.weights, rows, cols, {
      zmin: 0,
      zmax: 1,
      showText: true,
      numbered: false,
      xTitle: "key",
      yTitle: "query",
      hoverName: "weight",
      title: `${x.name}: ${x.formula}`,
    });
  }
}

labForm({ form: $("#scoring-form"), error: $("#scoring-error"), fields, run: score })();
