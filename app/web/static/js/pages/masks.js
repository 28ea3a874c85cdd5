// Masks lab: every attention_core mask on the user's sentence, with its cost in pairs.

import { api } from "../api.js";
import { $, el as make, showError } from "../dom.js";
import { keepInputsInUrl } from "../urlstate.js";
import { drawHeatmap, plotlyReady } from "../views/plot.js";

async function draw() {
  const error = $("#masks-error");
  const words = $("#masks-text").value.trim().split(/\s+/).filter(Boolean).slice(0, 256);
  if (!words.length) {
    showError(error, "Type a sentence first.");
    return;
  }
  const globals = $("#masks-global")
    .value.split(/[\s,]+/)
    .filter(Boolean)
    .map(Number);
  if (globals.some((g) => !Number.isInteger(g) || g < 0)) {
    showError(error, "Global tokens must be word positions such as 0, 5.");
    return;
  }
  let result;
  try {
    result = await api.masks({
      n: words.length,
      window: Number($("#masks-window").value),
      dilation: Number($("#masks-dilation").value),
      global_tokens: globals,
      num_random: Number($("#masks-random").value),
      seed: Number($("#masks-seed").value),
      block_size: Number($("#masks-block").value),
    });
  } catch (err) {
    showError(error, err.message);
    return;
  }
  showError(error, "");
  await plotlyReady();
  const grid = $("#masks-grid");
  grid.replaceChildren();
  for (const mask of result.masks) {
    const share = (100 * mask.computed_pairs) / mask.full_pairs;
    const plot = make("div", { className: "plot" });
    const caption = make("figcaption", { text: mask.label }, [
      make("span", {
        className: "why",
        text: `${mask.explanation}. Computes ${mask.computed_pairs} of ${mask.full_pairs} pairs (${share.toFixed(0)} %).`,
      }),
    ]);
    grid.append(make("figure", { className: "stage", attrs: { "data-kind": mask.kind } }, [caption, plot]));
    const z = mask.mask.map((row) => row.map((allowed) => (allowed ? 1 : 0)));
    drawHeatmap(plot, z, words, words, {
      zmin: 0,
      zmax: 1,
      hoverName: "allowed (1) / −∞ (0)",
      xTitle: "key",
      yTitle: "query",
      colorscale: [
        [0, "#f3f4f8"],
        [1, "#3b4cca"],
      ],
      showScale: false,
    });
  }
}

$("#masks-form").addEventListener("submit", (event) => {
  event.preventDefault();
  draw();
});
keepInputsInUrl({
  text: $("#masks-text"),
  window: $("#masks-window"),
  dilation: $("#masks-dilation"),
  global: $("#masks-global"),
  random: $("#masks-random"),
  seed: $("#masks-seed"),
  block: $("#masks-block"),
});
draw();
