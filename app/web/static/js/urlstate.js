// A lab page's inputs, kept in the URL: a reload or a shared link shows the same thing.

/** What a page runs on: in its link even at the page's default, so a link names it. */
const ALWAYS = new Set(["model", "text", "a", "b"]);

function valueOf(input) {
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
  const defaults = Object.fromEntries(Object.entries(fields).map(([name, input]) => [name, valueOf(input)]));
  const params = new URLSearchParams(window.location.search);
  for (const [name, input] of Object.entries(fields)) {
    if (!params.has(name)) continue;
    if (input.type === "checkbox") input.checked = params.get(name) === "1";
    else input.value = params.get(name);
  }
  const write = () => {
    const out = new URLSearchParams(window.location.search);
    for (const [name, input] of Object.entries(fields)) {
      if (valueOf(input) !== defaults[name] || ALWAYS.has(name)) out.set(name, valueOf(input));
      else out.delete(name);
    }
    const query = out.toString();
    window.history.replaceState(null, "", `${window.location.pathname}${query ? `?${query}` : ""}${window.location.hash}`);
  };
  for (const input of Object.values(fields)) {
    input.addEventListener("input", write);
    input.addEventListener("change", write);
  }
  write();
}
