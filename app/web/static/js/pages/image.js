// Attention on images: a vision transformer's heads over an image's patches (POST
// /api/image/attention). One state object; the answer holds the query token's rows at every layer
// and head, so changing the layer, head or view redraws without asking the server again.

import { api } from "../api.js";
import { headColour } from "../colors.js";
import { $, el, metricCard, readPageData, showError } from "../dom.js";
import { numbersTable } from "../lab.js";
import { paintPatches, patchUnder } from "../patch-overlay.js";
import { keepInputsInUrl } from "../urlstate.js";
import { drawChart, plotlyReady } from "../views/plot.js";

const DATA = readPageData();
const SCALE = 2; // canvas pixels a pixel of the image as the model sees it

const fields = {
  sample: $("#image-sample"),
  view: $("#image-view"),
  layer: $("#image-layer"),
  head: $("#image-head"),
  q: $("#image-q"),
};

const state = {
  blob: null, // the image sent (a sample's bytes or the user's file)
  answer: null, // the API's answer for state.blob and the query token it asked about
  picture: null, // the image as the model sees it, decoded (an ImageBitmap)
  controller: null,
  hover: null, // the patch under the pointer, [row, col]
};

const clampInput = (input, max) => {
  input.max = String(max);
  if (Number(input.value) > max) input.value = String(max);
};

// ---------------------------------------------------------------------------------------------
// Asking the server

/** The answer's base64 PNG as a Blob (decoded here: the page's CSP lets it fetch no data: URL). */
function pngBlob(base64) {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  return new Blob([bytes], { type: "image/png" });
}

async function fetchAnswer() {
  if (!state.blob) return;
  state.controller?.abort();
  const controller = new AbortController();
  state.controller = controller;
  const query = Math.max(0, Number(fields.q.value) || 0);
  $("#image-status").textContent = "Running the model…";
  try {
    const answer = await api.imageAttention(state.blob, { model: DATA.model, query }, { signal: controller.signal });
    const bitmap = await createImageBitmap(pngBlob(answer.image_png));
    if (controller.signal.aborted) return;
    state.answer = answer;
    state.picture = bitmap;
    showError($("#image-error"), "");
    clampInput(fields.layer, answer.layers - 1);
    clampInput(fields.head, answer.heads - 1);
    clampInput(fields.q, answer.prefix.length + answer.rows * answer.cols - 1); // its tokens
    $("#image-status").textContent =
      `${answer.model}: ${answer.layers} layers × ${answer.heads} heads, ${answer.rows} × ${answer.cols} patches of ${answer.patch} px + ${answer.prefix.join(", ")}; forward pass ${(answer.seconds * 1000).toFixed(0)} ms.`;
    await render();
  } catch (err) {
    if (err.name === "AbortError" || controller.signal.aborted) return;
    showError($("#image-error"), err.message);
    $("#image-status").textContent = "";
  }
}

async function useSample(name) {
  if (!name) return;
  try {
    state.blob = await api.imageSample(name);
    await fetchAnswer();
  } catch (err) {
    showError($("#image-error"), err.message);
  }
}

// ---------------------------------------------------------------------------------------------
// Drawing

const patchOf = (a, token) => {
  const i = token - a.prefix.length;
  return i < 0 ? null : [Math.floor(i / a.cols), i % a.cols];
};
const tokenName = (a, token) => {
  const patch = patchOf(a, token);
  return patch ? `patch (${patch[0]}, ${patch[1]})` : `the ${a.prefix[token]} token`;
};

function paint(canvas, a, values, outlined = [], scale = SCALE) {
  paintPatches(canvas, state.picture, { ...a, prefix: a.prefix.length }, values, { outlined, scale });
}

/** The values the main canvas shows for the chosen view: (T,). */
function shown(a) {
  const layer = Number(fields.layer.value);
  const head = Number(fields.head.value);
  const mode = fields.view.value; // what the page shows (not an explorer view)
  if (mode === "rollout") return { values: a.rollout, what: `rollout to ${tokenName(a, a.query)}` };
  if (mode === "artifacts") {
    return { values: a.received[a.layers - 1], what: "attention received in the last layer" };
  }
  if (mode === "heads" || mode === "distance") {
    const rows = a.weights[layer];
    const mean = rows[0].map((_, t) => rows.reduce((s, row) => s + row[t], 0) / rows.length);
    return { values: mean, what: `layer ${layer}, mean of its heads, from ${tokenName(a, a.query)}` };
  }
  return { values: a.weights[layer][head], what: `layer ${layer} head ${head}, from ${tokenName(a, a.query)}` };
}

function outlines(a) {
  const marks = [];
  const query = patchOf(a, a.query);
  if (query) marks.push([query[0], query[1], "#ffffff"]);
  if (fields.view.value === "artifacts") for (const x of a.artifacts) marks.push([x.row, x.col, "#e4572e"]);
  return marks;
}

async function render() {
  const a = state.answer;
  if (!a || !state.picture) return;
  const { values, what } = shown(a);
  paint($("#image-canvas"), a, values, outlines(a));
  $("#image-canvas").setAttribute("aria-label", `The image as the model sees it, darkened where ${what} is small`);
  renderMetrics(a, values);
  readout(a, values);
  const mode = fields.view.value; // what the page shows (not an explorer view)
  $("#image-heads").hidden = mode !== "heads" && mode !== "head";
  $("#image-distance").hidden = mode !== "distance";
  $("#image-roles").hidden = mode !== "distance";
  $("#image-artifacts").hidden = mode !== "artifacts";
  if (mode === "heads" || mode === "head") renderHeads(a);
  if (mode === "distance") {
    await drawDistance(a);
    renderRoles(a);
  }
  if (mode === "artifacts") renderArtifacts(a);
  $("#image-about").textContent = ABOUT[mode](a);
}

const ABOUT = {
  head: () =>
    "Brighter patches take more of this head's attention from the query token. Click a patch to make it the query; the arrow keys move it when the image has focus. Beside it, every head of the layer: click one to open it.",
  heads: (a) =>
    `Every head of layer ${fields.layer.value} from ${tokenName(a, a.query)}, side by side (DINO's picture): heads of one layer often split the image between them. Click one to open it.`,
  rollout: (a) =>
    `Rollout with the residual counted as ${a.rollout_residual} of each layer: the routes from every patch to ${tokenName(a, a.query)} through all ${a.layers} layers, values and MLPs ignored.`,
  distance: () =>
    "Each dot is a head: the weight-averaged distance, in pixels, from its patch queries to the patches they attend to. The line is each layer's mean. The table reads the layer's heads as text heads are read: weight on the query's own patch, on the patches around it, on the class token, and how spread the rows are.",
  artifacts: (a) =>
    a.artifacts.length
      ? `Outlined: ${a.artifacts.length} patch(es) whose last-layer output norm is an outlier among the patches, with the attention they take.`
      : "No patch's output norm is an outlier here: this model shows no artifact patches on this image.",
};

function renderMetrics(a, values) {
  const prefixShare = values.slice(0, a.prefix.length).reduce((s, v) => s + v, 0);
  const layer = Number(fields.layer.value);
  const meanDistance = a.distance[layer].reduce((s, v) => s + v, 0) / a.heads;
  $("#image-metrics").replaceChildren(
    metricCard("query", tokenName(a, a.query), "query"),
    metricCard(`weight on ${a.prefix.join(" + ")}`, prefixShare.toFixed(3), "prefix-share"),
    metricCard(`layer ${layer}: mean attention distance`, `${meanDistance.toFixed(1)} px`, "distance"),
    metricCard("artifact patches", String(a.artifacts.length), "artifacts"),
  );
}

function readout(a, values) {
  const patches = values.slice(a.prefix.length).map((v, i) => [v, i]);
  patches.sort((x, y) => y[0] - x[0]);
  const top = patches
    .slice(0, 3)
    .map(([v, i]) => `(${Math.floor(i / a.cols)}, ${i % a.cols}) ${v.toFixed(3)}`)
    .join(", ");
  const hover = state.hover
    ? `Patch (${state.hover[0]}, ${state.hover[1]}): ${values[a.prefix.length + state.hover[0] * a.cols + state.hover[1]].toFixed(4)}. `
    : "";
  $("#image-readout").textContent = `${hover}Most weight: ${top}.`;
}

function renderHeads(a) {
  const layer = Number(fields.layer.value);
  const marks = outlines(a);
  $("#image-heads").replaceChildren(
    ...a.weights[layer].map((values, h) => {
      const canvas = el("canvas", { attrs: { "aria-hidden": "true" } });
      paint(canvas, a, values, marks, 1);
      const item = el(
        "button",
        { className: "head-thumb", attrs: { type: "button", "aria-pressed": String(h === Number(fields.head.value)) } },
        [canvas, el("span", { text: `head ${h}` })],
      );
      item.addEventListener("click", () => {
        fields.head.value = String(h);
        fields.view.value = "head";
        fields.view.dispatchEvent(new Event("change", { bubbles: true }));
      });
      return item;
    }),
  );
}

async function drawDistance(a) {
  const layers = a.distance.map((_, l) => l);
  const traces = [];
  for (let h = 0; h < a.heads; h++) {
    traces.push({
      type: "scatter",
      mode: "markers",
      name: `head ${h}`,
      x: layers,
      y: a.distance.map((row) => row[h]),
      marker: { color: headColour(h, a.heads), size: 8 },
      hovertemplate: `layer %{x} head ${h}: %{y:.1f} px<extra></extra>`,
    });
  }
  traces.push({
    type: "scatter",
    mode: "lines",
    name: "layer mean",
    x: layers,
    y: a.distance.map((row) => row.reduce((s, v) => s + v, 0) / row.length),
    line: { color: "#444", width: 2 },
  });
  await drawChart($("#image-distance"), traces, {
    title: "Mean attention distance of each head, by depth",
    xaxis: { title: { text: "layer" }, dtick: 1 },
    yaxis: { title: { text: "pixels" }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.25 },
    height: 380,
  });
}

const ROLE_NAMES = { self: "own patch", neighbours: "8 around", prefix: "class + registers", entropy: "entropy" };

/** The chosen layer's heads by the roles that apply to patches (the API's `roles`). */
function renderRoles(a) {
  const layer = Number(fields.layer.value);
  const names = Object.keys(a.roles);
  $("#image-roles").replaceChildren(
    numbersTable(
      `Layer ${layer}: each head over its patch queries`,
      ["head", "distance (px)", ...names.map((n) => ROLE_NAMES[n] ?? n)],
      Array.from({ length: a.heads }, (_, h) => [
        String(h),
        a.distance[layer][h].toFixed(1),
        ...names.map((n) => a.roles[n][layer][h].toFixed(3)),
      ]),
      "image-role-rows",
    ),
  );
}

function renderArtifacts(a) {
  if (!a.artifacts.length) {
    $("#image-artifacts").replaceChildren();
    return;
  }
  const median = [...a.norms.slice(a.prefix.length)].sort((x, y) => x - y)[Math.floor((a.rows * a.cols) / 2)];
  $("#image-artifacts").replaceChildren(
    numbersTable(
      `Patches with an outlying output norm (median patch: ${median.toFixed(1)})`,
      ["patch", "token", "norm", "attention received"],
      a.artifacts.map((x) => [`(${x.row}, ${x.col})`, String(x.token), x.norm.toFixed(1), x.received.toFixed(4)]),
      "image-artifact-rows",
    ),
  );
}

// ---------------------------------------------------------------------------------------------
// Input

function patchAt(event) {
  const a = state.answer;
  return patchUnder(event, $("#image-canvas"), a);
}

function ask(token) {
  fields.q.value = String(token);
  fields.q.dispatchEvent(new Event("change", { bubbles: true }));
}

$("#image-canvas").addEventListener("click", (event) => {
  const a = state.answer;
  if (!a) return;
  const [row, col] = patchAt(event);
  ask(a.prefix.length + row * a.cols + col);
});
$("#image-canvas").addEventListener("mousemove", (event) => {
  if (!state.answer) return;
  state.hover = patchAt(event);
  readout(state.answer, shown(state.answer).values);
});
$("#image-canvas").addEventListener("keydown", (event) => {
  const a = state.answer;
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  if (!a || !moves[event.key]) return;
  event.preventDefault();
  const [row, col] = patchOf(a, a.query) ?? [0, 0];
  const [dr, dc] = moves[event.key];
  const r = Math.min(a.rows - 1, Math.max(0, row + dr));
  const c = Math.min(a.cols - 1, Math.max(0, col + dc));
  ask(a.prefix.length + r * a.cols + c);
});

keepInputsInUrl(fields);
$("#image-form").addEventListener("submit", (event) => event.preventDefault());
$("#image-form").addEventListener("change", (event) => {
  if (event.target === fields.sample) useSample(fields.sample.value);
  else if (event.target === fields.q) fetchAnswer();
  else if (event.target !== $("#image-file")) render();
});
$("#image-file").addEventListener("change", (event) => {
  const file = event.target.files?.[0];
  if (!file) return;
  fields.sample.value = "";
  fields.sample.dispatchEvent(new Event("input", { bubbles: true })); // the URL forgets the sample
  state.blob = file;
  fetchAnswer();
});
plotlyReady().then(() => {
  if (fields.sample.value) useSample(fields.sample.value);
  else $("#image-status").textContent = "Choose a sample or your own image: a link cannot carry an uploaded one.";
});
