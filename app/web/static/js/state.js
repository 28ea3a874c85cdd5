// A page's one state object, mirrored in the URL so what it shows can be shared or reloaded:
// the explorer's (its fields from the view registry), and the other pages' that keep state in links.

const int = { parse: (raw) => (/^\d+$/.test(raw) ? Number(raw) : undefined), format: String };
const text = { parse: (raw) => raw, format: String };
const number = {
  parse: (raw) => (Number.isFinite(Number(raw)) && raw.trim() !== "" ? Number(raw) : undefined),
  format: String,
};
/** One of `values`; anything else is not read (the default stands). */
const choice = (...values) => ({ parse: (raw) => (values.includes(raw) ? raw : undefined), format: String });
const flag = { parse: (raw) => (raw === "1" ? true : raw === "0" ? false : undefined), format: (v) => (v ? "1" : "0") };
const intList = {
  parse: (raw) => {
    const values = raw
      .split(",")
      .filter(Boolean)
      .map((part) => int.parse(part));
    return values.length && values.every((v) => v !== undefined) ? values : undefined;
  },
  format: (v) => v.join(","),
};

/** A registry field's type by name (app/web/explorer_views.py, Field.type). */
const TYPES = { text, int, number, flag, ints: intList };

/** The registry's fields ([{key, param, type, default, choices}], the page's data) as
 * state key -> [URL parameter, type], in the registry's order. */
function fieldTypes(fields) {
  return Object.fromEntries(
    fields.map((f) => [f.key, [f.param, f.type === "choice" ? choice(...f.choices) : TYPES[f.type]]]),
  );
}

/** The explorer's keys written even at their defaults: a link names what it shows even if a
 * default changes. */
const EXPLORER_ALWAYS = ["model", "text", "layer", "head", "view"];

/** Text fields named by their URL parameters: {param: default} -> fields for createState. */
export function textFields(defaults) {
  return Object.entries(defaults).map(([key, value]) => ({ key, param: key, type: "text", default: value }));
}
/** A text whose URL form is longer than this travels in the fragment (#text=...), which the
 * browser never sends to the server: request lines stay short whatever the text. */
export const TEXT_IN_QUERY_LIMIT = 2000;

/** The URL's parameters: the query's, and the fragment's for the long text and the fields
 * that live there (`hidden`, their parameters). */
function urlParams(hidden) {
  const params = new URLSearchParams(window.location.search);
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  for (const name of ["text", ...hidden])
    if (!params.has(name) && fragment.has(name)) params.set(name, fragment.get(name));
  return params;
}

/**
 * A page's state. `fields`: [{key, param, type, default, choices, fragment}] (the explorer's are
 * its registry's rows, app/web/explorer_views.py; `fragment`: always in the fragment, never sent
 * to the server); `overrides`: defaults the page sets itself (the explorer's model and example
 * text). Options: `views`, the names a `view` parameter may take; `always`, the keys written even
 * at their default; `keepEmpty`, write an emptied field as `name=` rather than leave it out (a
 * cleared box stays cleared in the link); `keepOthers`, leave the URL's other parameters as they
 * are (a lab page whose forms each keep their own).
 */
export function createState(
  fields,
  overrides = {},
  { views = null, always = EXPLORER_ALWAYS, keepEmpty = false, keepOthers = false } = {},
) {
  const FIELDS = fieldTypes(fields);
  const HIDDEN = new Set(fields.filter((f) => f.fragment).map((f) => f.param));
  const ALWAYS = new Set(always);
  const defaults = { ...Object.fromEntries(fields.map((f) => [f.key, f.default])), ...overrides };
  const state = { ...defaults };
  const listeners = new Set();

  /** Reads the URL into the state; returns whether it named any state at all (a link, which
   * the page runs at once, with the example sentence where it names no text). */
  function readUrl() {
    const params = urlParams(HIDDEN);
    let named = false;
    for (const [key, [name, type]] of Object.entries(FIELDS)) {
      if (!params.has(name)) continue;
      named = true;
      const value = type.parse(params.get(name));
      if (value === undefined || (key === "view" && views && !views.includes(value))) continue;
      state[key] = value;
    }
    return named;
  }

  function writeUrl() {
    const params = new URLSearchParams(keepOthers ? window.location.search : "");
    const fragment = new URLSearchParams(keepOthers ? window.location.hash.slice(1) : "");
    let touched = false; // whether the fragment holds any of ours: else a page's own #anchor stays as it is
    for (const [key, [name, type]] of Object.entries(FIELDS)) {
      const value = state[key];
      params.delete(name);
      if (fragment.has(name)) touched = true;
      fragment.delete(name);
      if (value === null || value === undefined || (value === "" && !keepEmpty)) continue;
      if (value === defaults[key] && !ALWAYS.has(key)) continue;
      if (HIDDEN.has(name)) touched = true;
      (HIDDEN.has(name) ? fragment : params).set(name, type.format(value));
    }
    if (new URLSearchParams({ text: params.get("text") ?? "" }).toString().length > TEXT_IN_QUERY_LIMIT) {
      touched = true;
      fragment.set("text", params.get("text"));
      params.delete("text");
    }
    const hash = keepOthers && !touched ? window.location.hash : fragment.size ? `#${fragment}` : "";
    const query = keepOthers && !params.size ? "" : `?${params}`; // a lab page at its defaults keeps a bare address
    window.history.replaceState(null, "", `${window.location.pathname}${query}${hash}`);
  }

  return {
    /** A frozen copy: views read the state, they never write into it. */
    get: () => Object.freeze({ ...state }),
    readUrl,
    writeUrl,
    /** Changes the state; returns the keys that changed (listeners hear of those). */
    set(patch) {
      const changed = Object.keys(patch).filter((k) => JSON.stringify(state[k]) !== JSON.stringify(patch[k]));
      if (!changed.length) return changed;
      Object.assign(state, patch);
      writeUrl();
      for (const fn of listeners) fn(state, changed);
      return changed;
    },
    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
}
