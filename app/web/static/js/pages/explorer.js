// The explorer page: pick a model, type a sentence, explore every layer and head.

import { api } from "../api.js";
import { AttentionSession } from "../data.js";
import { $, fillIndexSelect, el as make, readPageData, showError } from "../dom.js";
import { exportCurrent } from "../export.js";
import { glossify, hasTerm, termElement } from "../glossary.js";
import { createState } from "../state.js";
import { wireGeneration } from "../explorer/generation.js";
import { arrowThrough, wireTabs } from "../explorer/tabs.js";
import { plotlyReady, warmPlotlySoon } from "../views/plot.js";

const page = readPageData();
const VIEWS = page.views.map((v) => v.name); // app/web/explorer_views.py, in tab order
// layer and head stay null until a link or the user names them: the first run then opens the
// head with the clearest role on the text (chooseHead).
const state = createState(page.fields, { model: page.default_model, text: page.example_text }, { views: VIEWS });

// The page's own controls; each view gets only the [data-part] elements of its own panel.
const el = {
  form: $("#run-form"), text: $("#text"), textPair: $("#text-pair"), pairLabel: $("#pair-label"), model: $("#model"),
  run: $("#run"), progress: $("#load-progress"), status: $("#run-status"), error: $("#run-error"), modelNote: $("#model-note"),
  notice: $("#run-notice"),
  result: $("#result"), layer: $("#layer"), head: $("#head"), headInfo: $("#head-info"), tokens: $("#tokens"), views: $("#views"),
  headWhy: $("#head-why"), viewGuide: $("#view-guide"),
  busy: $("#view-busy"),
  generate: $("#generate"), genCount: $("#generate-count"), genStrategy: $("#generate-strategy"),
  genTemperature: $("#generate-temperature"), genSeed: $("#generate-seed"), genRun: $("#generate-run"),
};
const BUSY_AFTER_MS = 300; // a view that takes longer says so

/**
 * The views. Each module exports render(scene) and may export bind(parts, set):
 * - bind wires the panel's own controls once, writing only through `set` (the state's);
 * - render reads scene.state (a frozen copy), draws into scene.parts, sets the panel's
 *   controls back from the state, and returns what the export buttons save (export.js).
 * scene = {state, session, info, parts, set, open(layer, head), isStale()}.
 * A view is static/js/views/<name>.js, loaded by its registry row's name.
 */
const VIEW_MODULES = Object.fromEntries(
  await Promise.all(VIEWS.map(async (name) => [name, await import(`../views/${name}.js`)])),
); // static/js/views/<name>.js, one per registry row

function partsOf(panel) {
  return Object.fromEntries([...panel.querySelectorAll("[data-part]")].map((node) => [node.dataset.part, node]));
}
const PARTS = Object.fromEntries(VIEWS.map((name) => [name, partsOf($(`#view-${name}`))]));

let models = [];
let projections = ["pca"]; // what POST /api/attention/qkspace can use on this server
let session = null;
let exported = null; // what the shown view's render returned: the export buttons save it

/** Opens one head in the heatmap (views call it when a head is clicked). */
function open(layer, head, { focusView = false } = {}) {
  state.set({ layer, head, view: "heatmap" });
  document.dispatchEvent(new CustomEvent("atlas:open-head", { detail: { layer, head } })); // a lesson's question listens
  if (focusView) el.views.focus(); // keyboard users land in the view they opened
}

function modelInfo(id) {
  return models.find((m) => m.id === id);
}

/** A sentence saying what the page changed from what was asked (a link's model or layer). */
function notice(text) {
  el.notice.textContent = text;
  el.notice.hidden = !text;
}

/** Texts longer than the views take (every map at once, up to full_map_tokens) open in Deep
 * zoom, which reads a window at a time: says so, with a link that carries the text. */
function offerDeepZoom(model, text, tokens) {
  const href = `/zoom?${new URLSearchParams({ model })}#${new URLSearchParams({ text })}`;
  const count = tokens ? `${tokens.toLocaleString("en")} tokens` : "too long";
  el.notice.replaceChildren(
    `This text is ${count}: the explorer's views read every map of a text at once and take up to ${modelInfo(model).full_map_tokens} tokens. `,
    make("a", { text: "Open it in Deep zoom", attrs: { href } }),
    ", which reads the model's whole context a window at a time.",
  );
  el.notice.hidden = false;
}

/** A text longer than the explorer takes: Deep zoom on this model where the model takes it,
 * else on a model that does (its count is this tokenizer's: about), else the server's refusal. */
function offerLonger(model, text, tokens, refusal) {
  const info = modelInfo(model);
  if (tokens <= (info?.max_tokens ?? 0)) {
    offerDeepZoom(model, text, tokens);
    return;
  }
  const other = models.find((m) => m.available && m.replay !== false && (m.max_tokens ?? 0) >= tokens);
  if (!other) {
    showError(el.error, refusal);
    return;
  }
  const href = `/zoom?${new URLSearchParams({ model: other.id })}#${new URLSearchParams({ text })}`;
  el.notice.replaceChildren(
    `This text is ${tokens.toLocaleString("en")} tokens; ${model} takes at most ${info.max_tokens.toLocaleString("en")}. Shorten it, or `,
    make("a", { text: `open it in Deep zoom with ${other.id}`, attrs: { href } }),
    `, which takes up to ${other.max_tokens.toLocaleString("en")} tokens.`,
  );
  el.notice.hidden = false;
}

function setStatus(text, fraction = null) {
  el.status.textContent = text;
  el.progress.hidden = fraction === null;
  if (fraction !== null) el.progress.value = fraction;
}

async function loadModels() {
  const list = await api.models();
  models = list.models;
  projections = list.projections;
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
  const shared = info.num_kv_heads === 1 ? "1 key/value head (MQA)" : `${info.num_kv_heads} key/value heads (GQA)`;
  const gqa = info.num_kv_heads && info.num_kv_heads < info.num_heads ? `, ${shared}` : "";
  const mapsOnly = info.replay === false
    ? ` Maps only: the views that replay a head (Query · Key, Step by step, Mask, Without √d, Value-weighted, Q-K space) cannot, because ${info.replay_refusal ?? "its heads are not replayed"}.`
    : "";
  const limits = info.full_map_tokens && info.max_tokens > info.full_map_tokens
    ? `the explorer takes up to ${info.full_map_tokens} tokens (Deep zoom, ${info.max_tokens.toLocaleString("en")})`
    : `up to ${info.full_map_tokens ?? info.max_tokens ?? "?"} tokens`;
  el.modelNote.textContent = `${info.description} ${shape}${gqa}; ${limits}.${mapsOnly}`;
  el.pairLabel.hidden = info.causal === true;
  el.generate.hidden = !(info.causal === true && info.predicts !== "none");
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

let runs = 0; // each run's number: a run that a newer one replaced stops at its next await

async function run() {
  const mine = ++runs;
  const stale = () => mine !== runs;
  const { model, text, textPair } = state.get();
  el.text.value = text; // the form shows what runs (a link, or the induction test, may set it)
  el.textPair.value = textPair || "";
  el.model.value = model;
  showError(el.error, "");
  if (!text.trim()) {
    showError(el.error, "Type a sentence first.");
    return;
  }
  if (tooLong()) {
    el.result.hidden = true;
    return;
  }
  el.run.disabled = true;
  if (session) session.abort();
  try {
    await waitUntilLoaded(model);
    // A model's layer and head counts, and what its head predicts, are known once it has
    // loaded: ask again until they are (the views that read the head decide by `predicts`).
    const known = modelInfo(model);
    if (!stale() && (!known?.num_layers || known.predicts == null)) await refreshModels();
    if (stale()) return;
    const info = modelInfo(model);
    const asked = state.get();
    // No head named: open the clearest one (of the named layer, where a layer is named).
    const choose = asked.head === null;
    const layer = asked.layer === null ? 0 : Math.min(asked.layer, info.num_layers - 1);
    const head = choose ? 0 : Math.min(asked.head, info.num_heads - 1);
    const changes = [];
    if (asked.layer !== null && layer !== asked.layer) changes.push(`layer ${asked.layer} (it has layers 0–${info.num_layers - 1}): showing layer ${layer}`);
    if (!choose && head !== asked.head) changes.push(`head ${asked.head} (it has heads 0–${info.num_heads - 1}): showing head ${head}`);
    if (changes.length) notice(`This model has no ${changes.join("; and no ")}.`);
    if (!choose) state.set({ layer, head });
    setStatus("Running the model…");
    const current = new AttentionSession(model, text, info.causal ? null : textPair);
    session = current;
    chosen = null;
    el.headWhy.textContent = "";
    const first = await current.layer(layer);
    if (stale()) return;
    const meta = first.meta;
    if (meta.tokens.length > info.full_map_tokens) {
      session.abort();
      session = null;
      setStatus("");
      el.result.hidden = true;
      offerDeepZoom(model, text, meta.tokens.length);
      return;
    }
    const opened = choose ? await chooseHead(current, asked.layer === null ? null : layer) : { layer, head };
    if (stale()) return;
    fillPickers(meta, opened);
    showTokens(meta);
    el.result.hidden = false;
    const { generated } = state.get();
    const made = generated !== null && generated < meta.tokens.length ? ` (the last ${meta.tokens.length - generated} generated, marked)` : "";
    setStatus(`${meta.tokens.length} tokens${made} · forward pass ${meta.forward_ms.toFixed(0)} ms${meta.cached ? " (cached)" : ""}`);
    if (!state.set(opened).length) rendering = render();
    await rendering;
    if (stale()) return;
    if (scrollToResult) el.result.scrollIntoView({ block: "start" }); // the first picture, in view
    scrollToResult = false;
  } catch (err) {
    if (err.name === "AbortError" || stale()) return;
    setStatus("");
    const long = err.status === 422 && /the text is ([\d,]+) tokens long/.exec(err.message);
    if (long) {
      el.result.hidden = true; // never the last text's picture under this text's refusal
      offerLonger(model, text, Number(long[1].replace(/,/g, "")), err.message);
      return;
    }
    showError(el.error, err.message);
  } finally {
    if (!stale()) el.run.disabled = false;
  }
}

async function refreshModels() {
  const list = await api.models();
  models = list.models;
  describeModel();
}

function fillPickers(meta, { layer, head }) {
  fillIndexSelect(el.layer, meta.num_layers, layer);
  fillIndexSelect(el.head, meta.num_heads, head);
}

// --- the head the page opens, and why ---------------------------------------------------------
let chosen = null; // {layer, head, role, statistic, score, threshold}: the head opened by the rule

/** The head with the clearest specific role on this text (HeadStatistics.clearest, server
 * side: each role's score as a multiple of its threshold, sink and broad aside); layer 0
 * head 0 where no head has one, or where the statistics cannot be had. */
async function chooseHead(current, layer) {
  try {
    chosen = (await current.heads(layer === null ? {} : { layers: [layer] })).clearest;
  } catch (err) {
    if (err.name === "AbortError") throw err;
    chosen = null;
  }
  if (chosen) chosen.scope = layer === null ? "on this text" : `of layer ${layer} on this text`;
  return chosen ? { layer: chosen.layer, head: chosen.head } : { layer: layer ?? 0, head: 0 };
}

/** One line on the open head: why the page opened it, or the roles it has on this text. */
async function explainHead() {
  const current = session;
  const { layer, head } = state.get();
  let data;
  try {
    data = await current.heads();
  } catch {
    el.headWhy.textContent = "";
    return;
  }
  if (current !== session || state.get().layer !== layer || state.get().head !== head) return;
  const roles = data.roles[data.layers.indexOf(layer)]?.[head] ?? [];
  const rule = ({ role, score }) => [termOf(role), ` ${score.toFixed(2)} (${data.rules[role].statistic} ≥ ${data.rules[role].threshold})`];
  const where = `layer ${layer} head ${head}`;
  if (chosen && chosen.layer === layer && chosen.head === head) {
    el.headWhy.replaceChildren(`Opened on ${where}, the clearest role ${chosen.scope}: `, ...rule(chosen), ". Pick any other head above.");
  } else if (roles.length) {
    el.headWhy.replaceChildren(`${where[0].toUpperCase()}${where.slice(1)}: `, ...roles.flatMap((r, i) => [i ? "; " : "", ...rule(r)]), ".");
  } else {
    el.headWhy.textContent = `Layer ${layer} head ${head}: no role past its threshold on this text (Head roles has every statistic).`;
  }
}

/** A role's name, glossed where the glossary has it ("previous-token", "induction" ...). */
const ROLE_TERMS = { "first-token (sink)": "sink", broad: "entropy", "local window": "local-window" }; // else the role's own entry
function termOf(role) {
  const id = ROLE_TERMS[role] || role;
  return hasTerm(id) ? termElement(id, role) : role;
}

function syncPickers() {
  const { layer, head, query } = state.get();
  explainHead();
  el.layer.value = String(layer);
  el.head.value = String(head);
  for (const chip of el.tokens.children) chip.setAttribute("aria-pressed", String(Number(chip.dataset.index) === query));
  const meta = session?.meta;
  if (meta && meta.num_kv_heads < meta.num_heads) {
    const group = meta.num_heads / meta.num_kv_heads;
    el.headInfo.textContent = `head ${head} reads key/value head ${Math.floor(head / group)} (shared by heads ${Math.floor(head / group) * group}–${Math.floor(head / group) * group + group - 1})`;
  } else {
    el.headInfo.textContent = "";
  }
}

const TOKEN_VIEWS = ["follow", "qk", "aggregate"]; // views about one chosen token

function showTokens(meta) {
  const { generated } = state.get();
  el.tokens.replaceChildren(
    ...meta.tokens.map((token, i) => {
      const classes = ["token"];
      if (meta.special_tokens[i]) classes.push("special");
      if (meta.segments && meta.segments[i] === 1) classes.push("segment-b");
      const made = generated !== null && i >= generated;
      if (made) classes.push("generated");
      const chip = make("button", {
        text: token, className: classes.join(" "),
        attrs: { type: "button", title: `token ${i}${made ? " (generated)" : ""}: ${meta.raw_tokens[i]} (id ${meta.token_ids[i]}); click to follow it`, "aria-pressed": "false", "data-index": i, tabindex: i ? "-1" : "0" },
      });
      // The chips are one tab stop (a text may have 512): arrow keys, Home and End move inside.
      chip.addEventListener("keydown", (event) => {
        const chips = [...el.tokens.children];
        arrowThrough(chips, chip, event, (next) => {
          for (const other of chips) other.tabIndex = other === next ? 0 : -1;
        });
      });
      // One click answers "what does this token attend to, layer by layer?"
      chip.addEventListener("click", () => {
        const { view } = state.get();
        state.set({ query: i, view: TOKEN_VIEWS.includes(view) ? view : "follow" });
      });
      return chip;
    }),
  );
}


/** Runs another text in place of the user's (the induction test's), keeping theirs one click
 * away: a notice with a button that puts it back, with the head and view they had. */
function replaceText(patch, why) {
  const before = state.get();
  const back = { model: before.model, text: before.text, textPair: before.textPair, generated: before.generated, layer: before.layer, head: before.head, view: before.view, query: null };
  const button = make("button", { text: "Back to your text", attrs: { type: "button" } });
  button.addEventListener("click", () => {
    notice("");
    state.set(back);
  });
  el.notice.replaceChildren(`${why} `, button);
  el.notice.hidden = false;
  state.set({ textPair: "", generated: null, query: null, ...patch });
}

/** A view's refusal where the eye is: in the view's own panel, above its pictures, and the view
 * may change its own text to say what to do (its module's `refused(parts, err)`). */
function viewError(view, err) {
  const panel = $(`#view-${view}`);
  let box = panel.querySelector(":scope > .view-error");
  if (!box) {
    box = make("p", { className: "error view-error", attrs: { role: "alert" } });
    const after = panel.querySelector(":scope > .explain");
    if (after) after.after(box);
    else panel.prepend(box);
  }
  showError(box, err ? `${err.message.charAt(0).toUpperCase()}${err.message.slice(1)}` : "");
  if (err) VIEW_MODULES[view].refused?.(PARTS[view], err);
}

let renderToken = 0;
async function render() {
  if (!session || !session.meta) return;
  const token = ++renderToken;
  const current = state.get();
  showView(current.view);
  syncPickers();
  await plotlyReady();
  const busy = setTimeout(() => {
    el.busy.hidden = false;
    el.views.setAttribute("aria-busy", "true");
  }, BUSY_AFTER_MS);
  const isStale = () => token !== renderToken; // a newer render began while this one awaited
  try {
    const scene = { state: current, session, info: session.meta, parts: PARTS[current.view], set: state.set, open, isStale, models, projections, replaceText };
    const shown = await VIEW_MODULES[current.view].render(scene);
    if (!isStale()) {
      exported = shown;
      showError(el.error, "");
      viewError(current.view, null);
      glossify($(`#view-${current.view}`));
    }
  } catch (err) {
    if (err.name === "AbortError") return;
    if (!isStale()) viewError(current.view, err);
  } finally {
    clearTimeout(busy);
    if (!isStale()) {
      el.busy.hidden = true;
      el.views.removeAttribute("aria-busy");
    }
  }
}

// --- wiring -------------------------------------------------------------------------------
state.readUrl(); // a link's state; whatever it names, the page runs at once (the example by default)
state.writeUrl(); // and the address names it all from the start, defaults included
let scrollToResult = false; // after a sentence is run: its first picture comes into view (a page opens at its top)
let rendering = Promise.resolve(); // the latest render: a run waits for its first picture
el.text.value = state.get().text;
el.textPair.value = state.get().textPair || "";

const RUN_FROM = ["model", "text", "textPair"]; // a change of these runs the model again

el.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    el.form.requestSubmit();
  }
});
/** Over-long text is refused with the limit, never cut (the text box has no maxlength). */
function tooLong() {
  const chars = [...el.text.value].length + [...el.textPair.value].length; // code points, as the server counts
  const over = chars > page.max_text_chars;
  el.text.setAttribute("aria-invalid", String(over));
  showError(el.error, over ? `This text is ${chars.toLocaleString("en")} characters; the server takes up to ${page.max_text_chars.toLocaleString("en")}. Shorten it: nothing was cut.` : "");
  return over;
}
el.text.addEventListener("input", () => el.text.getAttribute("aria-invalid") === "true" || [...el.text.value].length > page.max_text_chars ? tooLong() : null);

el.form.addEventListener("submit", (event) => {
  event.preventDefault();
  if (tooLong()) return;
  const patch = { model: el.model.value, text: el.text.value, textPair: el.textPair.value, query: null };
  if (patch.text !== state.get().text || patch.model !== state.get().model) patch.generated = null;
  if (patch.model !== state.get().model) Object.assign(patch, { layer: null, head: null, overlay: null });
  notice("");
  scrollToResult = true;
  const changed = state.set(patch);
  if (!changed.some((k) => RUN_FROM.includes(k))) run(); // the same text again: run it anyway
});
el.model.addEventListener("change", describeModel);
wireGeneration({ state, el, notice, setStatus, waitUntilLoaded });
el.layer.addEventListener("change", () => state.set({ layer: Number(el.layer.value), overlay: null }));
el.head.addEventListener("change", () => state.set({ head: Number(el.head.value) }));
for (const [name, module] of Object.entries(VIEW_MODULES)) module.bind?.(PARTS[name], state.set);
const showView = wireTabs({ state, page, guide: el.viewGuide, chart: el.views, meta: () => session?.meta });
for (const button of document.querySelectorAll("[data-export]")) {
  button.addEventListener("click", async () => {
    try {
      await exportCurrent(button.dataset.export, exported || {}, state.get(), (note) => setStatus(note));
    } catch (err) {
      showError(el.error, err.message);
    }
  });
}
let modelsListed = false;
state.subscribe((_, changed) => {
  if (changed.some((k) => RUN_FROM.includes(k))) {
    if (modelsListed) run();
  } else {
    rendering = render();
  }
});

warmPlotlySoon(); // while the models are listed
loadModels()
  .then(() => {
    modelsListed = true;
    run();
  })
  .catch((err) => showError(el.error, err.message));
