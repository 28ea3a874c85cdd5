// A lesson's own page (/learn/<id>, or /learn/pasted with the whole lesson in the fragment):
// its steps, a Start button, and a link that shares it. ?step=n opens that step at once. After
// the lesson's last step it says so, with the next lesson and the lab.

import { api } from "../api.js";
import { $, el, readPageData, showError } from "../dom.js";
import { startLesson, takeFinished } from "../lesson.js";

const page = readPageData();

async function lessonOf() {
  if (page.id) return api.lesson(page.id);
  const text = new URLSearchParams(window.location.hash.slice(1)).get("lesson");
  if (!text) throw new Error("This link carries no lesson: paste one on the Learn page to make one.");
  return api.checkLesson(text); // checked as the server checks a served one
}

function say(...parts) {
  const notice = $("#lesson-notice");
  notice.replaceChildren(...parts);
  notice.hidden = false;
}

const link = (href, text) => el("a", { text, attrs: { href } });

/** The lesson after this one on /learn (GET /api/lessons' order), or null: the last, or pasted. */
async function nextLesson() {
  if (!page.id) return null;
  try {
    const { lessons } = await api.lessons();
    return lessons[lessons.findIndex((l) => l.id === page.id) + 1] ?? null;
  } catch {
    return null; // the message then offers the lab and the list of lessons
  }
}

async function sayFinished(lesson) {
  const next = await nextLesson();
  const lab = [link("/lab", "the lab"), ", which teaches each idea on a page of its own"];
  if (next)
    say(
      `You finished ${lesson.title}. Next: the lesson `,
      link(`/learn/${next.id}`, `${next.title} →`),
      ", or ",
      ...lab,
      ".",
    );
  else
    say(
      `You finished ${lesson.title}. Go on with `,
      ...lab,
      ", or choose another lesson on ",
      link("/learn", "Learn"),
      ".",
    );
  $("#lesson-start").textContent = "Start again";
}

/** ?step=n: opens step n (from 1) at once; any other value is said to name no step. */
function openAskedStep(lesson, home) {
  const asked = new URLSearchParams(window.location.search).get("step");
  if (asked === null) return;
  const count = lesson.steps.length;
  if (/^\d+$/.test(asked) && Number(asked) >= 1 && Number(asked) <= count) {
    startLesson(lesson, Number(asked) - 1, home);
    return;
  }
  const steps = count === 1 ? "its one step is 1 (?step=1)" : `its steps are 1 to ${count} (?step=1 … ?step=${count})`;
  say(`This link asks for step “${asked}”, which this lesson does not have: ${steps}.`);
}

async function show() {
  let lesson;
  try {
    lesson = await lessonOf();
  } catch (err) {
    showError($("#lesson-error"), err.message);
    $("#lesson-start").hidden = true;
    return;
  }
  const home = `${window.location.pathname}${window.location.hash}`;
  document.title = `${lesson.title} · Attention Atlas`;
  $("#lesson-title").textContent = lesson.title;
  $("#lesson-summary").textContent = lesson.summary;
  $("#lesson-steps").replaceChildren(
    ...lesson.steps.map((step, i) => {
      const item = document.createElement("li");
      const open = document.createElement("button");
      open.type = "button";
      open.className = "link";
      open.textContent = "Open this step";
      open.addEventListener("click", () => startLesson(lesson, i, home));
      const caption = document.createElement("span");
      caption.textContent = `${step.caption}${step.question ? ` Question: ${step.question.ask}` : ""} `;
      item.append(caption, open);
      return item;
    }),
  );
  $("#lesson-start").addEventListener("click", () => startLesson(lesson, 0, home));
  const share = $("#lesson-share");
  share.hidden = false;
  share.addEventListener("click", async () => {
    await navigator.clipboard?.writeText(window.location.href).catch(() => {});
    $("#lesson-share-status").textContent =
      `The link: ${window.location.href.length.toLocaleString("en")} characters, copied.`;
  });
  if (takeFinished(home)) await sayFinished(lesson);
  openAskedStep(lesson, home);
}

show();
