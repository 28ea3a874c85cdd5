// Step-by-step page: QK^T -> scale -> mask -> softmax -> weights x V for a small example,
// computed by POST /api/core/attention.

import { api } from "../api.js";
import { $, readPageData, showError } from "../dom.js";
import { keepInputsInUrl } from "../urlstate.js";
import { plotlyReady } from "../views/plot.js";
import { drawStages, stageFigures } from "../views/steps.js";

const data = readPageData();

function matrixToText(m) {
  return m.map((row) => row.join(" ")).join("\n");
}

function parseMatrix(name, text) {
  const rows = text
    .trim()
    .split(/\n+/)
    .map((line) =>
      line
        .trim()
        .split(/[\s,;]+/)
        .filter(Boolean)
        .map(Number),
    );
  if (!rows.length || !rows[0].length) throw new Error(`${name} is empty: one row per token`);
  rows.forEach((row, i) => {
    if (row.some((x) => !Number.isFinite(x)))
      throw new Error(`${name} row ${i + 1} has something that is not a number`);
  });
  return rows;
}

function fillExample() {
  $("#q").value = matrixToText(data.example.q);
  $("#k").value = matrixToText(data.example.k);
  $("#v").value = matrixToText(data.example.v);
  $("#tokens").value = "The cat sat";
}

function labels(count) {
  const words = $("#tokens").value.trim().split(/\s+/).filter(Boolean);
  return Array.from({ length: count }, (_, i) => words[i] ?? `#${i}`);
}

async function compute() {
  const error = $("#steps-error");
  let body;
  try {
    body = {
      q: parseMatrix("Q", $("#q").value),
      k: parseMatrix("K", $("#k").value),
      v: parseMatrix("V", $("#v").value),
      scale: $("#scale").value === "true",
      temperature: Number($("#temperature").value) || 1,
      mask: $("#mask").value,
      window: 1,
    };
  } catch (err) {
    showError(error, err.message);
    return;
  }
  let result;
  try {
    result = await api.coreAttention(body);
  } catch (err) {
    showError(error, err.message);
    return;
  }
  showError(error, "");
  await plotlyReady();
  const rows = labels(body.q.length);
  const cols = labels(body.k.length);
  const dims = body.v[0].map((_, i) => `d${i}`);
  await drawStages(
    stageFigures($("#stage-grid")),
    {
      scores: result.scores,
      scaled: result.scaled_scores,
      masked: result.masked_scores,
      weights: result.weights,
      output: result.output,
    },
    rows,
    cols,
    dims,
    `× ${result.scale.toFixed(4)} ÷ ${result.temperature}`,
  );
}

fillExample();
keepInputsInUrl({
  tokens: $("#tokens"),
  q: $("#q"),
  k: $("#k"),
  v: $("#v"),
  scale: $("#scale"),
  temperature: $("#temperature"),
  mask: $("#mask"),
});
$("#steps-form").addEventListener("submit", (event) => {
  event.preventDefault();
  compute();
});
$("#reset-example").addEventListener("click", () => {
  fillExample();
  $("#q").dispatchEvent(new Event("input")); // the URL forgets the edits too
  compute();
});
for (const id of ["#scale", "#mask", "#temperature"]) $(id).addEventListener("change", compute);
compute();
