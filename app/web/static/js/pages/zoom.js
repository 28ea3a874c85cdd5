// Deep zoom: one layer's map over a whole context window, served as windows at zoom levels
// (POST /api/attention/tiles) after one forward pass whose progress streams in
// (POST /api/attention/forward). The page's state lives in one object mirrored in the URL:
// the settings in the query, the text (which may be long) in the fragment, never sent.

import { api } from "../api.js";
import { $, fillIndexSelect, readPageData, showError } from "../dom.js";
import { exportCurrent } from "../export.js";
import { createState } from "../state.js";
import { formatNumber, nextTask, plotlyReady, warmPlotly, weightScale } from "../views/plot.js";
import { aroundMatch, findTokens, MARKED, matchShapes } from "./zoom-find.js";
import { headFinder } from "./zoom-heads.js";
import { mapGeometry, mapLayout, mapTrace, PLOT_CONFIG, tokenLabels } from "./zoom-map.js";

const MAX_CELLS_ACROSS = 320; // values a row of the drawn window has at most: 100k cells draw within ~150 ms

const page = readPageData();
const state = {
  model: page.default_model,
  text: "",
  layer: 0,
  head: 0,
  reduce: "max",
  colours: null, // "linear", "log" (the colour of log10 of each weight, 10^-6 to 1), or null: by length
  window: null, // [r0, r1, c0, c1]: rows and columns shown, null for the whole map
  stat: null, // the head finder's statistic, once it has been run
  find: "", // a word or phrase whose tokens are marked (in the fragment, with the text)
  readFrom: "later", // the rows the finder reads the found tokens from: "later" or "last"
  matches: [], // where `find` occurs: [{first, last}] token positions
  pass: null, // the forward pass's "done" line: tokens, seq_len, num_layers, num_heads...
};

const form = $("#zoom-form");
const textBox = $("#zoom-text");
const modelSelect = $("#zoom-model");
const modelNote = $("#zoom-model-note");
const progress = $("#zoom-progress");
const status = $("#zoom-status");
const stopButton = $("#zoom-stop");
const errorBox = $("#zoom-error");
const result = $("#zoom-result");
const layerSelect = $("#zoom-layer");
const headSelect = $("#zoom-head");
const reduceSelect = $("#zoom-reduce");
const coloursSelect = $("#zoom-colours");
const windowLine = $("#zoom-window");
const plot = $("#zoom-map");
const explorerLink = $("#zoom-explorer");
const findBox = $("#zoom-find");
const findStatus = $("#zoom-find-status");
const findList = $("#zoom-find-list");
const LISTED_MATCHES = 12; // matches listed as buttons under the search

let models = []; // the models Deep zoom can open (GET /api/models)
let shown = null; // the window drawn, for hovering and export: {layer, head, reduce, colours, r0, r1, c0, c1, cell, values, errorBound}
let running = null; // AbortController of the forward pass under way
let drawing = null; // AbortController of the window being fetched
let relayoutTimer = 0;

/** Opens one head's map, keeping the window in view (to compare heads at one place);
 * from the head finder, the map is brought into view and focused. */
function openHead(layer, head, { focus = true } = {}) {
  state.layer = layer;
  state.head = head;
  layerSelect.value = String(layer);
  headSelect.value = String(head);
  finder.show();
  draw();
  if (!focus) return;
  plot.scrollIntoView({ block: "nearest" });
  plot.focus({ preventScroll: true });
}

const finder = headFinder(state, Object.fromEntries(page.statistics), { open: openHead, writeUrl });

/** The page's state in the URL (state.js): the settings in the query, the text and the search
 * in the fragment; the map's settings only once there is a map. */
const url = createState(
  [
    { key: "model", param: "model", type: "text", default: page.default_model },
    { key: "layer", param: "layer", type: "int", default: null },
    { key: "head", param: "head", type: "int", default: null },
    { key: "reduce", param: "reduce", type: "choice", choices: ["max", "mean"], default: "max" },
    { key: "colours", param: "colours", type: "choice", choices: ["log", "linear"], default: null },
    { key: "window", param: "win", type: "ints", default: null },
    { key: "stat", param: "stat", type: "text", default: null },
    { key: "readFrom", param: "from", type: "choice", choices: ["later", "last"], default: "later" },
    { key: "text", param: "text", type: "text", default: "", fragment: true },
    { key: "find", param: "find", type: "text", default: "", fragment: true },
  ],
  {},
  { always: ["model", "layer", "head"] },
);

function writeUrl() {
  const map = state.pass ? state : {}; // before a map, the link names the model and the text
  url.set({
    model: state.model,
    layer: map.layer ?? null,
    head: map.head ?? null,
    reduce: map.reduce ?? "max",
    colours: map.colours ?? null,
    window: map.window ?? null,
    stat: (finder.ready && map.stat) || null,
    readFrom: map.readFrom ?? "later",
    text: state.text,
    find: state.find,
  });
  url.writeUrl();
  linkExplorer();
}

/** The open head in the explorer, with all its views, where they take a text this long (they
 * read every map at once: up to the model's full_map_tokens). */
function linkExplorer() {
  const limit = models.find((m) => m.id === state.model)?.full_map_tokens;
  explorerLink.hidden = !state.pass || !(state.pass.seq_len <= limit);
  if (explorerLink.hidden) return;
  const query = new URLSearchParams({
    model: state.model,
    text: state.text,
    layer: String(state.layer),
    head: String(state.head),
  });
  if (colours() === "log") query.set("colours", "log");
  explorerLink.href = `/?${query}`;
}

/** The colour scale drawn: the one chosen (in the menu or the URL), else log for a text longer
 * than the explorer takes (its rows spread over so many keys that linear colours show one
 * uniform colour), linear for a shorter one. */
function colours() {
  return state.colours ?? (state.pass?.seq_len > page.log_colours_above ? "log" : "linear");
}

function readUrl() {
  url.readUrl();
  const read = url.get();
  state.model = read.model || page.default_model;
  state.layer = read.layer ?? 0;
  state.head = read.head ?? 0;
  state.reduce = read.reduce;
  state.colours = read.colours;
  state.readFrom = read.readFrom;
  if (/^[a-z_]+$/.test(read.stat || "")) state.stat = read.stat;
  if (read.window?.length === 4) state.window = read.window;
  state.text = read.text;
  state.find = read.find;
}

/** Finds state.find in the text's tokens: the matches listed (each a button that zooms to
 * it) and said; the map marks them when it is next drawn. */
function findMatches() {
  findBox.value = state.find;
  state.matches = state.pass ? findTokens(state.pass.tokens, state.find) : [];
  const count = state.matches.length;
  const tokens = state.pass?.tokens || [];
  const spelled = ({ first, last }) => tokens.slice(first, last + 1).join("");
  findList.replaceChildren(
    ...state.matches.slice(0, LISTED_MATCHES).map((match) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      const where = match.first === match.last ? `token ${match.first}` : `tokens ${match.first}–${match.last}`;
      button.textContent = `${where}: ${spelled(match)}`;
      button.addEventListener("click", () => {
        state.window = clampWindow(aroundMatch(match, state.pass.seq_len));
        draw();
        plot.focus({ preventScroll: true });
      });
      const item = document.createElement("li");
      item.append(button);
      return item;
    }),
  );
  findList.hidden = count === 0;
  if (!state.find || !state.pass) findStatus.textContent = "";
  else if (!count) findStatus.textContent = `“${state.find}” is not in the text (case and spaces aside).`;
  else {
    const marked = count > MARKED ? `; the first ${MARKED} are marked` : ", marked in orange on the map";
    const listed = count > LISTED_MATCHES ? ` (the first ${LISTED_MATCHES} listed)` : "";
    findStatus.textContent = `${count.toLocaleString("en")} ${count === 1 ? "match" : "matches"} of “${state.find}”${marked}; click one to zoom to it${listed}. Computing every head's statistics below measures which heads read them.`;
  }
}

async function loadModels() {
  models = (await api.models()).models.filter((m) => m.available && m.replay);
  modelSelect.replaceChildren(
    ...models.map((m) => new Option(`${m.id} (up to ${m.max_tokens.toLocaleString("en")} tokens)`, m.id)),
  );
  if (!models.some((m) => m.id === state.model)) state.model = models[0]?.id;
  modelSelect.value = state.model;
  describeModel();
}

/** What the chosen model is, and how long a text Deep zoom takes with it: its whole context
 * (the explorer, reading every map at once, takes less). */
function describeModel() {
  const m = models.find((x) => x.id === modelSelect.value);
  modelNote.textContent = m
    ? `${m.description} Deep zoom takes texts of up to ${m.max_tokens.toLocaleString("en")} tokens with it.`
    : "";
  if (m) offerExampleLengths(m.max_tokens);
}

const EXAMPLE_LENGTHS = [100, 250, 1000, 2000]; // random words a copy (the route takes up to 2,000)
const DEFAULT_EXAMPLE_LENGTH = 250;
/** Tokens a test text of `length` words a copy may take: both copies and two special tokens. */
const exampleTokens = (length) => 2 * length + 2;

/** The long test texts this model can take: a length it cannot is shown, disabled, with why;
 * the choice stays where it fits, else 250 × 2, else the longest that fits. */
function offerExampleLengths(maxTokens) {
  const select = $("#zoom-example-length");
  const fits = (length) => exampleTokens(length) <= maxTokens;
  const kept = Number(select.value);
  select.replaceChildren(
    ...EXAMPLE_LENGTHS.map((length) => {
      const words = `${length.toLocaleString("en")} × 2`;
      const option = new Option(fits(length) ? words : `${words} (too long)`, String(length));
      option.disabled = !fits(length);
      return option;
    }),
  );
  const long = EXAMPLE_LENGTHS.filter((length) => !fits(length));
  $("#zoom-example-why").textContent = long.length
    ? `${long.map((l) => `${l.toLocaleString("en")} × 2`).join(" and ")} need${long.length > 1 ? "" : "s"} ${long.map((l) => exampleTokens(l).toLocaleString("en")).join(" and ")} tokens; this model takes ${maxTokens.toLocaleString("en")}.`
    : "";
  const usable = EXAMPLE_LENGTHS.filter(fits);
  const chosen =
    usable.includes(kept) && select.dataset.chosen
      ? kept
      : usable.includes(DEFAULT_EXAMPLE_LENGTH)
        ? DEFAULT_EXAMPLE_LENGTH
        : usable.at(-1);
  select.value = String(chosen ?? "");
  $("#zoom-example").disabled = chosen === undefined;
}

/** Runs the forward pass over the state's text, showing its progress; then draws. */
async function runPass({ keepView = false, findHeads = false } = {}) {
  running?.abort();
  drawing?.abort();
  const controller = new AbortController();
  running = controller;
  showError(errorBox, "");
  finder.reset();
  state.pass = null;
  if (!keepView) state.window = null;
  writeUrl();
  result.hidden = true;
  progress.hidden = false;
  progress.value = 0;
  stopButton.hidden = false;
  status.textContent = "Tokenising and starting the model…";
  const started = performance.now();
  try {
    const last = await api.forward(
      { model: state.model, text: state.text },
      (line) => {
        if (line.event !== "progress") return;
        progress.value = line.layer / line.layers;
        status.textContent = `Forward pass: layer ${Math.min(line.layer + 1, line.layers)} of ${line.layers}…`;
      },
      { signal: controller.signal },
    );
    if (!last || last.event === "error") throw new Error(last?.detail || "the forward pass did not finish");
    state.pass = last;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const how = last.cached ? "from the server's cache" : `forward pass ${(last.forward_ms / 1000).toFixed(1)} s`;
    status.textContent = `${last.seq_len.toLocaleString("en")} tokens, ${last.num_layers} layers × ${last.num_heads} heads (${how}; ready in ${seconds} s).`;
    fillIndexSelect(layerSelect, last.num_layers, state.layer, "L");
    fillIndexSelect(headSelect, last.num_heads, state.head, "H");
    state.layer = Number(layerSelect.value);
    state.head = Number(headSelect.value);
    reduceSelect.value = state.reduce;
    coloursSelect.value = colours();
    state.window = clampWindow(state.window);
    findMatches();
    result.hidden = false;
    await draw();
    if (findHeads) finder.run();
  } catch (err) {
    if (err.name === "AbortError") {
      status.textContent = "Stopped.";
    } else {
      status.textContent = "";
      showError(errorBox, err.message);
    }
  } finally {
    if (running === controller) running = null;
    progress.hidden = true;
    stopButton.hidden = true;
  }
}

function clampWindow(win) {
  const n = state.pass.seq_len;
  if (!win) return null;
  const [r0, r1, c0, c1] = win.map((v) => Math.min(Math.max(0, v), n));
  if (r1 - r0 < 1 || c1 - c0 < 1 || (r0 === 0 && c0 === 0 && r1 === n && c1 === n)) return null;
  return [r0, r1, c0, c1];
}

/** Fetches the window in view at the resolution the plot can show, and draws it. */
async function draw() {
  const pass = state.pass;
  if (!pass) return;
  drawing?.abort();
  const controller = new AbortController();
  drawing = controller;
  writeUrl();
  const [r0, r1, c0, c1] = state.window || [0, pass.seq_len, 0, pass.seq_len];
  const size = mapGeometry(plot);
  const across = Math.max(50, Math.min(MAX_CELLS_ACROSS, size.side));
  const cell = Math.max(1, Math.ceil(Math.max(r1 - r0, c1 - c0) / across));
  windowLine.textContent = `Computing rows ${r0}–${r1 - 1}, keys ${c0}–${c1 - 1}…`;
  let answer;
  try {
    answer = await api.tiles(
      {
        model: state.model,
        text: state.text,
        layer: state.layer,
        heads: [state.head],
        rows: [r0, r1],
        cols: [c0, c1],
        cell,
        reduce: state.reduce,
      },
      { signal: controller.signal },
    );
  } catch (err) {
    if (err.name !== "AbortError") showError(errorBox, err.message);
    return;
  }
  if (drawing !== controller) return;
  await nextTask();
  const where = { r0, r1, c0, c1, cell };
  shown = {
    layer: state.layer,
    head: state.head,
    reduce: state.reduce,
    colours: colours(),
    ...where,
    values: answer.values[0],
    errorBound: answer.error_bound,
  };
  const trace = mapTrace(shown.values, where, shown.colours, size);
  await window.Plotly.react(plot, [trace], mapLayout(where, size, matchShapes(state.matches)), PLOT_CONFIG);
  // Token labels, where they fit, each axis in a task of its own: measuring dozens of new
  // labels costs Plotly about as much as the map itself.
  for (const [axis, span] of [
    ["xaxis", [c0, c1]],
    ["yaxis", [r0, r1]],
  ]) {
    const labels = tokenLabels(state.pass.tokens, ...span, size.side - 10);
    if (labels.tickmode !== "array") continue;
    await nextTask();
    if (drawing !== controller) return;
    await window.Plotly.relayout(plot, Object.fromEntries(Object.entries(labels).map(([k, v]) => [`${axis}.${k}`, v])));
  }
  if (!plot._zoomWired) wirePlot();
  // Said once the map and its labels are drawn (tests wait for it).
  const what =
    cell === 1
      ? "each cell one weight"
      : `each cell the ${state.reduce === "max" ? "largest" : "mean"} weight of ${cell} × ${cell} tokens`;
  windowLine.textContent = `Layer ${state.layer}, head ${state.head}: queries ${r0}–${r1 - 1}, keys ${c0}–${c1 - 1}; ${what} (within ${answer.error_bound} of the model's own weights).`;
}

/** What the export buttons save of the window drawn (see export.js): its values with a label
 * for each row and column ("12 ␣dog" for a token, "12–14" for a block of them) and what they
 * are; a window of at most 128 tokens a side saves as vector SVG in the colours shown. */
function windowExport() {
  if (!shown) throw new Error("Run the model first: there is no map to export yet.");
  const { layer, head, reduce, r0, r1, c0, c1, cell, values } = shown;
  const tokens = state.pass.tokens;
  const labels = (start, stop) =>
    Array.from({ length: Math.ceil((stop - start) / cell) }, (_, i) => {
      const first = start + i * cell;
      return cell === 1 ? `${first} ${tokens[first]}` : `${first}–${Math.min(first + cell, stop) - 1}`;
    });
  const top = Math.max(0, ...values.map((row) => Math.max(...row)));
  const cells =
    cell === 1
      ? "each cell one weight"
      : `each cell the ${reduce === "max" ? "largest" : "mean"} weight of a block of ${cell} × ${cell} tokens`;
  const scale = weightScale(shown.colours, values, top || 1);
  return {
    kind: "head",
    element: plot,
    layer,
    head,
    tokens: labels(c0, c1),
    rowTokens: labels(r0, r1),
    matrix: values,
    matrixName: "values",
    corner: "query \\ key",
    where: `L${layer}-H${head}-q${r0}-${r1 - 1}-k${c0}-${c1 - 1}`,
    suffix: cell === 1 ? "" : `-${reduce}-of-${cell}`,
    title: `layer ${layer} · head ${head} · queries ${r0}–${r1 - 1}, keys ${c0}–${c1 - 1}`,
    colour: scale.colour,
    colourBar: scale.bar,
    payload: {
      what: `Deep zoom's window: values[i][j] is for queries from ${r0} + i·${cell} and keys from ${c0} + j·${cell}, ${cells}; within error_bound of the model's own weights`,
      rows: [r0, r1],
      cols: [c0, c1],
      cell,
      reduce: cell === 1 ? null : reduce,
      error_bound: shown.errorBound,
      seq_len: state.pass.seq_len,
    },
  };
}

function wirePlot() {
  plot._zoomWired = true;
  plot.on("plotly_relayout", (event) => {
    const n = state.pass?.seq_len;
    if (!n) return;
    if (event["xaxis.autorange"] || event["yaxis.autorange"]) {
      state.window = null;
    } else if (Object.keys(event).some((key) => /^[xy]axis\.range/.test(key))) {
      const x = plot.layout.xaxis.range;
      const y = plot.layout.yaxis.range;
      const c0 = Math.floor(Math.min(...x) + 0.5);
      const c1 = Math.ceil(Math.max(...x) + 0.5);
      const r0 = Math.floor(Math.min(...y) + 0.5);
      const r1 = Math.ceil(Math.max(...y) + 0.5);
      state.window = clampWindow([r0, r1, c0, c1]);
    } else {
      return;
    }
    clearTimeout(relayoutTimer);
    relayoutTimer = setTimeout(draw, 120);
  });
  plot.on("plotly_hover", (event) => {
    const point = event.points?.[0];
    const info = shown; // the window drawn, which hovering reads
    if (!point || !info) return;
    const [i, j] = point.pointIndex;
    const value = info.values[i]?.[j];
    const row = info.r0 + i * info.cell;
    const col = info.c0 + j * info.cell;
    const tokens = state.pass.tokens;
    if (info.cell === 1) {
      windowLine.textContent = `query ${row} “${tokens[row]}” → key ${col} “${tokens[col]}”: ${formatNumber(value, 6)}`;
    } else {
      windowLine.textContent = `queries ${row}–${Math.min(row + info.cell, state.pass.seq_len) - 1}, keys ${col}–${Math.min(col + info.cell, state.pass.seq_len) - 1}: ${info.reduce} ${formatNumber(value, 6)}`;
    }
  });
}

/** Keyboard zoom and pan on the focused map: + and − zoom by 2 around the centre, arrows move
 * by a quarter of the window, 0 shows the whole map. */
function onMapKey(event) {
  const n = state.pass?.seq_len;
  if (!n) return;
  let [r0, r1, c0, c1] = state.window || [0, n, 0, n];
  const rows = r1 - r0;
  const cols = c1 - c0;
  const moves = {
    ArrowUp: [-rows / 4, 0],
    ArrowDown: [rows / 4, 0],
    ArrowLeft: [0, -cols / 4],
    ArrowRight: [0, cols / 4],
  };
  if (event.key in moves) {
    const [dr, dc] = moves[event.key].map(Math.round);
    const shiftR = Math.max(-r0, Math.min(n - r1, dr));
    const shiftC = Math.max(-c0, Math.min(n - c1, dc));
    [r0, r1, c0, c1] = [r0 + shiftR, r1 + shiftR, c0 + shiftC, c1 + shiftC];
  } else if (event.key === "+" || event.key === "=" || event.key === "-" || event.key === "−") {
    const factor = event.key === "-" || event.key === "−" ? 2 : 0.5;
    const half = (span) => Math.max(1, Math.round((span * factor) / 2));
    const [mr, mc] = [(r0 + r1) / 2, (c0 + c1) / 2];
    [r0, r1, c0, c1] = [mr - half(rows), mr + half(rows), mc - half(cols), mc + half(cols)].map(Math.round);
  } else if (event.key === "0") {
    [r0, r1, c0, c1] = [0, n, 0, n];
  } else {
    return;
  }
  event.preventDefault();
  state.window = clampWindow([r0, r1, c0, c1]);
  clearTimeout(relayoutTimer);
  relayoutTimer = setTimeout(draw, 120);
}

async function useExample() {
  const length = Number($("#zoom-example-length").value);
  showError(errorBox, "");
  status.textContent = "Drawing random words…";
  try {
    const example = await api.inductionText(state.model, length, 0);
    textBox.value = example.text;
    state.text = example.text;
    await runPass();
  } catch (err) {
    status.textContent = "";
    showError(errorBox, err.message);
  }
}

async function main() {
  readUrl();
  await plotlyReady();
  setTimeout(warmPlotly, 0);
  try {
    await loadModels();
  } catch (err) {
    showError(errorBox, err.message);
    return;
  }
  textBox.value = state.text;
  findBox.value = state.find;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const chars = [...textBox.value].length; // code points, as the server counts; never cut
    if (chars > page.max_text_chars) {
      showError(
        errorBox,
        `This text is ${chars.toLocaleString("en")} characters; the server takes up to ${page.max_text_chars.toLocaleString("en")}. Shorten it: nothing was cut.`,
      );
      return;
    }
    state.text = textBox.value;
    state.model = modelSelect.value;
    runPass();
  });
  modelSelect.addEventListener("change", () => {
    state.model = modelSelect.value;
    describeModel();
    writeUrl();
  });
  stopButton.addEventListener("click", () => running?.abort());
  $("#zoom-example").addEventListener("click", useExample);
  $("#zoom-example-length").addEventListener("change", (event) => {
    event.target.dataset.chosen = "1";
  });
  layerSelect.addEventListener("change", () => openHead(Number(layerSelect.value), state.head, { focus: false }));
  headSelect.addEventListener("change", () => openHead(state.layer, Number(headSelect.value), { focus: false }));
  reduceSelect.addEventListener("change", () => {
    state.reduce = reduceSelect.value;
    draw();
  });
  coloursSelect.addEventListener("change", () => {
    state.colours = coloursSelect.value;
    draw();
  });
  $("#zoom-reset").addEventListener("click", () => {
    state.window = null;
    draw();
  });
  $("#zoom-find-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.find = findBox.value.trim();
    findMatches();
    draw();
  });
  for (const button of document.querySelectorAll("[data-export]")) {
    button.addEventListener("click", async () => {
      try {
        await exportCurrent(button.dataset.export, windowExport(), { model: state.model, text: state.text }, (note) => {
          windowLine.textContent = note;
        });
      } catch (err) {
        showError(errorBox, err.message);
      }
    });
  }
  plot.addEventListener("keydown", onMapKey);
  finder.show(); // the statistic the URL names, before any run
  if (state.text.trim()) await runPass({ keepView: true, findHeads: Boolean(state.stat) });
  else writeUrl();
}

main();
