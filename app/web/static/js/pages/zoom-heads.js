// Deep zoom's head finder: every head's statistics over the whole text, asked of
// POST /api/attention/heads a layer at a time (a long text's statistics take seconds a layer),
// drawn as a layers x heads table of coloured numbers that fills in as each layer arrives, with
// the strongest heads listed as buttons. With tokens found in the text (state.matches), each
// head's share of attention on them is measured too, in the same pass: the statistic 'marked'.
// Reads and writes the page's state object through the functions it is given.

import { api } from "../api.js";
import { $ } from "../dom.js";
import { anyValue, gridMax, headLabels, NO_VALUE } from "../views/heads.js";
import { drawHeatTable } from "../views/heat-table.js";
import { formatNumber } from "../views/plot.js";
import { spanPositions } from "../views/tokens.js";

const LISTED = 8; // strongest heads listed under the map
const DEFAULT_STAT = "induction";
const MARKED = "marked"; // the statistic of the found tokens (POST /heads' `marked`)

/**
 * Wires the panel. state: the page's state object (model, text, pass, stat, layer, head);
 * descriptions: {statistic: what it measures}, from the page's data, so the statistic can be
 * picked before the first run; open(layer, head): shows that head's map; writeUrl(): mirrors
 * the state in the URL.
 * Returns {reset(), run(), show(), ready}: reset when a new forward pass starts, run to
 * compute, show to redraw after the state changes; ready once a run has begun.
 */
export function headFinder(state, descriptions, { open, writeUrl }) {
  const statSelect = $("#zoom-stat");
  const readFromSelect = $("#zoom-read-from");
  const runButton = $("#zoom-heads-run");
  const stopButton = $("#zoom-heads-stop");
  const progress = $("#zoom-heads-progress");
  const status = $("#zoom-heads-status");
  const describe = $("#zoom-heads-describe");
  const grid = $("#zoom-heads-grid");
  const list = $("#zoom-heads-top");
  let found = null; // {statistics: {name: [layer][head]}, roles: [layer][head]}
  let running = null;
  const known = { ...descriptions }; // and the found tokens' share, once a run measures it
  let markedFor = null; // the search whose tokens the run measures, if any
  let readFromLast = false; // whether the run reads them from the last token only
  const fromWhere = () => (readFromLast ? " from the last token" : "");
  const label = (stat) => (stat === MARKED ? `share on “${markedFor}”${fromWhere()}` : stat.replace("_", " "));
  const options = (search) => {
    const chosen = statSelect.value;
    markedFor = search;
    statSelect.replaceChildren(
      ...Object.keys(descriptions).map((n) => new Option(label(n), n)),
      ...(search === null ? [] : [new Option(`the found tokens (“${search}”)${fromWhere()}`, MARKED)]),
    );
    if ([...statSelect.options].some((o) => o.value === chosen)) statSelect.value = chosen;
  };
  options(null);
  statSelect.value = DEFAULT_STAT; // show() puts the URL's choice in once it is read

  function reset() {
    running?.abort();
    running = null; // the aborted run leaves the panel to this
    runButton.disabled = false;
    stopButton.hidden = true;
    progress.hidden = true;
    found = null;
    options(null);
    grid.hidden = true;
    list.replaceChildren();
    status.textContent = "";
    show();
  }

  /** Computes every layer; preferMarked: show the found tokens' share once it comes (a run the
   * user starts with tokens found; a run the URL restores keeps the URL's statistic). */
  async function run({ preferMarked = false } = {}) {
    const pass = state.pass;
    if (!pass) return;
    const marked = spanPositions(state.matches || []);
    readFromLast = state.readFrom === "last";
    options(marked.length ? state.find : null);
    if (marked.length && preferMarked) state.stat = MARKED;
    if (state.stat === MARKED && marked.length) statSelect.value = MARKED;
    running?.abort();
    const controller = new AbortController();
    running = controller;
    const layers = pass.num_layers;
    const empty = () => Array.from({ length: layers }, () => Array(pass.num_heads).fill(null));
    found = { statistics: {}, roles: Array.from({ length: layers }, () => null) };
    runButton.disabled = true;
    stopButton.hidden = false;
    progress.hidden = false;
    progress.value = 0;
    const started = performance.now();
    let outcome = "";
    try {
      for (let layer = 0; layer < layers; layer++) {
        status.textContent = `Layer ${layer + 1} of ${layers}…`;
        const body = { model: state.model, text: state.text, layers: [layer] };
        if (marked.length) body.marked = marked;
        if (marked.length && readFromLast) body.read_from = [pass.seq_len - 1];
        const answer = await api.heads(body, { signal: controller.signal });
        if (running !== controller) return;
        Object.assign(known, answer.descriptions);
        for (const [name, rows] of Object.entries(answer.statistics)) {
          found.statistics[name] ??= empty();
          found.statistics[name][layer] = rows[0];
        }
        found.roles[layer] = answer.roles[0];
        progress.value = (layer + 1) / layers;
        show();
      }
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      outcome = `Every head of ${layers} layers over ${pass.seq_len.toLocaleString("en")} tokens, in ${seconds} s.`;
    } catch (err) {
      if (running !== controller) return;
      outcome = err.name === "AbortError" ? "Stopped: the layers so far are shown." : err.message;
    } finally {
      if (running === controller) {
        // not replaced by a newer run or reset
        running = null;
        show(); // "so far" no longer
        status.textContent = outcome;
        runButton.disabled = false;
        stopButton.hidden = true;
        progress.hidden = true;
      }
    }
  }

  /** Draws the chosen statistic of the layers found so far, and lists its strongest heads;
   * before a run, says what the chosen statistic measures. */
  function show() {
    readFromSelect.value = state.readFrom;
    if (!found || !Object.keys(found.statistics).length) {
      const stat = Object.hasOwn(descriptions, state.stat ?? "") ? state.stat : statSelect.value;
      statSelect.value = stat; // the URL's choice, before any run
      describe.textContent = `${label(stat)}: ${known[stat] ?? "measured with the first layer"}.`;
      return;
    }
    const names = Object.keys(found.statistics);
    const stat = [state.stat, statSelect.value].find((name) => names.includes(name)) ?? DEFAULT_STAT;
    state.stat = stat;
    statSelect.value = stat;
    writeUrl();
    const name = label(stat);
    const values = found.statistics[stat];
    const scored = anyValue(values);
    const none = scored
      ? ""
      : ` No query row of this text qualifies${running ? " in the layers computed so far" : ""}.`;
    describe.textContent = `${name}: ${known[stat]}.${none}`;
    grid.hidden = !scored;
    listStrongest(values, stat);
    if (!scored) return;
    const labels = headLabels(state.pass);
    drawHeatTable(grid, values, {
      caption: `${name} of every head · rows: layers, columns: heads · select a cell to open its map`,
      rows: labels.layers,
      cols: labels.heads,
      max: stat === "distance" ? gridMax(values) : 1,
      digits: stat === "distance" ? 1 : 2,
      missingText: NO_VALUE,
      name,
      open: [state.layer, state.head],
      onPick: open,
    });
  }

  function listStrongest(values, stat) {
    const heads = values.flatMap((row, l) => row.map((v, h) => [v, l, h])).filter(([v]) => v !== null);
    heads.sort((a, b) => b[0] - a[0]);
    list.replaceChildren(
      ...heads.slice(0, LISTED).map(([v, l, h]) => {
        const roles = (found.roles[l]?.[h] || []).map((r) => r.role).join(", ");
        const button = document.createElement("button");
        button.type = "button";
        button.className = "link";
        button.textContent = `Layer ${l}, head ${h}: ${label(stat)} ${formatNumber(v, stat === "distance" ? 1 : 3)}${roles ? ` (${roles})` : ""}`;
        button.addEventListener("click", () => open(l, h));
        const item = document.createElement("li");
        item.append(button);
        return item;
      }),
    );
  }

  statSelect.addEventListener("change", () => {
    state.stat = statSelect.value;
    show();
  });
  // Another choice of rows changes the found tokens' numbers: measured again where shown.
  readFromSelect.addEventListener("change", () => {
    state.readFrom = readFromSelect.value;
    writeUrl();
    if (found && markedFor !== null) run({ preferMarked: true });
  });
  runButton.addEventListener("click", () => run({ preferMarked: true }));
  stopButton.addEventListener("click", () => running?.abort());
  return {
    reset,
    run,
    show,
    get ready() {
      return found !== null;
    },
  };
}
