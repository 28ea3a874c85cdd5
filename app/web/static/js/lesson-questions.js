// A lesson step's question, checked against the numbers the page shows (lesson.js asks it).
// Two kinds (docs/lessons.md): "key" (a click in one row of a map) and "head" (a head opened).
//
// Each takes the question and `step`: {say(text, kind), onStep(), wrong(), addWrong()}:
// say writes the feedback line; onStep tells whether the page still shows the step (lesson.js);
// the count of wrong answers lives in the tab's lesson run, so it survives a return to the step.

import { api } from "./api.js";

const RIGHT_AFTER_TRIES = 2; // wrong answers before the right one is shown
const MAP_GRACE_MS = 3000; // once the page has drawn a map, how long the question's may take
const NO_MAP_MS = 60000; // how long a page that draws no map at all is waited for
const SETTLE_MS = 15000; // how long the question's map is kept in sight as the page settles

const format = (w) => (w >= 0.001 ? w.toFixed(3) : w.toExponential(1));
const plain = (html) => new DOMParser().parseFromString(String(html), "text/html").documentElement.textContent;
const isMap = (node) => Boolean(node?.data?.[0]) && typeof node.on === "function";
const drawnMaps = () =>
  [...document.querySelectorAll(".js-plotly-plot")].filter((p) => isMap(p) && p.data[0].type === "heatmap");
const rowsOf = (plot) => (plot.data[0].customdata || plot.data[0].z).length;

/** Scrolls `node` into sight above the lesson panel (the page's scroll-padding-bottom is the
 * panel's height): whole where it fits, else from its top. */
export function bringIntoView(node) {
  const free = window.innerHeight - (document.querySelector(".lesson-bar")?.offsetHeight ?? 0);
  node.scrollIntoView({ block: node.getBoundingClientRect().height <= free ? "nearest" : "start" });
}

/** Whether `node` is where bringIntoView puts it: whole above the panel where it fits, else
 * its top at the top of the window. */
function inSight(node) {
  const box = node.getBoundingClientRect();
  const panel = document.querySelector(".lesson-bar")?.getBoundingClientRect().top ?? window.innerHeight;
  return box.height <= panel ? box.top >= -1 && box.bottom <= panel + 1 : Math.abs(box.top) <= 1;
}

const LEARNER_MOVES = ["wheel", "touchmove", "keydown", "pointerdown"];

/** Keeps the question's map in sight while the page settles (lines above it drawn late, a map
 * redrawn at its final size: on a busy machine, after the first scroll), until the learner
 * moves the page themselves or SETTLE_MS have passed. */
function keepInSight(node) {
  const until = Date.now() + SETTLE_MS;
  let moved = false;
  const stop = () => {
    moved = true;
  };
  for (const kind of LEARNER_MOVES) window.addEventListener(kind, stop, { passive: true });
  const follow = () => {
    if (moved || Date.now() > until || !node.isConnected) {
      for (const kind of LEARNER_MOVES) window.removeEventListener(kind, stop);
      return;
    }
    if (!inSight(node)) bringIntoView(node);
    setTimeout(follow, 250);
  };
  bringIntoView(node);
  follow();
}

/** A token as the page shows it (the explorer's chip, else the map's label, "8 · street" read as
 * "street"), with its position: "‘street’ (position 8)". */
function tokenName(plot, index) {
  let text = document.querySelectorAll("#tokens .token")[index]?.textContent;
  if (text === undefined) {
    const label = plot.data?.[0]?.x?.[index];
    text = label === undefined ? undefined : plain(label).replace(/^\d+ · /, "");
  }
  return text === undefined ? `position ${index}` : `‘${text}’ (position ${index})`;
}

/** Where `target` lies seen from `from`, in words: "the right-hand map", "the map below" … */
function whereIs(target, from) {
  const a = target.getBoundingClientRect();
  const b = from.getBoundingClientRect();
  if (a.left >= b.right - 1) return "the right-hand map";
  if (a.right <= b.left + 1) return "the left-hand map";
  if (a.top >= b.bottom - 1) return "the map below";
  if (a.bottom <= b.top + 1) return "the map above";
  return "another map";
}

/** A key question: a click in row `query` of the map is right when it is the row's largest
 * value as the map holds it (the weights, whatever the colours). A click on another map says
 * which map the question is about; a lesson whose map or row this page lacks is said to. */
export function askKey(question, step) {
  const notOnPage = (plot) =>
    `This lesson's question names row ${question.query}, but the map has ${rowsOf(plot)} rows (positions 0 to ${rowsOf(plot) - 1}): the lesson needs fixing.`;
  const answer = (plot, point) => {
    if (!point) return;
    if (!step.onStep()) {
      step.say("This map is no longer the step's: go back to the step to answer on its map.", "hint");
      return;
    }
    if (question.query >= rowsOf(plot)) {
      step.say(notOnPage(plot), "hint");
      return;
    }
    const [row, col] = Array.isArray(point.pointIndex) ? point.pointIndex : [point.y, point.x];
    const trace = plot.data[0];
    const values = (trace.customdata || trace.z)[question.query]; // the weights, whatever the colours
    const name = (i) => tokenName(plot, i);
    if (row !== question.query) {
      step.say(
        `That cell is in the row of ${name(row)}; the question is about the row of ${name(question.query)}.`,
        "hint",
      );
      return;
    }
    const best = values.reduce((b, v, i) => (v !== null && v > values[b] ? i : b), 0);
    if (col === best) {
      step.say(
        `Right: ${name(best)} takes ${format(values[best])} of the attention of ${name(question.query)}, the most of any key.`,
        "right",
      );
      return;
    }
    const shown =
      step.addWrong() >= RIGHT_AFTER_TRIES
        ? ` The most goes to ${name(best)}: ${format(values[best])}.`
        : " Try again.";
    step.say(`Not this one: ${name(col)} takes ${format(values[col] ?? 0)}.${shown}`, "wrong");
  };
  const elsewhere = (plot) => {
    const target = document.querySelector(question.map);
    if (!isMap(target)) return;
    const title = plain(target.layout?.title?.text ?? "")
      .split(" — ")[0]
      .trim();
    target.classList.add("lesson-target");
    bringIntoView(target);
    step.say(
      `That cell is in another map: the question is about ${whereIs(target, plot)}${title ? ` (“${title}”)` : ""}, now outlined.`,
      "hint",
    );
  };

  const started = Date.now();
  let firstMapAt = null;
  let checked = false;
  /** Once the page has drawn: the question's map is there, and has the row asked about. */
  const check = (maps) => {
    const target = document.querySelector(question.map);
    if (isMap(target)) {
      checked = true;
      if (question.query >= rowsOf(target)) step.say(notOnPage(target), "hint");
      return;
    }
    firstMapAt ??= maps.length ? Date.now() : null;
    const waited = firstMapAt === null ? Date.now() - started > NO_MAP_MS : Date.now() - firstMapAt > MAP_GRACE_MS;
    if (!waited) return;
    checked = true;
    const names = maps.filter((p) => p.id).map((p) => `#${p.id}`);
    const there = names.length ? `its maps are ${names.join(", ")}` : "it shows no map";
    step.say(
      `This lesson's question is about the map ${question.map}, which this page does not show; ${there}. The lesson needs fixing.`,
      "hint",
    );
  };
  // The maps may be drawn after the panel (or drawn again): bind each once it exists, once.
  const watch = () => {
    const maps = drawnMaps();
    for (const plot of maps) {
      if (plot.dataset.lessonBound) continue;
      const ours = plot.matches(question.map);
      plot.dataset.lessonBound = ours ? "1" : "other";
      plot.on("plotly_click", (event) => (ours ? answer(plot, event.points?.[0]) : elsewhere(plot)));
      if (ours) keepInSight(plot); // the map the question is about, above the panel
    }
    if (!checked) check(maps);
  };
  watch();
  setInterval(watch, 500);
}

/** A head question: the head the learner opens (the explorer says so with atlas:open-head) is
 * right when its statistic on the page's text is at least at_least, or the largest. Opening a
 * head leaves the step's view; `step.openedFromStep()` tells whether it was opened from it. */
export function askHead(question, step) {
  document.addEventListener("atlas:open-head", async (event) => {
    if (!step.openedFromStep()) return;
    const { layer, head } = event.detail;
    const query = new URLSearchParams(window.location.search);
    const text = query.get("text") ?? new URLSearchParams(window.location.hash.slice(1)).get("text");
    let data;
    try {
      data = await api.heads({ model: query.get("model"), text });
    } catch (err) {
      step.say(`The statistics could not be computed: ${err.message}`, "hint");
      return;
    }
    const grid = data.statistics[question.statistic];
    if (grid === undefined) {
      step.say(
        `This lesson asks about “${question.statistic}”, which is not a statistic of Head roles: the lesson needs fixing.`,
        "hint",
      );
      return;
    }
    const value = grid[data.layers.indexOf(layer)]?.[head] ?? null;
    let top = { value: -Infinity };
    data.layers.forEach((l, row) =>
      grid[row].forEach((v, h) => v !== null && v > top.value && (top = { value: v, layer: l, head: h })),
    );
    const named = `Layer ${layer} head ${head}: ${question.statistic} ${value === null ? "–" : format(value)}`;
    const atLeast = question.at_least ?? null;
    if (value !== null && ((atLeast !== null && value >= atLeast) || value === top.value)) {
      step.say(
        `Right. ${named}${atLeast !== null ? ` (at least ${atLeast})` : ""}; the highest is layer ${top.layer} head ${top.head}, at ${format(top.value)}.`,
        "right",
      );
      return;
    }
    const shown =
      step.addWrong() >= RIGHT_AFTER_TRIES
        ? ` The highest is layer ${top.layer} head ${top.head}: ${format(top.value)}.`
        : " Try another.";
    step.say(`Not quite. ${named}.${shown}`, "wrong");
  });
}
