// The notebook widget's data source: the same interface the explorer's views read from
// AttentionSession (data.js), answered from the maps the Python side sent with the widget and,
// for the replay views, from the Python kernel through the widget's messages.

const REPLY_TIMEOUT_MS = 120_000;

export class WidgetSession {
  /** model: the anywidget model; its "meta" trait has the tokens and shapes, "maps" the weights
   * as float32 bytes in C order [layer][head][query][key]. */
  constructor(model) {
    this.widget = model;
    this.meta = model.get("meta");
    this.model = this.meta.model;
    this.text = this.meta.tokens.join(" ");
    this.textPair = null;
    const bytes = model.get("maps");
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    this.values = new Float32Array(buffer);
    this.pending = new Map();
    this.nextId = 0;
    model.on("msg:custom", (message) => this.answer(message));
  }

  get length() {
    return this.meta.tokens.length;
  }

  /** One layer's maps, shaped like decodeMaps' answer: {meta, map(0, head)}. */
  layer(layer) {
    return Promise.resolve(this.layersHeld([layer]));
  }

  /** Several layers' maps for thumbnails, as AttentionSession.coarseLayers gives them:
   * {side, cell, map(i, head)}, here always whole (the widget holds them exactly; the grid
   * pools them itself). */
  coarseLayers(layers) {
    return Promise.resolve({ side: this.meta.tokens.length, cell: 1, ...this.layersHeld(layers) });
  }

  /** {meta, map(i, head)} for the i-th of `layers`, views of the float32 maps held. */
  layersHeld(layers) {
    const { num_heads: heads } = this.meta;
    const rows = (this.meta.query_tokens || this.meta.tokens).length;
    const cols = this.meta.tokens.length;
    const size = rows * cols;
    const values = this.values;
    return {
      meta: this.meta,
      map(i, head) {
        const offset = (layers[i] * heads + head) * size;
        return values.subarray(offset, offset + size);
      },
    };
  }

  /** One head in depth, replayed by the Python kernel (the detail API's answer). */
  detail(body) {
    return this.ask("detail", body);
  }

  /** Queries and keys in 2-D, replayed by the Python kernel (the qkspace API's answer). */
  qkspace(body) {
    return this.ask("qkspace", body);
  }

  /** The logit lens of the shown text, run by the Python kernel (the lens API's answer). */
  lens(token) {
    return this.ask("lens", token ? { top_k: 5, token } : { top_k: 5 });
  }

  /** Direct logit attribution, run by the Python kernel (the attribution API's answer). */
  attribution(extra) {
    return this.ask("attribution", extra);
  }

  /** One score taken apart, run by the Python kernel (the trace API's answer). */
  trace(extra) {
    return this.ask("trace", extra);
  }

  /** Edges between heads, found by the Python kernel (the circuit API's answer). */
  circuit(extra) {
    return this.ask("circuit", extra);
  }

  /** A replay by the kernel: `kind` names it, `body` is the API request's own. */
  ask(kind, body) {
    if (!this.meta.replayable) {
      return Promise.reject(new Error(this.meta.replay_note));
    }
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error("The Python kernel did not answer (is it still running?)."));
      }, REPLY_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      this.widget.send({ kind, id, body });
    });
  }

  answer(message) {
    const waiting = this.pending.get(message.id);
    if (!waiting) return;
    this.pending.delete(message.id);
    clearTimeout(waiting.timer);
    if (message.error) waiting.reject(new Error(message.error));
    else waiting.resolve(message.answer);
  }

  abort() {}
}
