// Views that only some models can show (a language-model head, a decoder): whether the open
// model fits, and where it does not, why, with a button that opens one that does.

import { el } from "../dom.js";

/**
 * Whether the open model can show the view: `fits(model)` is true, false, or null while it
 * is not known (the model not loaded yet: the view tries). Where it is false, the panel's
 * `hide` parts are hidden and its summary says `why(model)` and offers the first available
 * model that fits. The notebook widget lists no models: it always tries.
 */
export function modelFits({ session, models, parts, set }, fits, why, hide = ["results"]) {
  const model = (models || []).find((m) => m.id === session.model);
  const ok = !model || fits(model) !== false;
  for (const name of hide) parts[name].hidden = !ok;
  if (ok) return true;
  const said = [why(model)];
  const other = models.find((m) => m.available && fits(m) === true);
  if (other) {
    const button = el("button", { text: `Switch to ${other.id}`, attrs: { type: "button" } });
    button.addEventListener("click", () => set({ model: other.id }));
    said.push(" ", button);
  }
  parts.summary.replaceChildren(...said);
  return false;
}
