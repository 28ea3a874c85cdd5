// Lazily fetched attention data for one (model, text, pair): one layer at a time, in binary.
// Exact float32 maps back the heatmap and the exports; uint8 maps (error <= 1/510) back the
// thumbnails of the all-heads grid, so even 30 layers x 9 heads x 512 tokens stay light.

import { api } from "./api.js";
import { decodeMaps } from "./binary.js";

export class AttentionSession {
  constructor(model, text, textPair) {
    this.model = model;
    this.text = text;
    this.textPair = textPair || null;
    this.meta = null; // tokens, num_layers, num_heads, causal, segments ...
    this.exact = new Map(); // layer -> decoded f32 maps (all heads), kept for the session
    this.details = new Map();
    this.controller = new AbortController();
  }

  body(extra) {
    const body = { model: this.model, text: this.text, ...extra };
    if (this.textPair) body.text_pair = this.textPair;
    return body;
  }

  abort() {
    this.controller.abort();
  }

  async fetchLayer(layer, format, store) {
    if (!store.has(layer)) {
      const promise = api
        .attention(this.body({ layers: [layer], format }), { signal: this.controller.signal })
        .then((buffer) => {
          const decoded = decodeMaps(buffer);
          this.meta = this.meta || decoded.meta;
          return decoded;
        });
      store.set(layer, promise);
      promise.catch(() => store.delete(layer));
    }
    return store.get(layer);
  }

  /** Exact maps of one layer: {meta, map(0, head)}. */
  layer(layer) {
    return this.fetchLayer(layer, "f32", this.exact);
  }

  /** Quantised maps of one layer, for thumbnails: not kept, the canvases hold the picture. */
  coarseLayer(layer) {
    return this.fetchLayer(layer, "u8", new Map());
  }

  /** One head in depth (q, k, v, scores, mask, counterfactual) from the replay API. */
  detail({ layer, head, query = null, scale = true, temperature = 1 }) {
    const key = JSON.stringify([layer, head, query, scale, temperature]);
    if (!this.details.has(key)) {
      const body = this.body({ layer, head, scale, temperature });
      if (query !== null) body.query = query;
      const promise = api.detail(body, { signal: this.controller.signal });
      this.details.set(key, promise);
      promise.catch(() => this.details.delete(key));
      if (this.details.size > 64) this.details.delete(this.details.keys().next().value);
    }
    return this.details.get(key);
  }
}
