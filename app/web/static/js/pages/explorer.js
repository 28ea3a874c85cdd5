// The explorer page: pick a model, type a sentence, explore every layer and head.

import { $, el as make, readPageData, showError } from "../dom.js";
import { busyLine } from "../explorer/busy.js";
import { wireGeneration } from "../explorer/generation.js";
import { createRunner } from "../explorer/run.js";
import { arrowThrough, wireTabs } from "../explorer/tabs.js";
import { exportCurrent } from "../export.js";
import { glossify, hasTerm, termElement } from "../glossary.js";
import { createState } from "../state.js";
import { plotlyReady, warmPlotlySoon } from "../views/plot.js";

const page = readPageData();
const VIEWS = page.views.map((v) => v.name); // app/web/explorer_views.py, in tab order
const HEAD_VIEW = page.fields.find((f) => f.key === "view").default; // where a head opens: the page's first view
const TOKEN_VIEWS = page.views.filter((v) => v.token).map((v) => v.name); // views about one chosen token
// layer and head stay null until a link or the user names them: the first run then opens the
// head with the clearest role on the text (chooseHead).
const state = createState(page.fields, { model: page.default_model, text: page.example_text }, { views: VIEWS });

// The page's own controls; each view gets only the [data-part] elements of its own panel.
const el = {
  form: $("#run-form"),
  text: $("#text"),
  textPair: $("#text-pair"),
  pairLabel: $("#pair-label"),
  model: $("#model"),
  run: $("#run"),
  progress: $("#load-progress"),
  status: $("#run-status"),
  error: $("#run-error"),
  modelNote: $("#model-note"),
  notice: $("#run-notice"),
  result: $("#result"),
  layer: $("#layer"),
  head: $("#head"),
  headInfo: $("#head-info"),
  tokens: $("#tokens"),
  views: $("#views"),
  headWhy: $("#head-why"),
  viewGuide: $("#view-guide"),
  busy: $("#view-busy"),
  busyText: $("#view-busy-text"),
  busyProgress: $("#view-busy-progress"),
  generate: $("#generate"),
  genCount: $("#generate-count"),
  genStrategy: $("#generate-strategy"),
  genTemperature: $("#generate-temperature"),
  genSeed: $("#generate-seed"),
  genRun: $("#generate-run"),
};

/**
 * The views. Each module exports render(scene) and may export bind(parts, set):
 * - bind wires the panel's own controls once, writing only through `set` (the state's);
 * - render reads scene.state (a frozen copy), draws into scene.parts, sets the panel's
 *   controls back from the state, and returns what the export buttons save (export.js).
 * scene = {state, session, info, parts, set, open(layer, head), isStale(), progress(text,
 * fraction)}: progress replaces the wait line's words (a long first computation says what it
 * does and how far it has come); the notebook widget's scene has none.
 * A view is static/js/views/<name>.js, loaded by its registry row's name.
 */
const VIEW_MODULES = Object.fromEntries(
  await Promise.all(VIEWS.map(async (name) => [name, await import(`../views/${name}.js`)])),
); // static/js/views/<name>.js, one per registry row

function partsOf(panel) {
  return Object.fromEntries([...panel.querySelectorAll("[data-part]")].map((node) => [node.dataset.part, node]));
}
const PARTS = Object.fromEntries(VIEWS.map((name) => [name, partsOf($(`#view-${name}`))]));

let exported = null; // what the shown view's render returned: the export buttons save it

/** Opens one head in the heatmap (views call it when a head is clicked). */
function open(layer, head, { focusView = false } = {}) {
  state.set({ layer, head, view: HEAD_VIEW });
  document.dispatchEvent(new CustomEvent("atlas:open-head", { detail: { layer, head } })); // a lesson's question listens
  if (focusView) el.views.focus(); // keyboard users land in the view they opened
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

/** Running a text: the model loaded, the request, the session the views read (explorer/run.js). */
const runner = createRunner({ state, el, page, notice, setStatus, render, showTokens });

// --- the head the page opens, and why ---------------------------------------------------------
/** One line on the open head: why the page opened it, or the roles it has on this text. */
async function explainHead() {
  const current = runner.session;
  const { layer, head } = state.get();
  let data;
  try {
    data = await current.heads();
  } catch {
    el.headWhy.textContent = "";
    return;
  }
  if (current !== runner.session || state.get().layer !== layer || state.get().head !== head) return;
  const roles = data.roles[data.layers.indexOf(layer)]?.[head] ?? [];
  const rule = ({ role, score }) => [
    termOf(role),
    ` ${score.toFixed(2)} (${data.rules[role].statistic} ≥ ${data.rules[role].threshold})`,
  ];
  const where = `layer ${layer} head ${head}`;
  const { chosen } = runner;
  if (chosen && chosen.layer === layer && chosen.head === head) {
    el.headWhy.replaceChildren(
      `Opened on ${where}, the clearest role ${chosen.scope}: `,
      ...rule(chosen),
      ". Pick any other head above.",
    );
  } else if (roles.length) {
    el.headWhy.replaceChildren(
      `${where[0].toUpperCase()}${where.slice(1)}: `,
      ...roles.flatMap((r, i) => [i ? "; " : "", ...rule(r)]),
      ".",
    );
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
  for (const chip of el.tokens.children)
    chip.setAttribute("aria-pressed", String(Number(chip.dataset.index) === query));
  const meta = runner.session?.meta;
  if (meta && meta.num_kv_heads < meta.num_heads) {
    const group = meta.num_heads / meta.num_kv_heads;
    el.headInfo.textContent = `head ${head} reads key/value head ${Math.floor(head / group)} (shared by heads ${Math.floor(head / group) * group}–${Math.floor(head / group) * group + group - 1})`;
  } else {
    el.headInfo.textContent = "";
  }
}

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
        text: token,
        className: classes.join(" "),
        attrs: {
          type: "button",
          title: `token ${i}${made ? " (generated)" : ""}: ${meta.raw_tokens[i]} (id ${meta.token_ids[i]}); click to follow it`,
          "aria-pressed": "false",
          "data-index": i,
          tabindex: i ? "-1" : "0",
        },
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
        state.set({ query: i, view: TOKEN_VIEWS.includes(view) ? view : TOKEN_VIEWS[0] });
      });
      return chip;
    }),
  );
}

/** Runs another text in place of the user's (the induction test's), keeping theirs one click
 * away: a notice with a button that puts it back, with the head and view they had. */
function replaceText(patch, why) {
  const before = state.get();
  const back = {
    model: before.model,
    text: before.text,
    textPair: before.textPair,
    generated: before.generated,
    layer: before.layer,
    head: before.head,
    view: before.view,
    query: null,
  };
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
  const { session, models, projections } = runner;
  if (!session?.meta) return;
  const token = ++renderToken;
  const current = state.get();
  showView(current.view);
  syncPickers();
  await plotlyReady();
  const isStale = () => token !== renderToken; // a newer render began while this one awaited
  const busy = busyLine(el, isStale);
  try {
    const scene = {
      state: current,
      session,
      info: session.meta,
      parts: PARTS[current.view],
      set: state.set,
      open,
      isStale,
      progress: busy.progress,
      models,
      projections,
      replaceText,
    };
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
    busy.done();
  }
}

// --- wiring -------------------------------------------------------------------------------
state.readUrl(); // a link's state; whatever it names, the page runs at once (the example by default)
state.writeUrl(); // and the address names it all from the start, defaults included
el.text.value = state.get().text;
el.textPair.value = state.get().textPair || "";

const RUN_FROM = ["model", "text", "textPair"]; // a change of these runs the model again

el.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    el.form.requestSubmit();
  }
});
el.text.addEventListener("input", () =>
  el.text.getAttribute("aria-invalid") === "true" || [...el.text.value].length > page.max_text_chars
    ? runner.tooLong()
    : null,
);

el.form.addEventListener("submit", (event) => {
  event.preventDefault();
  if (runner.tooLong()) return;
  const patch = { model: el.model.value, text: el.text.value, textPair: el.textPair.value, query: null };
  if (patch.text !== state.get().text || patch.model !== state.get().model) patch.generated = null;
  if (patch.model !== state.get().model) Object.assign(patch, { layer: null, head: null, overlay: null });
  notice("");
  runner.scrollNext();
  const changed = state.set(patch);
  if (!changed.some((k) => RUN_FROM.includes(k))) runner.run(); // the same text again: run it anyway
});
el.model.addEventListener("change", () => runner.describeModel());
wireGeneration({ state, el, notice, setStatus, waitUntilLoaded: (model) => runner.waitUntilLoaded(model) });
el.layer.addEventListener("change", () => state.set({ layer: Number(el.layer.value), overlay: null }));
el.head.addEventListener("change", () => state.set({ head: Number(el.head.value) }));
for (const [name, module] of Object.entries(VIEW_MODULES)) module.bind?.(PARTS[name], state.set);
const showView = wireTabs({ state, page, guide: el.viewGuide, chart: el.views, meta: () => runner.session?.meta });
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
    if (modelsListed) runner.run();
  } else {
    runner.redraw();
  }
});

warmPlotlySoon(); // while the models are listed
runner
  .loadModels()
  .then(() => {
    modelsListed = true;
    runner.run();
  })
  .catch((err) => showError(el.error, err.message));
