// The lesson player, on every page: while a lesson is under way in this tab (sessionStorage),
// a panel at the bottom of the page gives the step's caption and question, checks the answer
// the learner clicks in the view against the numbers the view shows, and moves between steps
// (each step is a page of Atlas, opened by its link).

import { api } from "./api.js";

const KEY = "atlas-lesson"; // {lesson, step, home, folded}
const RIGHT_AFTER_TRIES = 2; // wrong answers before the right one is shown

function load() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY));
  } catch {
    return null;
  }
}

function save(run) {
  sessionStorage.setItem(KEY, JSON.stringify(run));
}

/** Starts (or moves) a lesson at `step`: remembered for this tab, then the step's page opens. */
export function startLesson(lesson, step, home) {
  save({ lesson, step, home, folded: false });
  window.location.assign(lesson.steps[step].page);
}

const pathOf = (link) => new URL(link, window.location.origin).pathname;
const format = (w) => (w >= 0.001 ? w.toFixed(3) : w.toExponential(1));

function element(tag, { text, className, attrs } = {}) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

/** A token's name for feedback: the explorer's chip where there is one, else the map's label. */
function tokenName(plot, index) {
  const chip = document.querySelectorAll("#tokens .token")[index];
  if (chip) return `‘${chip.textContent}’`;
  const label = plot.data?.[0]?.x?.[index];
  const text = label === undefined ? String(index) : new DOMParser().parseFromString(String(label), "text/html").documentElement.textContent;
  return `‘${text}’`;
}

/** A key question: a click in row `query` of the map is right when it is the row's largest. */
function askKey(question, say) {
  let wrong = 0;
  const answer = (plot, point) => {
    if (!point) return;
    const [row, col] = Array.isArray(point.pointIndex) ? point.pointIndex : [point.y, point.x];
    const trace = plot.data[0];
    const values = (trace.customdata || trace.z)[question.query]; // the weights, whatever the colours
    const name = (i) => tokenName(plot, i);
    if (row !== question.query) {
      say(`That cell is in the row of ${name(row)}; the question is about the row of ${name(question.query)}.`, "hint");
      return;
    }
    const best = values.reduce((b, v, i) => (v !== null && v > values[b] ? i : b), 0);
    if (col === best) {
      say(`Right: ${name(best)} takes ${format(values[best])} of ${name(question.query)}'s attention, the most of any key.`, "right");
      return;
    }
    wrong += 1;
    const shown = wrong >= RIGHT_AFTER_TRIES ? ` The most goes to ${name(best)}: ${format(values[best])}.` : " Try again.";
    say(`Not this one: ${name(col)} takes ${format(values[col] ?? 0)}.${shown}`, "wrong");
  };
  // The map may be drawn after the panel (or drawn again): bind once it exists, once.
  const bind = () => {
    const plot = document.querySelector(question.map);
    if (!plot || typeof plot.on !== "function" || plot.dataset.lessonBound) return;
    plot.dataset.lessonBound = "1";
    plot.on("plotly_click", (event) => answer(plot, event.points?.[0]));
    plot.scrollIntoView({ block: "start" }); // the map the question is about, above the panel
  };
  bind();
  setInterval(bind, 500);
}

/** A head question: the head the learner opens (the explorer says so with atlas:open-head) is
 * right when its statistic on the page's text is at least at_least, or the largest. */
function askHead(question, say) {
  let wrong = 0;
  document.addEventListener("atlas:open-head", async (event) => {
    const { layer, head } = event.detail;
    const query = new URLSearchParams(window.location.search);
    const text = query.get("text") ?? new URLSearchParams(window.location.hash.slice(1)).get("text");
    let data;
    try {
      data = await api.heads({ model: query.get("model"), text });
    } catch (err) {
      say(`The statistics could not be had: ${err.message}`, "hint");
      return;
    }
    const grid = data.statistics[question.statistic];
    const value = grid?.[data.layers.indexOf(layer)]?.[head];
    if (grid === undefined) {
      say(`This lesson asks about “${question.statistic}”, which is not a statistic of Head roles.`, "hint");
      return;
    }
    let top = { value: -Infinity };
    data.layers.forEach((l, row) => grid[row].forEach((v, h) => v !== null && v > top.value && (top = { value: v, layer: l, head: h })));
    const named = `Layer ${layer} head ${head}: ${question.statistic} ${value === null ? "–" : format(value)}`;
    if (value !== null && (value >= (question.at_least ?? Infinity) || value === top.value)) {
      say(`Right. ${named}${question.at_least !== null && question.at_least !== undefined ? ` (at least ${question.at_least})` : ""}; the highest is layer ${top.layer} head ${top.head} at ${format(top.value)}.`, "right");
      return;
    }
    wrong += 1;
    const shown = wrong >= RIGHT_AFTER_TRIES ? ` The highest is layer ${top.layer} head ${top.head}: ${format(top.value)}.` : " Try another.";
    say(`Not quite. ${named}.${shown}`, "wrong");
  });
}

function panel(run) {
  const { lesson, step, home } = run;
  const current = lesson.steps[step];
  const here = pathOf(current.page) === window.location.pathname;
  const bar = element("aside", { className: "lesson-bar", attrs: { "aria-label": "Lesson" } });
  const fold = element("button", { text: run.folded ? "Show" : "Hide", className: "secondary", attrs: { type: "button", "aria-expanded": String(!run.folded) } });
  const title = element("a", { text: lesson.title, attrs: { href: home } });
  const head = element("div", { className: "lesson-head" });
  head.append(title, ` · step ${step + 1} of ${lesson.steps.length} `, fold);
  const body = element("div", { className: "lesson-body" });
  body.hidden = run.folded;
  // The caption folds away on a narrow screen, where the view needs the room.
  const caption = element("details", { className: "lesson-caption" });
  caption.open = !window.matchMedia("(max-width: 760px)").matches || !current.question;
  caption.append(element("summary", { text: "What to look at" }), element("p", { text: current.caption }));
  body.append(caption);
  const feedback = element("p", { className: "lesson-feedback", attrs: { role: "status", "aria-live": "polite" } });
  const say = (text, kind) => {
    feedback.textContent = text;
    feedback.dataset.kind = kind;
  };
  if (current.question) body.append(element("p", { text: current.question.ask, className: "lesson-question" }), feedback);
  const buttons = element("div", { className: "row" });
  const go = (to) => startLesson(lesson, to, home);
  if (step > 0) buttons.append(button("← Previous", () => go(step - 1)));
  if (!here) buttons.append(button("Back to this step", () => go(step)));
  if (step + 1 < lesson.steps.length) buttons.append(button("Next →", () => go(step + 1), true));
  else buttons.append(button("Finish", () => leave(home), true));
  buttons.append(button("Leave the lesson", () => leave(null)));
  body.append(buttons);
  fold.addEventListener("click", () => {
    run.folded = !run.folded;
    save(run);
    body.hidden = run.folded;
    fold.textContent = run.folded ? "Show" : "Hide";
    fold.setAttribute("aria-expanded", String(!run.folded));
  });
  bar.append(head, body);
  if (here && current.question?.kind === "key") askKey(current.question, say);
  if (here && current.question?.kind === "head") askHead(current.question, say);
  return bar;
}

function button(text, onClick, primary = false) {
  const node = element("button", { text, className: primary ? "" : "secondary", attrs: { type: "button" } });
  node.addEventListener("click", onClick);
  return node;
}

function leave(to) {
  sessionStorage.removeItem(KEY);
  document.querySelector(".lesson-bar")?.remove();
  document.body.classList.remove("with-lesson");
  if (to) window.location.assign(to);
}

const run = load();
if (run?.lesson?.steps?.[run.step]) {
  document.body.append(panel(run));
  document.body.classList.add("with-lesson");
}
