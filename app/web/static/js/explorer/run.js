// The explorer's runs: a text sent to the server (its model loaded first), the running
// request and the page's busy state, and the session the views read their data from.

import { api } from "../api.js";
import { AttentionSession } from "../data.js";
import { fillIndexSelect, el as make, showError } from "../dom.js";

/**
 * Runs the state's text. `el` holds the page's controls, `page` its data (max_text_chars),
 * `notice(text)` and `setStatus(text, fraction)` say what happened, `render()` draws the shown
 * view and `showTokens(meta)` the text's tokens. Returns the runner: `run()`, `loadModels()`,
 * `describeModel()`, `tooLong()`, `waitUntilLoaded(model)`, `redraw()` (a render the next run
 * waits for), `scrollNext()` (the next run's first picture comes into view) and what the views
 * read: `session`, `models`, `projections`, `chosen`.
 */
export function createRunner({ state, el, page, notice, setStatus, render, showTokens }) {
  let models = [];
  let projections = ["pca"]; // what POST /api/attention/qkspace can use on this server
  let session = null;
  let scrollToResult = false; // after a sentence is run: its first picture comes into view (a page opens at its top)
  let rendering = Promise.resolve(); // the latest render: a run waits for its first picture
  function modelInfo(id) {
    return models.find((m) => m.id === id);
  }

  /** Texts longer than the views take (every map at once, up to full_map_tokens) open in Deep
   * zoom, which reads a window at a time: says so, with a link that carries the text. */
  function offerDeepZoom(model, text, tokens) {
    const href = `/zoom?${new URLSearchParams({ model })}#${new URLSearchParams({ text })}`;
    const count = tokens ? `${tokens.toLocaleString("en")} tokens` : "too long";
    el.notice.replaceChildren(
      `This text is ${count}: the explorer's views read every map of a text at once and take up to ${modelInfo(model).full_map_tokens} tokens. `,
      make("a", { text: "Open it in Deep zoom", attrs: { href } }),
      ", which reads the model's whole context a window at a time.",
    );
    el.notice.hidden = false;
  }

  /** A text longer than the explorer takes: Deep zoom on this model where the model takes it,
   * else on a model that does (its count is this tokenizer's: about), else the server's refusal. */
  function offerLonger(model, text, tokens, refusal) {
    const info = modelInfo(model);
    if (tokens <= (info?.max_tokens ?? 0)) {
      offerDeepZoom(model, text, tokens);
      return;
    }
    const other = models.find((m) => m.available && m.replay !== false && (m.max_tokens ?? 0) >= tokens);
    if (!other) {
      showError(el.error, refusal);
      return;
    }
    const href = `/zoom?${new URLSearchParams({ model: other.id })}#${new URLSearchParams({ text })}`;
    el.notice.replaceChildren(
      `This text is ${tokens.toLocaleString("en")} tokens; ${model} takes at most ${info.max_tokens.toLocaleString("en")}. Shorten it, or `,
      make("a", { text: `open it in Deep zoom with ${other.id}`, attrs: { href } }),
      `, which takes up to ${other.max_tokens.toLocaleString("en")} tokens.`,
    );
    el.notice.hidden = false;
  }

  async function loadModels() {
    const list = await api.models();
    models = list.models;
    projections = list.projections;
    el.model.replaceChildren(
      ...models.map((m) => {
        const option = new Option(`${m.id}${m.available ? "" : " (unavailable)"}`, m.id);
        option.disabled = !m.available;
        if (!m.available) option.title = m.unavailable_reason;
        return option;
      }),
    );
    const asked = state.get().model;
    const known = modelInfo(asked);
    if (!known?.available) {
      const fallback = list.default_encoder;
      notice(
        known
          ? `The link asked for ${asked}, which cannot be loaded on this server (${known.unavailable_reason}); showing ${fallback} instead.`
          : `The link asked for a model this server does not have (“${asked.slice(0, 120)}”); showing ${fallback} instead.`,
      );
      state.set({ model: fallback });
    }
    el.model.value = state.get().model;
    describeModel();
  }

  function describeModel() {
    const info = modelInfo(el.model.value);
    if (!info) return;
    const shape = info.num_layers ? `${info.num_layers} layers × ${info.num_heads} heads` : "size known once loaded";
    const shared = info.num_kv_heads === 1 ? "1 key/value head (MQA)" : `${info.num_kv_heads} key/value heads (GQA)`;
    const gqa = info.num_kv_heads && info.num_kv_heads < info.num_heads ? `, ${shared}` : "";
    const mapsOnly =
      info.replay === false
        ? ` Maps only: the views that replay a head (Query · Key, Step by step, Mask, Without √d, Value-weighted, Q-K space) cannot, because ${info.replay_refusal ?? "its heads are not replayed"}.`
        : "";
    const limits =
      info.full_map_tokens && info.max_tokens > info.full_map_tokens
        ? `the explorer takes up to ${info.full_map_tokens} tokens (Deep zoom, ${info.max_tokens.toLocaleString("en")})`
        : `up to ${info.full_map_tokens ?? info.max_tokens ?? "?"} tokens`;
    el.modelNote.textContent = `${info.description} ${shape}${gqa}; ${limits}.${mapsOnly}`;
    el.pairLabel.hidden = info.causal === true;
    el.generate.hidden = !(info.causal === true && info.predicts !== "none");
  }

  async function waitUntilLoaded(modelId) {
    let status = await api.modelStatus(modelId);
    if (status.state === "ready") return;
    status = await api.loadModel(modelId);
    while (status.state === "loading" || status.state === "idle") {
      setStatus(`Loading ${modelId}: ${status.stage || "starting"}…`, status.fraction);
      await new Promise((resolve) => setTimeout(resolve, 300));
      status = await api.modelStatus(modelId);
    }
    if (status.state === "failed") throw new Error(status.error);
  }

  let runs = 0; // each run's number: a run that a newer one replaced stops at its next await

  async function run() {
    const mine = ++runs;
    const stale = () => mine !== runs;
    const { model, text, textPair } = state.get();
    el.text.value = text; // the form shows what runs (a link, or the induction test, may set it)
    el.textPair.value = textPair || "";
    el.model.value = model;
    showError(el.error, "");
    if (!text.trim()) {
      showError(el.error, "Type a sentence first.");
      return;
    }
    if (tooLong()) {
      el.result.hidden = true;
      return;
    }
    el.run.disabled = true;
    if (session) session.abort();
    try {
      await waitUntilLoaded(model);
      // A model's layer and head counts, and what its head predicts, are known once it has
      // loaded: ask again until they are (the views that read the head decide by `predicts`).
      const known = modelInfo(model);
      if (!stale() && (!known?.num_layers || known.predicts == null)) await refreshModels();
      if (stale()) return;
      const info = modelInfo(model);
      const asked = state.get();
      // No head named: open the clearest one (of the named layer, where a layer is named).
      const choose = asked.head === null;
      const layer = asked.layer === null ? 0 : Math.min(asked.layer, info.num_layers - 1);
      const head = choose ? 0 : Math.min(asked.head, info.num_heads - 1);
      const changes = [];
      if (asked.layer !== null && layer !== asked.layer)
        changes.push(`layer ${asked.layer} (it has layers 0–${info.num_layers - 1}): showing layer ${layer}`);
      if (!choose && head !== asked.head)
        changes.push(`head ${asked.head} (it has heads 0–${info.num_heads - 1}): showing head ${head}`);
      if (changes.length) notice(`This model has no ${changes.join("; and no ")}.`);
      if (!choose) state.set({ layer, head });
      setStatus("Running the model…");
      const current = new AttentionSession(model, text, info.causal ? null : textPair);
      session = current;
      chosen = null;
      el.headWhy.textContent = "";
      const first = await current.layer(layer);
      if (stale()) return;
      const meta = first.meta;
      if (meta.tokens.length > info.full_map_tokens) {
        session.abort();
        session = null;
        setStatus("");
        el.result.hidden = true;
        offerDeepZoom(model, text, meta.tokens.length);
        return;
      }
      const opened = choose ? await chooseHead(current, asked.layer === null ? null : layer) : { layer, head };
      if (stale()) return;
      fillPickers(meta, opened);
      showTokens(meta);
      el.result.hidden = false;
      const { generated } = state.get();
      const made =
        generated !== null && generated < meta.tokens.length
          ? ` (the last ${meta.tokens.length - generated} generated, marked)`
          : "";
      setStatus(
        `${meta.tokens.length} tokens${made} · forward pass ${meta.forward_ms.toFixed(0)} ms${meta.cached ? " (cached)" : ""}`,
      );
      if (!state.set(opened).length) rendering = render();
      await rendering;
      if (stale()) return;
      if (scrollToResult) el.result.scrollIntoView({ block: "start" }); // the first picture, in view
      scrollToResult = false;
    } catch (err) {
      if (err.name === "AbortError" || stale()) return;
      setStatus("");
      const long = err.status === 422 && /the text is ([\d,]+) tokens long/.exec(err.message);
      if (long) {
        el.result.hidden = true; // never the last text's picture under this text's refusal
        offerLonger(model, text, Number(long[1].replace(/,/g, "")), err.message);
        return;
      }
      showError(el.error, err.message);
    } finally {
      if (!stale()) el.run.disabled = false;
    }
  }

  async function refreshModels() {
    const list = await api.models();
    models = list.models;
    describeModel();
  }

  function fillPickers(meta, { layer, head }) {
    fillIndexSelect(el.layer, meta.num_layers, layer);
    fillIndexSelect(el.head, meta.num_heads, head);
  }

  let chosen = null; // {layer, head, role, statistic, score, threshold}: the head opened by the rule

  /** The head with the clearest specific role on this text (HeadStatistics.clearest, server
   * side: each role's score as a multiple of its threshold, sink and broad aside); layer 0
   * head 0 where no head has one, or where the statistics cannot be had. */
  async function chooseHead(current, layer) {
    try {
      chosen = (await current.heads(layer === null ? {} : { layers: [layer] })).clearest;
    } catch (err) {
      if (err.name === "AbortError") throw err;
      chosen = null;
    }
    if (chosen) chosen.scope = layer === null ? "on this text" : `of layer ${layer} on this text`;
    return chosen ? { layer: chosen.layer, head: chosen.head } : { layer: layer ?? 0, head: 0 };
  }

  /** Over-long text is refused with the limit, never cut (the text box has no maxlength). */
  function tooLong() {
    const chars = [...el.text.value].length + [...el.textPair.value].length; // code points, as the server counts
    const over = chars > page.max_text_chars;
    el.text.setAttribute("aria-invalid", String(over));
    showError(
      el.error,
      over
        ? `This text is ${chars.toLocaleString("en")} characters; the server takes up to ${page.max_text_chars.toLocaleString("en")}. Shorten it: nothing was cut.`
        : "",
    );
    return over;
  }

  return {
    run,
    loadModels,
    describeModel,
    tooLong,
    waitUntilLoaded,
    redraw() {
      rendering = render();
    },
    scrollNext() {
      scrollToResult = true;
    },
    get session() {
      return session;
    },
    get models() {
      return models;
    },
    get projections() {
      return projections;
    },
    get chosen() {
      return chosen;
    },
  };
}
