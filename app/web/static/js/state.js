// The explorer's one state object, mirrored in the URL so any view can be shared or reloaded.

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
    const values = raw.split(",").filter(Boolean).map((part) => int.parse(part));
    return values.length && values.every((v) => v !== undefined) ? values : undefined;
  },
  format: (v) => v.join(","),
};

/** State key -> [URL parameter, type]. */
const FIELDS = {
  model: ["model", text],
  text: ["text", text],
  textPair: ["pair", text],
  layer: ["layer", int],
  head: ["head", int],
  view: ["view", text],
  colours: ["colours", choice("linear", "log")], // every map of weights: Heatmap, Follow, Average, Ablation, Compare
  query: ["q", int],
  overlay: ["heads", intList], // Token to token: the heads drawn together
  threshold: ["min", number], // Token to token: lines below this weight are hidden
  unscaled: ["noscale", flag], // Without √d: remove the 1/√d scale
  temperature: ["temp", number], // Without √d: the counterfactual temperature
  stat: ["stat", text], // Head roles: the statistic mapped over layers and heads
  sort: ["sort", text], // Head roles: the table's sort column, "-" first for descending
  find: ["find", text], // Find heads: "role:<role>", "rank:<statistic>:<order>" or "pair:<q>:<k>:<p>"
  summary: ["sum", text], // Follow a token: each layer's heads "mean" or "max"
  agg: ["agg", text], // Average & rollout: "average" or "rollout"
  residual: ["res", number], // Average & rollout: the rollout's identity share
  order: ["order", text], // Similar heads: "cluster" or "layer"
  ablate: ["off", text], // Ablation: the heads switched off, "layer.head, ..."
  ablation: ["offmode", text], // Ablation: "zero" or "mean"
  compare: ["cmp", text], // Compare: head B as "layer.head"
  compareText: ["cmptext", text], // Compare: B's text, when it is another
  compareModel: ["cmpmodel", text], // Compare: B's model, when it is another
  qkScope: ["qks", text], // Q-K space: "head" or "layer" (small multiples)
  qkMethod: ["qkm", text], // Q-K space: "pca" or "umap"
  generated: ["gen", int], // tokens of the prompt, when the text ends in a generated continuation
  lensToken: ["lt", text], // Logit lens: the token followed ("" = the model's top guess)
  lensShade: ["ls", choice("token", "top")], // Logit lens: colour by that token's probability or the top guess's
  lensCell: ["lc", text], // Logit lens: the cell opened, "row.column"
  dlaPosition: ["dp", int], // Direct attribution: the position explained (absent: the last)
  dlaTarget: ["dt", text], // Direct attribution: the target token ("" = the top guess)
  dlaContrast: ["dc", text], // Direct attribution: the contrast token ("" = none)
  dlaSource: ["ds", text], // Direct attribution: the head split by key, "layer.head"
  patchText: ["pc", text], // Patching: the corrupted text
  patchTarget: ["pt", text], // Patching: the metric's first token ("" = the clean top guess)
  patchContrast: ["pk", text], // Patching: its second token ("" = the corrupted top guess)
  patchExact: ["px", flag], // Patching: run exact patching too
  target: ["tg", text], // Decoder & cross: what an encoder-decoder's decoder reads
  decoderLayer: ["dl", int], // Decoder & cross: the decoder layer shown
};


/** Always written, defaults included: a link names what it shows even if a default changes. */
const ALWAYS = new Set(["model", "text", "layer", "head", "view"]);
/** A text whose URL form is longer than this travels in the fragment (#text=...), which the
 * browser never sends to the server: request lines stay short whatever the text. */
export const TEXT_IN_QUERY_LIMIT = 2000;

/** The URL's parameters: the query's, and the fragment's for the long text that lives there. */
function urlParams() {
  const params = new URLSearchParams(window.location.search);
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  if (!params.has("text") && fragment.has("text")) params.set("text", fragment.get("text"));
  return params;
}

/** views: the names a `view` parameter may take (the page's registry, app/web/explorer_views.py). */
export function createState(defaults, views) {
  const state = { ...defaults };
  const listeners = new Set();

  /** Reads the URL into the state; returns whether it named any state at all (a link, which
   * the page runs at once, with the example sentence where it names no text). */
  function readUrl() {
    const params = urlParams();
    let named = false;
    for (const [key, [name, type]] of Object.entries(FIELDS)) {
      if (!params.has(name)) continue;
      named = true;
      const value = type.parse(params.get(name));
      if (value === undefined || (key === "view" && !views.includes(value))) continue;
      state[key] = value;
    }
    return named;
  }

  function writeUrl() {
    const params = new URLSearchParams();
    const fragment = new URLSearchParams();
    for (const [key, [name, type]] of Object.entries(FIELDS)) {
      const value = state[key];
      if (value === null || value === undefined || value === "") continue;
      if (value === defaults[key] && !ALWAYS.has(key)) continue;
      params.set(name, type.format(value));
    }
    if (new URLSearchParams({ text: params.get("text") ?? "" }).toString().length > TEXT_IN_QUERY_LIMIT) {
      fragment.set("text", params.get("text"));
      params.delete("text");
    }
    const hash = fragment.size ? `#${fragment}` : "";
    window.history.replaceState(null, "", `${window.location.pathname}?${params}${hash}`);
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
