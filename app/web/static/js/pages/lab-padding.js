// A padded batch through an encoder (POST /api/lab/padding).

import { api } from "../api.js";
import { $, el, metricCard, readPageData } from "../dom.js";
import { describeModel, fillModels, labForm, numbersTable, read } from "../lab.js";
import { drawHeatmap } from "../views/plot.js";

const fields = {
  model: $("#padding-model"),
  text: $("#padding-text"),
  layer: $("#padding-layer"),
  head: $("#padding-head"),
};

async function batch(signal) {
  const v = read(fields);
  const sentences = v.text
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
  const r = await api.lab("padding", { model: v.model, sentences, layer: v.layer, head: v.head }, { signal });
  const worstPad = Math.max(...r.sentences.map((s) => s.max_weight_on_padding));
  const worstAlone = Math.max(...r.sentences.map((s) => s.alone_max_abs_diff));
  $("#padding-metrics").replaceChildren(
    metricCard("batch length (tokens)", String(r.seq_len), "seq-len"),
    metricCard("largest weight on any padded key", String(worstPad), "pad-weight"),
    metricCard("real rows vs each sentence alone, max |Δ|", worstAlone.toExponential(1), "alone"),
  );
  $("#padding-mask").replaceChildren(
    numbersTable(
      "The key-padding mask (attention_mask): 1 = real token, 0 = padding",
      ["sentence", ...Array.from({ length: r.seq_len }, (_, i) => String(i))],
      r.attention_mask.map((row, i) => [String(i), ...row]),
      "padding-mask-table",
    ),
  );
  const grid = $("#padding-grid");
  grid.replaceChildren();
  for (const [i, s] of r.sentences.entries()) {
    const plot = el("div", { className: "plot" });
    const caption = el(
      "figcaption",
      { text: `Sentence ${i}: ${s.length} real tokens, ${r.seq_len - s.length} padding` },
      [
        el("span", {
          className: "why",
          text: ` Padded keys get ${s.max_weight_on_padding} at most; the padded rows below the line are computed and thrown away.`,
        }),
      ],
    );
    grid.append(el("figure", { className: "stage" }, [caption, plot]));
    const line =
      s.length < r.seq_len
        ? [
            {
              type: "line",
              xref: "paper",
              x0: 0,
              x1: 1,
              yref: "y",
              y0: s.length - 0.5,
              y1: s.length - 0.5,
              line: { color: "#e4572e", width: 2, dash: "dot" },
            },
          ]
        : [];
    await drawHeatmap(plot, s.weights, s.tokens, s.tokens, {
      zmin: 0,
      zmax: 1,
      xTitle: "key",
      yTitle: "query",
      hoverName: "weight",
      title: `L${r.layer} H${r.head}`,
      shapes: line,
    });
  }
}

async function start() {
  const models = await fillModels(fields.model, { encodersOnly: true });
  const go = labForm({ form: $("#padding-form"), error: $("#padding-error"), fields, run: batch });
  describeModel(fields.model, $("#padding-model-note"), models, readPageData().lab_tokens);
  go();
}
start();
