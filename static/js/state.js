// The explorer's one state object, mirrored in the URL so any view can be shared or reloaded.

const URL_KEYS = { model: "model", text: "text", textPair: "pair", layer: "layer", head: "head", view: "view", query: "q" };
const NUMERIC = new Set(["layer", "head", "query"]);

export const VIEWS = ["heatmap", "grid", "lines", "qk", "mask", "whatif", "steps"];

export function createState(defaults) {
  const state = { ...defaults };
  const listeners = new Set();

  function readUrl() {
    const params = new URLSearchParams(window.location.search);
    for (const [key, name] of Object.entries(URL_KEYS)) {
      if (!params.has(name)) continue;
      const raw = params.get(name);
      if (NUMERIC.has(key)) {
        const n = Number.parseInt(raw, 10);
        if (Number.isFinite(n) && n >= 0) state[key] = n;
      } else if (key === "view") {
        if (VIEWS.includes(raw)) state.view = raw;
      } else {
        state[key] = raw;
      }
    }
    return params.has("text");
  }

  function writeUrl() {
    const params = new URLSearchParams();
    for (const [key, name] of Object.entries(URL_KEYS)) {
      const value = state[key];
      if (value === null || value === undefined || value === "") continue;
      params.set(name, String(value));
    }
    const url = `${window.location.pathname}?${params.toString()}`;
    window.history.replaceState(null, "", url);
  }

  return {
    get: () => state,
    readUrl,
    set(patch) {
      const changed = Object.keys(patch).filter((k) => state[k] !== patch[k]);
      if (!changed.length) return;
      Object.assign(state, patch);
      writeUrl();
      for (const fn of listeners) fn(state, changed);
    },
    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
}
