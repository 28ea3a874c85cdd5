// The explorer page: pick a model, type a sentence, explore every layer and head.

import { api } from "../api.js";
import { AttentionSession } from "../data.js";
import { $, el as make, readPageData, showError } from "../dom.js";
import { exportCurrent } from "../export.js";
import { VIEWS, createState } from "../state.js";
import { renderGrid } from "../views/grid.js";
import { renderHeatmap } from "../views/heatmap.js";
import { overlayHeads, renderLines } from "../views/lines.js";
import { headColour } from "../colors.js";
import { renderMask } from "../views/mask.js";
import { plotlyReady } from "../views/plot.js";
import { renderQK } from "../views/qk.js";
import { renderModelStages } from "../views/stages.js";
import { renderWhatIf } from "../views/whatif.js";

const page = readPageData();
const state = createState({
  model: page.default_model, text: page.example_text, textPair: "", layer: 0, head: 0, view: "heatmap", query: null,
  overlay: null, threshold: 0.05, unscaled: true, temperature: 1,
});

const el = {
  form: $("#run-form"), text: $("#text"), textPair: $("#text-pair"), pairLabel: $("#pair-label"), model: $("#model"),
  run: $("#run"), progress: $("#load-progress"), status: $("#run-status"), error: $("#run-error"), modelNote: $("#model-note"),
  notice: $("#run-notice"),
  result: $("#result"), layer: $("#layer"), head: $("#head"), headInfo: $("#head-info"), tokens: $("#tokens"), views: $("#views"),
  heatmap: $("#heatmap"), grid: $("#grid"), gridStatus: $("#grid-status"), gridGqa: $("#grid-gqa"),
  lines: $("#lines"), linesHeads: $("#lines-heads"), linesThreshold: $("#lines-threshold"), linesThresholdValue: $("#lines-threshold-value"),
  qkQuery: $("#qk-query"), qkQ: $("#qk-q"), qkK: $("#qk-k"), qkProducts: $("#qk-products"), qkBars: $("#qk-bars"),
  maskExplain: $("#mask-explain"), maskMetrics: $("#mask-metrics"), maskBefore: $("#mask-before"), maskAfter: $("#mask-after"),
  whatifUnscaled: $("#whatif-unscaled"), whatifTemperature: $("#whatif-temperature"), whatifTemperatureValue: $("#whatif-temperature-value"),
  whatifMetrics: $("#whatif-metrics"), whatifModel: $("#whatif-model"), whatifCounterfactual: $("#whatif-counterfactual"),
  stepsGrid: $("#steps-grid"), busy: $("#view-busy"),
};
const BUSY_AFTER_MS = 300; // a view that takes longer says so

const RENDERERS = {
  heatmap: renderHeatmap, grid: renderGrid, lines: renderLines, qk: renderQK, mask: renderMask, whatif: renderWhatIf, steps: renderModelStages,
};

let models = [];
let session = null;
const ctx = {
  el,
  current: null,
  onOpen: (layer, head, { focusView = false } = {}) => {
    state.set({ layer, head, view: "heatmap" });
    if (focusView) el.views.focus(); // keyboard users land in the view they opened
  },
  // A renderer that awaited data checks this before drawing: a newer render may have begun.
  isStale: (token) => token !== renderToken,
};

function modelInfo(id) {
  return models.find((m) => m.id === id);
}

/** A sentence saying what the page changed from what was asked (a link's model or layer). */
function notice(text) {
  el.notice.textContent = text;
  el.notice.hidden = !text;
}

function setStatus(text, fraction = null) {
  el.status.textContent = text;
  el.progress.hidden = fraction === null;
  if (fraction !== null) el.progress.value = fraction;
}

async function loadModels() {
  const list = await api.models();
  models = list.models;
  el.model.replaceChildren(
    ...models.map((m) => {
      const option = new Option(`${m.id}${m.available ? "" : " (unavailable)"}`, m.id);
      option.disabled = !m.available;
      if (!m.available) option.title = m.unavailable_reason;
      return option;
    }),
  );
  const asked = state.get().model;
  const known = modelInfo(asked);
  if (!known || !known.available) {
    const fallback = list.default_encoder;
    notice(
      known
        ? `The link asked for ${asked}, which cannot be loaded on this server (${known.unavailable_reason}); showing ${fallback} instead.`
        : `The link asked for a model this server does not have (“${asked.slice(0, 120)}”); showing ${fallback} instead.`,
    );
    state.set({ model: fallback });
  }
  el.model.value = state.get().model;
  describeModel();
}

function describeModel() {
  const info = modelInfo(el.model.value);
  if (!info) return;
  const shape = info.num_layers ? `${info.num_layers} layers × ${info.num_heads} heads` : "size known once loaded";
  const gqa = info.num_kv_heads && info.num_kv_heads < info.num_heads ? `, ${info.num_kv_heads} key/value heads (GQA)` : "";
  el.modelNote.textContent = `${info.description} ${shape}${gqa}; up to ${info.max_tokens ?? "?"} tokens.`;
  el.pairLabel.hidden = info.causal === true;
}

async function waitUntilLoaded(modelId) {
  let status = await api.modelStatus(modelId);
  if (status.state === "ready") return;
  status = await api.loadModel(modelId);
  while (status.state === "loading" || status.state === "idle") {
    setStatus(`Loading ${modelId}: ${status.stage || "starting"}…`, status.fraction);
    await new Promise((resolve) => setTimeout(resolve, 300));
    status = await api.modelStatus(modelId);
  }
  if (status.state === "failed") throw new Error(status.error);
}

async function run() {
  const { model, text, textPair } = state.get();
  showError(el.error, "");
  if (!text.trim()) {
    showError(el.error, "Type a sentence first.");
    return;
  }
  el.run.disabled = true;
  if (session) session.abort();
  try {
    await waitUntilLoaded(model);
    await refreshModels(); // a model's layer and head counts are known once it has loaded
    const info = modelInfo(model);
    const asked = state.get();
    const layer = Math.min(asked.layer, info.num_layers - 1);
    const head = Math.min(asked.head, info.num_heads - 1);
    const changes = [];
    if (layer !== asked.layer) changes.push(`layer ${asked.layer} (it has layers 0–${info.num_layers - 1}): showing layer ${layer}`);
    if (head !== asked.head) changes.push(`head ${asked.head} (it has heads 0–${info.num_heads - 1}): showing head ${head}`);
    if (changes.length) notice(`This model has no ${changes.join("; and no ")}.`);
    state.set({ layer, head });
    setStatus("Running the model…");
    session = new AttentionSession(model, text, info.causal ? null : textPair);
    const first = await session.layer(layer);
    const meta = first.meta;
    fillPickers(meta);
    showTokens(meta);
    el.result.hidden = false;
    setStatus(`${meta.tokens.length} tokens · forward pass ${meta.forward_ms.toFixed(0)} ms${meta.cached ? " (cached)" : ""}`);
    await render();
  } catch (err) {
    if (err.name === "AbortError") return;
    setStatus("");
    showError(el.error, err.message);
  } finally {
    el.run.disabled = false;
  }
}

async function refreshModels() {
  const list = await api.models();
  models = list.models;
  describeModel();
}

function fillPickers(meta) {
  el.layer.replaceChildren(...Array.from({ length: meta.num_layers }, (_, i) => new Option(String(i), String(i))));
  el.head.replaceChildren(...Array.from({ length: meta.num_heads }, (_, i) => new Option(String(i), String(i))));
  syncPickers();
}

function syncPickers() {
  const { layer, head } = state.get();
  el.layer.value = String(layer);
  el.head.value = String(head);
  const meta = session?.meta;
  if (meta && meta.num_kv_heads < meta.num_heads) {
    const group = meta.num_heads / meta.num_kv_heads;
    el.headInfo.textContent = `head ${head} reads key/value head ${Math.floor(head / group)} (shared by heads ${Math.floor(head / group) * group}–${Math.floor(head / group) * group + group - 1})`;
  } else {
    el.headInfo.textContent = "";
  }
}

function showTokens(meta) {
  el.tokens.replaceChildren(
    ...meta.tokens.map((token, i) => {
      const classes = ["token"];
      if (meta.special_tokens[i]) classes.push("special");
      if (meta.segments && meta.segments[i] === 1) classes.push("segment-b");
      const chip = make("button", { text: token, className: classes.join(" "), attrs: { type: "button", title: `token ${i}: ${meta.raw_tokens[i]} (id ${meta.token_ids[i]})`, "aria-pressed": "false" } });
      chip.addEventListener("click", () => state.set({ query: i, view: "qk" }));
      return chip;
    }),
  );
}

function showView(view) {
  for (const name of VIEWS) {
    $(`#view-${name}`).hidden = name !== view;
    const tab = $(`#tab-${name}`);
    tab.setAttribute("aria-selected", String(name === view));
    tab.tabIndex = name === view ? 0 : -1;
  }
}

let renderToken = 0;
async function render() {
  if (!session || !session.meta) return;
  const token = ++renderToken;
  const current = state.get();
  showView(current.view);
  syncPickers();
  syncControls();
  await plotlyReady();
  const info = session.meta;
  const busy = setTimeout(() => {
    el.busy.hidden = false;
    el.views.setAttribute("aria-busy", "true");
  }, BUSY_AFTER_MS);
  try {
    Object.assign(ctx, { session, state: current, info, renderToken: token });
    await RENDERERS[current.view](ctx);
    if (token === renderToken) showError(el.error, "");
  } catch (err) {
    if (err.name === "AbortError") return;
    showError(el.error, err.message);
  } finally {
    clearTimeout(busy);
    if (token === renderToken) {
      el.busy.hidden = true;
      el.views.removeAttribute("aria-busy");
    }
  }
}

// --- wiring -------------------------------------------------------------------------------
const hadText = state.readUrl();
el.text.value = state.get().text;
el.textPair.value = state.get().textPair || "";

el.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    el.form.requestSubmit();
  }
});
el.form.addEventListener("submit", (event) => {
  event.preventDefault();
  state.set({ model: el.model.value, text: el.text.value, textPair: el.textPair.value, query: null });
  notice("");
  run();
});
el.model.addEventListener("change", () => {
  describeModel();
  state.set({ model: el.model.value, layer: 0, head: 0 });
});
el.layer.addEventListener("change", () => state.set({ layer: Number(el.layer.value), overlay: null }));
el.head.addEventListener("change", () => state.set({ head: Number(el.head.value) }));
el.qkQuery.addEventListener("change", () => state.set({ query: Number(el.qkQuery.value) }));
let sliderTimer = null;
function settleThen(fn) {
  clearTimeout(sliderTimer);
  sliderTimer = setTimeout(fn, 120); // sliders fire many events; act once they settle
}

/** Every control shows what the state says (after a reload, a shared link, or a change). */
function syncControls() {
  const current = state.get();
  const info = session?.meta;
  el.linesThreshold.value = String(current.threshold);
  el.linesThresholdValue.textContent = current.threshold.toFixed(2);
  el.whatifUnscaled.checked = current.unscaled;
  el.whatifTemperature.value = String(Math.log10(current.temperature));
  el.whatifTemperatureValue.textContent = current.temperature.toFixed(2);
  if (!info) return;
  const heads = overlayHeads(current, info);
  const boxes = el.linesHeads.querySelectorAll("input");
  if (boxes.length !== info.num_heads) {
    el.linesHeads.querySelectorAll("label").forEach((n) => n.remove());
    for (let h = 0; h < info.num_heads; h++) {
      const box = make("input", { attrs: { type: "checkbox", value: String(h) } });
      const label = make("label", {}, [box, make("span", { text: `h${h}` })]);
      label.style.color = headColour(h, info.num_heads);
      el.linesHeads.append(label);
    }
  }
  for (const box of el.linesHeads.querySelectorAll("input")) box.checked = heads.includes(Number(box.value));
}
// Controls write the state; render() draws from it (and sets the controls back from it).
el.linesThreshold.addEventListener("input", () => {
  el.linesThresholdValue.textContent = Number(el.linesThreshold.value).toFixed(2);
  settleThen(() => state.set({ threshold: Number(el.linesThreshold.value) }));
});
el.whatifUnscaled.addEventListener("change", () => state.set({ unscaled: el.whatifUnscaled.checked }));
el.whatifTemperature.addEventListener("input", () => {
  const temperature = Number((10 ** Number(el.whatifTemperature.value)).toFixed(4));
  el.whatifTemperatureValue.textContent = temperature.toFixed(2);
  settleThen(() => state.set({ temperature }));
});
el.linesHeads.addEventListener("change", () => {
  const chosen = [...el.linesHeads.querySelectorAll("input:checked")].map((b) => Number(b.value));
  state.set({ overlay: chosen.length ? chosen : null });
});
for (const tab of document.querySelectorAll('[role="tab"]')) {
  tab.addEventListener("click", () => state.set({ view: tab.dataset.view }));
  tab.addEventListener("keydown", (event) => {
    const i = VIEWS.indexOf(tab.dataset.view);
    const next = event.key === "ArrowRight" ? i + 1 : event.key === "ArrowLeft" ? i - 1 : null;
    if (next === null) return;
    event.preventDefault();
    const view = VIEWS[(next + VIEWS.length) % VIEWS.length];
    state.set({ view });
    $(`#tab-${view}`).focus();
  });
}
el.views.addEventListener("keydown", (event) => {
  if (!session?.meta || event.target.closest("input, select, textarea")) return;
  const { layer, head } = state.get();
  const { num_layers: layers, num_heads: heads } = session.meta;
  const moves = {
    ArrowLeft: { head: (head - 1 + heads) % heads },
    ArrowRight: { head: (head + 1) % heads },
    ArrowUp: { layer: (layer - 1 + layers) % layers },
    ArrowDown: { layer: (layer + 1) % layers },
  };
  if (!moves[event.key] || event.target.tagName === "CANVAS") return;
  event.preventDefault();
  state.set(moves[event.key]);
});
for (const button of document.querySelectorAll("[data-export]")) {
  button.addEventListener("click", async () => {
    try {
      await exportCurrent(button.dataset.export, ctx.current || {}, state.get(), (note) => setStatus(note));
    } catch (err) {
      showError(el.error, err.message);
    }
  });
}
const DRAWN_FROM = ["layer", "head", "view", "query", "overlay", "threshold", "unscaled", "temperature"];
state.subscribe((_, changed) => {
  if (changed.some((k) => DRAWN_FROM.includes(k))) render();
});

loadModels()
  .then(() => {
    if (hadText) run();
  })
  .catch((err) => showError(el.error, err.message));
