// A lesson's own page (/learn/<id>, or /learn/pasted with the whole lesson in the fragment):
// its steps, a Start button, and a link that shares it. ?step=n opens that step at once.

import { api } from "../api.js";
import { $, readPageData, showError } from "../dom.js";
import { startLesson } from "../lesson.js";

const page = readPageData();

async function lessonOf() {
  if (page.id) return api.lesson(page.id);
  const text = new URLSearchParams(window.location.hash.slice(1)).get("lesson");
  if (!text) throw new Error("This link carries no lesson: paste one on the Learn page to make one.");
  return api.checkLesson(text); // checked as the server checks a served one
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
    $("#lesson-share-status").textContent = `The link: ${window.location.href.length.toLocaleString("en")} characters, copied.`;
  });
  const step = Number(new URLSearchParams(window.location.search).get("step"));
  if (Number.isInteger(step) && step >= 1 && step <= lesson.steps.length) startLesson(lesson, step - 1, home);
}

show();
