// The Learn page: the lessons, and a lesson a teacher pastes, checked, then played from a link
// that carries the whole lesson in its fragment (never sent to the server; works offline).

import { api } from "../api.js";
import { $, readPageData, showError } from "../dom.js";

const page = readPageData();

$("#paste-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  showError($("#paste-error"), "");
  try {
    const lesson = await api.checkLesson($("#paste-text").value);
    window.location.assign(`/learn/pasted#${new URLSearchParams({ lesson: JSON.stringify(lesson) })}`);
  } catch (err) {
    showError($("#paste-error"), err.message);
  }
});

$("#paste-example").addEventListener("click", async () => {
  const lesson = await api.lesson(page.example);
  $("#paste-text").value = JSON.stringify({ ...lesson, id: "my-lesson", title: `My copy of ${lesson.title}` }, null, 2);
});
