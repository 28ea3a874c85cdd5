// Lazily fetched attention data for one (model, text, pair), in binary: a layer at a time (the
// grid's thumbnails a batch of layers at a time). Exact float32 maps back the heatmap and the
// exports; uint8 maps (error <= 1/510) back the thumbnails of the all-heads grid, so even 30
// layers x 9 heads x 512 tokens stay light.

import { api } from "./api.js";
import { decodeMaps } from "./binary.js";

const EXACT_BYTES = 48 * 2 ** 20; // decoded f32 layers kept (a 512-token MiniLM layer is 12.6 MB)
const DETAIL_CELLS = 2_000_000; // detail matrices kept, in cells (each a JS number in an array)
const AGGREGATE_BYTES = 16 * 2 ** 20; // decoded head averages and rollouts kept
const ANSWERS_KEPT = 32; // small whole-text answers kept (each counts 1)
const FOLLOW_CELLS = 1_500_000; // followed tokens kept, in cells (a 512-token SmolLM2 token: 280k)

/** A Map that forgets its oldest entries once their summed `size` passes `limit` (keeps one). */
class BoundedCache extends Map {
  constructor(limit) {
    super();
    this.limit = limit;
    this.sizes = new Map();
  }

  put(key, value, size) {
    this.delete(key);
    this.set(key, value);
    this.sizes.set(key, size);
    let total = [...this.sizes.values()].reduce((a, b) => a + b, 0);
    for (const old of this.keys()) {
      if (total <= this.limit || this.size <= 1) break;
      total -= this.sizes.get(old);
      this.delete(old);
      this.sizes.delete(old);
    }
  }
}

export class AttentionSession {
  constructor(model, text, textPair) {
    this.model = model;
    this.text = text;
    this.textPair = textPair || null;
    this.meta = null; // tokens, num_layers, num_heads, causal, segments ...
    // Bounded, so a long input never piles up hundreds of MB (and long GC pauses) in the tab.
    this.exact = new BoundedCache(EXACT_BYTES); // layer -> decoded f32 maps (all heads)
    this.details = new BoundedCache(DETAIL_CELLS);
    this.aggregates = new BoundedCache(AGGREGATE_BYTES);
    this.followed = new BoundedCache(FOLLOW_CELLS);
    this.answers = new BoundedCache(ANSWERS_KEPT); // statistics, similarity and searches: small
    this.controller = new AbortController();
  }

  /** Tokens in this input (an upper bound before the first answer). */
  get length() {
    return this.meta ? this.meta.tokens.length : 512;
  }

  body(extra) {
    const body = { model: this.model, text: this.text, ...extra };
    if (this.textPair) body.text_pair = this.textPair;
    return body;
  }

  abort() {
    this.controller.abort();
  }

  /** The decoded answer for `layers` in `format` ({meta, map(i, head)} for the i-th of them);
   * the first answer gives the session its meta. */
  fetchMaps(layers, format, extra = {}) {
    return api.attention(this.body({ layers, format, ...extra }), { signal: this.controller.signal }).then((buffer) => {
      const decoded = decodeMaps(buffer);
      this.meta = this.meta || decoded.meta;
      return decoded;
    });
  }

  /** Exact maps of one layer: {meta, map(0, head)}, kept while they fit in EXACT_BYTES. */
  layer(layer) {
    const bytes = (this.meta?.num_heads ?? 12) * this.length ** 2 * 4;
    return this.remember(this.exact, layer, bytes, () => this.fetchMaps([layer], "f32"));
  }

  /** Quantised maps of several layers in one answer, for thumbnails: {side, cell, map(i, head)}
   * for the i-th of `layers`, each map side x side. With cell above 1 the server sends each
   * cell x cell block's largest weight (side = ceil(tokens / cell)); not kept, the canvases
   * hold the picture. */
  coarseLayers(layers, cell = 1) {
    return this.fetchMaps(layers, "u8", cell > 1 ? { cell, reduce: "max" } : {}).then((decoded) => ({
      side: decoded.meta.shape[3],
      cell: decoded.meta.cell,
      map: decoded.map,
    }));
  }

  /** A cached promise of `fetch()` under `key` in `store` (forgotten if it fails). */
  remember(store, key, size, fetch) {
    if (!store.has(key)) {
      const promise = fetch();
      store.put(key, promise, size);
      promise.catch(() => store.delete(key));
    }
    return store.get(key);
  }

  /** Every head's statistics and roles (POST /api/attention/heads); `extra` may add `marked`
   * positions (and the `read_from` rows), whose share of each head's attention comes too. */
  heads(extra = {}) {
    const key = Object.keys(extra).length ? `heads:${JSON.stringify(extra)}` : "heads";
    return this.remember(this.answers, key, 1, () => api.heads(this.body(extra), { signal: this.controller.signal }));
  }

  /** How alike every two heads are (POST /api/attention/similarity). */
  similarity() {
    return this.remember(this.answers, "similarity", 1, () =>
      api.similarity(this.body({}), { signal: this.controller.signal }),
    );
  }

  /** Heads found by a query of POST /api/attention/search. */
  search(query, limit = 1000) {
    return this.remember(this.answers, `search:${JSON.stringify(query)}`, 1, () =>
      api.search(this.body({ query, limit }), { signal: this.controller.signal }),
    );
  }

  /** The model's own top-5 at each position or mask token (POST /api/attention/predictions). */
  predictions() {
    return this.remember(this.answers, "predictions", 1, () =>
      api.predictions(this.body({ top_k: 5 }), { signal: this.controller.signal }),
    );
  }

  /** Heads switched off against the unablated run (POST /api/attention/ablate). */
  ablate({ heads, mode, layer, head }) {
    return this.remember(this.answers, `ablate:${JSON.stringify([heads, mode, layer, head])}`, 1, () =>
      api.ablate(this.body({ heads, mode, layer, head }), { signal: this.controller.signal }),
    );
  }

  /** The logit lens (POST /api/attention/lens): token is {text} or {id}, or null (top guess). */
  lens(token) {
    const extra = token ? { token } : {};
    return this.remember(this.answers, `lens:${JSON.stringify(extra)}`, 1, () =>
      api.lens(this.body({ top_k: 5, ...extra }), { signal: this.controller.signal }),
    );
  }

  /** An encoder-decoder's decoder self-attention and cross-attention over `target`, one
   * decoder layer (POST /api/attention/decoder). */
  decoder(target, layer) {
    return this.remember(this.answers, `decoder:${JSON.stringify([target, layer])}`, 1, () =>
      api.decoder(this.body({ target, layer }), { signal: this.controller.signal }),
    );
  }

  /** One score taken apart (POST /api/attention/trace): {layer, head, query, key, contrast, top}. */
  trace(extra) {
    return this.remember(this.answers, `trace:${JSON.stringify(extra)}`, 1, () =>
      api.trace(this.body(extra), { signal: this.controller.signal }),
    );
  }

  /** Direct logit attribution (POST /api/attention/attribution): {position, target, contrast, source}. */
  attribution(extra) {
    return this.remember(this.answers, `attribution:${JSON.stringify(extra)}`, 1, () =>
      api.attribution(this.body(extra), { signal: this.controller.signal }),
    );
  }

  /** Attribution patching from a corrupted text (POST /api/attention/patching). */
  patching(extra) {
    return this.remember(this.answers, `patching:${JSON.stringify(extra)}`, 1, () =>
      api.patching(this.body(extra), { signal: this.controller.signal }),
    );
  }

  /** Edges between heads (POST /api/attention/circuit): {by, inputs, top, corrupted, ...}. */
  circuit(extra) {
    return this.remember(this.answers, `circuit:${JSON.stringify(extra)}`, 1, () =>
      api.circuit(this.body(extra), { signal: this.controller.signal }),
    );
  }

  /** Exact patching (POST /api/attention/patching/exact), streamed: onLine gets each progress
   * line; `signal` stops it (the server stops within a layer). A finished answer is kept. */
  async patchingExact(extra, onLine, signal) {
    const key = `exact:${JSON.stringify(extra)}`;
    const kept = this.answers.get(key);
    if (kept) return kept;
    const stop = AbortSignal.any([signal, this.controller.signal]);
    const last = await api.patchingExact(this.body(extra), onLine, { signal: stop });
    if (last?.event !== "done") throw new Error(last?.detail || "exact patching stopped");
    this.answers.put(key, last, 1);
    return last;
  }

  /** The open head against another (POST /api/attention/compare): {layer, head, other}. */
  compare(body) {
    return this.remember(this.answers, `compare:${JSON.stringify(body)}`, 1, () =>
      api.compare(this.body(body), { signal: this.controller.signal }),
    );
  }

  /** Queries and keys of a head, or of every head of a layer, in 2-D (POST /api/attention/qkspace). */
  qkspace({ layer, head, method }) {
    return this.remember(this.answers, `qkspace:${JSON.stringify([layer, head, method])}`, 1, () =>
      api.qkspace(this.body({ layer, head, method }), { signal: this.controller.signal }),
    );
  }

  /** One token through every layer and head (POST /api/attention/token). */
  follow(token) {
    const n = this.length;
    const cells = 2 * (this.meta?.num_layers ?? 12) * ((this.meta?.num_heads ?? 12) + 2) * n;
    return this.remember(this.followed, token, cells, () =>
      api.follow(this.body({ token }), { signal: this.controller.signal }),
    );
  }

  /** A layer's head average or rollout, exact (float32): {meta, map(0, 0)}. */
  aggregate(kind, layer, residual) {
    const n = this.length;
    return this.remember(this.aggregates, JSON.stringify([kind, layer, residual]), n * n * 4, () =>
      api
        .aggregate(this.body({ kind, layers: [layer], residual, format: "f32" }), { signal: this.controller.signal })
        .then(decodeMaps),
    );
  }

  /** One head in depth (q, k, v, scores, mask, counterfactual) from the replay API. */
  detail({ layer, head, query = null, scale = true, temperature = 1, fields = null }) {
    const key = JSON.stringify([layer, head, query, scale, temperature, fields]);
    if (!this.details.has(key)) {
      const body = this.body({ layer, head, scale, temperature });
      if (fields) body.fields = fields; // only what the view draws: 5 MB a matrix at 512 tokens
      if (query !== null) body.query = query;
      const promise = api.detail(body, { signal: this.controller.signal });
      const n = this.length;
      this.details.put(key, promise, (fields ? fields.length : 10) * n * n);
      promise.catch(() => this.details.delete(key));
    }
    const hit = this.details.get(key);
    this.details.put(key, hit, this.details.sizes.get(key)); // most recently used
    return hit;
  }
}
