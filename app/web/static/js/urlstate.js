// A lab page's inputs, kept in the URL: a reload or a shared link shows the same thing. A thin
// binding of a form's inputs to the pages' one URL state (state.js, createState).

import { createState, textFields } from "./state.js";

/** What a page runs on: in its link even at the page's default, so a link names it. */
const ALWAYS = ["model", "text", "a", "b"];

function inputValue(input) {
  return input.type === "checkbox" ? (input.checked ? "1" : "0") : input.value;
}

/**
 * fields: {urlParameter: inputElement}. Values the URL names are put into the inputs now;
 * afterwards every change is written back (values still at the page's defaults are left out,
 * but for ALWAYS). A page may keep several forms' fields (their names distinct): each writes
 * its own and leaves the others'. Call it after the page has filled its defaults, before it
 * first computes.
 */
export function keepInputsInUrl(fields) {
  const inputs = Object.entries(fields);
  const values = () => Object.fromEntries(inputs.map(([name, input]) => [name, inputValue(input)]));
  const state = createState(textFields(values()), {}, { always: ALWAYS, keepEmpty: true, keepOthers: true });
  state.readUrl();
  for (const [name, input] of inputs) {
    const value = state.get()[name];
    if (input.type === "checkbox") input.checked = value === "1";
    else input.value = value;
  }
  const write = () => state.set(values());
  for (const [, input] of inputs) {
    input.addEventListener("input", write);
    input.addEventListener("change", write);
  }
  state.writeUrl();
}
