// The lesson player, on every page: while a lesson is under way in this tab (sessionStorage),
// a panel at the bottom of the page gives the step's caption and question, checks the answer
// the learner clicks in the view (lesson-questions.js), and moves between steps (each step is a
// page of Atlas, opened by its link). Away from the step's page, it offers the way back.

import { askHead, askKey, bringIntoView } from "./lesson-questions.js";

const KEY = "atlas-lesson"; // the run: {lesson, step, home, folded, wrong, said}
const FINISHED = "atlas-lesson-finished"; // {title, id, home}: read once by the lesson's page
const HEAD_PARAMETERS = ["layer", "head", "view"]; // what opening a head changes in the explorer

function load(key = KEY) {
  try {
    return JSON.parse(sessionStorage.getItem(key));
  } catch {
    return null;
  }
}

function save(run) {
  sessionStorage.setItem(KEY, JSON.stringify(run));
}

/** Starts (or moves) a lesson at `step`, afresh: remembered for this tab, then the step's page opens. */
export function startLesson(lesson, step, home) {
  save({ lesson, step, home, folded: false, wrong: 0, said: null });
  window.location.assign(lesson.steps[step].page);
}

/** The lesson the learner has just finished, if it is the one whose page is `home`; read once. */
export function takeFinished(home) {
  const done = load(FINISHED);
  sessionStorage.removeItem(FINISHED);
  return done?.home === home ? done : null;
}

/**
 * Whether this page shows the step whose link is `link`: the same path, and no query parameter
 * the link names has another value here (the explorer's long text, kept in the fragment as
 * #text=..., counts as the query's). A parameter the page leaves out is at its default, which
 * pages leave out of their links: it does not count. `except` names parameters not compared.
 */
export function onStep(link, { except = [], location = window.location } = {}) {
  const want = new URL(link, location.origin);
  if (want.pathname !== location.pathname) return false;
  const query = new URLSearchParams(location.search);
  const fragment = new URLSearchParams(location.hash.slice(1));
  for (const [name, value] of want.searchParams) {
    if (except.includes(name)) continue;
    const now = query.get(name) ?? (name === "text" ? fragment.get(name) : null);
    if (now !== null && now !== value) return false;
  }
  return true;
}

function element(tag, { text, className, attrs } = {}) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function button(text, onClick, primary = false) {
  const node = element("button", { text, className: primary ? "" : "secondary", attrs: { type: "button" } });
  node.addEventListener("click", onClick);
  return node;
}

function panel(run) {
  const { lesson, step, home } = run;
  const current = lesson.steps[step];
  const bar = element("aside", { className: "lesson-bar", attrs: { "aria-label": "Lesson" } });
  const fold = element("button", {
    text: run.folded ? "Show" : "Hide",
    className: "secondary",
    attrs: { type: "button", "aria-expanded": String(!run.folded) },
  });
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

  // The feedback line: what the last answer earned, with the way back to the step beside it.
  const answer = element("div", { className: "lesson-answer" });
  const feedback = element("p", { className: "lesson-feedback", attrs: { role: "status", "aria-live": "polite" } });
  answer.append(feedback);
  const say = (text, kind) => {
    feedback.textContent = text;
    feedback.dataset.kind = kind;
    run.said = [text, kind];
    save(run);
    place();
  };
  if (run.said) [feedback.textContent, feedback.dataset.kind] = run.said;
  if (current.question) body.append(element("p", { text: current.question.ask, className: "lesson-question" }), answer);

  const buttons = element("div", { className: "row" });
  const go = (to) => startLesson(lesson, to, home);
  const back = button("Back to this step", () => {
    save(run); // the same step: its count of wrong answers and its feedback stay
    window.location.assign(current.page);
  });
  const next =
    step + 1 < lesson.steps.length
      ? button("Next →", () => go(step + 1), true)
      : button("Finish", () => finish(run), true);
  if (step > 0) buttons.append(button("← Previous", () => go(step - 1)));
  buttons.append(
    next,
    button("Leave the lesson", () => leave(null)),
  );
  body.append(buttons);
  // Away from the step, "Back to this step" shows: beside the feedback where an answer is
  // there to read (opening a head leaves the step's view), else among the buttons.
  function place() {
    if (onStep(current.page)) back.remove();
    else if (current.question && feedback.textContent) answer.append(back);
    else buttons.insertBefore(back, next);
  }
  place();
  setInterval(place, 500); // pages change their links with history.replaceState, which no event tells
  document.addEventListener("atlas:open-head", () => queueMicrotask(place));

  fold.addEventListener("click", () => {
    run.folded = !run.folded;
    save(run);
    body.hidden = run.folded;
    fold.textContent = run.folded ? "Show" : "Hide";
    fold.setAttribute("aria-expanded", String(!run.folded));
  });
  bar.append(head, body);
  const asked = {
    say,
    onStep: () => onStep(current.page),
    openedFromStep: () => onStep(current.page, { except: HEAD_PARAMETERS }),
    addWrong: () => {
      run.wrong = (run.wrong ?? 0) + 1;
      save(run);
      return run.wrong;
    },
  };
  if (onStep(current.page) && current.question?.kind === "key") askKey(current.question, asked);
  if (onStep(current.page, { except: HEAD_PARAMETERS }) && current.question?.kind === "head")
    askHead(current.question, asked);
  return bar;
}

/** The last step's Finish: back to the lesson's page, which says so and what comes next. */
function finish(run) {
  sessionStorage.setItem(FINISHED, JSON.stringify({ title: run.lesson.title, id: run.lesson.id, home: run.home }));
  leave(run.home);
}

function leave(to) {
  sessionStorage.removeItem(KEY);
  document.querySelector(".lesson-bar")?.remove();
  document.body.classList.remove("with-lesson");
  if (to) window.location.assign(to);
}

const VIEW_WAIT_MS = 60000;

/** On an explorer step, once its view has drawn: the view's first picture (a key question's own
 * map) in sight above the panel, kept there while the page above it settles (the step is about
 * it; the explorer itself opens at its top). */
function showTheStepsView(step) {
  if (window.location.pathname !== "/" || !onStep(step.page)) return;
  const started = Date.now();
  let placed = null; // [the picture, the scroll we left it at]
  const drawn = (node) => !node.classList.contains("js-plotly-plot") || node.data?.length;
  const timer = setInterval(() => {
    if (placed && window.scrollY !== placed[1]) return clearInterval(timer); // the learner scrolled
    const view = document.querySelector("#views > [role=tabpanel]:not([hidden])");
    const asked = step.question?.kind === "key" ? [document.querySelector(step.question.map)].filter(Boolean) : null;
    const picture = (asked ?? [...(view?.querySelectorAll(".js-plotly-plot, [data-part=grid] > *") ?? [])]).find(drawn);
    if (picture) {
      bringIntoView(picture); // again while the page above it settles (its texts fill in)
      placed = [picture, window.scrollY];
    }
    if (Date.now() - started > VIEW_WAIT_MS) clearInterval(timer);
  }, 250);
}

const run = load();
if (run?.lesson?.steps?.[run.step]) {
  const bar = panel(run);
  document.body.append(bar);
  document.body.classList.add("with-lesson");
  // The page keeps room for the panel below its content, and scrolling keeps things above it.
  const room = () => document.documentElement.style.setProperty("--lesson-height", `${bar.offsetHeight}px`);
  new ResizeObserver(room).observe(bar);
  room();
  showTheStepsView(run.lesson.steps[run.step]);
}
