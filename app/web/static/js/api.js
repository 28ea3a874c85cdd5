// The one place the front end talks to the server. Every call returns parsed JSON or throws
// an ApiError whose message is the server's own explanation.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function describe(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    // FastAPI validation errors: [{loc, msg}, ...]
    return detail
      .map((e) => {
        const where = (e.loc || []).filter((p) => p !== "body").join(".");
        const msg = String(e.msg || "").replace(/^Value error, /, "");
        return where ? `${where}: ${msg}` : msg;
      })
      .join("; ");
  }
  return JSON.stringify(detail);
}

function encodePath(id) {
  return id.split("/").map(encodeURIComponent).join("/");
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK64 = 0xffffffffffffffffn;

/**
 * The routing key of a request about a text: 64-bit FNV-1a of the UTF-8 of model, text and
 * text_pair joined by NUL, as 16 hex digits (attention_atlas.client.route_key computes the
 * same). Sent as X-Atlas-Key, a balancer that hashes on it (nginx `hash ... consistent`,
 * ingress-nginx's upstream-hash-by) sends every request about one text to the replica that
 * has its forward pass cached. null for a request that names no text.
 */
export function routeKey(body) {
  if (!body || typeof body.model !== "string" || typeof body.text !== "string") return null;
  let hash = FNV_OFFSET;
  for (const byte of new TextEncoder().encode(`${body.model}\0${body.text}\0${body.text_pair ?? ""}`)) {
    hash = ((hash ^ BigInt(byte)) * FNV_PRIME) & MASK64;
  }
  return hash.toString(16).padStart(16, "0");
}

/** The fetch itself: the response when it is a success, else an ApiError with the server's
 * own explanation (or "cannot reach the server"). */
async function send(method, path, body, signal) {
  let response;
  const file = body instanceof Blob; // sent as it is (a zip, an image), not as JSON
  const image = file && body.type.startsWith("image/");
  const type = image ? body.type : file ? "application/zip" : "application/json";
  const headers = body === undefined ? {} : { "Content-Type": type };
  const key = file ? null : routeKey(body);
  if (key) headers["X-Atlas-Key"] = key;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined || file ? body : JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "Cannot reach the server. Is it still running?");
  }
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const data = await response.json();
      if (data && data.detail !== undefined) message = describe(data.detail);
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(response.status, message);
  }
  return response;
}

async function request(method, path, body, { signal } = {}) {
  const response = await send(method, path, body, signal);
  const type = response.headers.get("Content-Type") || "";
  return type.includes("application/json") ? response.json() : response.arrayBuffer();
}

/** POSTs `body` and calls onLine(object) for each line of an NDJSON answer as it arrives;
 * resolves with the last line. */
async function streamLines(path, body, onLine, { signal } = {}) {
  const response = await send("POST", path, body, signal);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let last = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      if (!line.trim()) continue;
      last = JSON.parse(line);
      onLine(last);
    }
  }
  return last;
}

export const api = {
  coreAttention: (body, opts) => request("POST", "/api/core/attention", body, opts),
  models: (opts) => request("GET", "/api/models", undefined, opts),
  attention: (body, opts) => request("POST", "/api/attention", body, opts),
  detail: (body, opts) => request("POST", "/api/attention/detail", body, opts),
  heads: (body, opts) => request("POST", "/api/attention/heads", body, opts),
  search: (body, opts) => request("POST", "/api/attention/search", body, opts),
  ablate: (body, opts) => request("POST", "/api/attention/ablate", body, opts),
  compare: (body, opts) => request("POST", "/api/attention/compare", body, opts),
  qkspace: (body, opts) => request("POST", "/api/attention/qkspace", body, opts),
  generate: (body, onLine, opts) => streamLines("/api/attention/generate", body, onLine, opts),
  /** Runs (or finds cached) the forward pass over a long text; onLine gets each progress line. */
  forward: (body, onLine, opts) => streamLines("/api/attention/forward", body, onLine, opts),
  tiles: (body, opts) => request("POST", "/api/attention/tiles", body, opts),
  predictions: (body, opts) => request("POST", "/api/attention/predictions", body, opts),
  lens: (body, opts) => request("POST", "/api/attention/lens", body, opts),
  decoder: (body, opts) => request("POST", "/api/attention/decoder", body, opts),
  attribution: (body, opts) => request("POST", "/api/attention/attribution", body, opts),
  trace: (body, opts) => request("POST", "/api/attention/trace", body, opts),
  patching: (body, opts) => request("POST", "/api/attention/patching", body, opts),
  circuit: (body, opts) => request("POST", "/api/attention/circuit", body, opts),
  /** Exact patching: onLine gets each progress line; resolves with the last line. */
  patchingExact: (body, onLine, opts) => streamLines("/api/attention/patching/exact", body, onLine, opts),
  follow: (body, opts) => request("POST", "/api/attention/token", body, opts),
  aggregate: (body, opts) => request("POST", "/api/attention/aggregate", body, opts),
  similarity: (body, opts) => request("POST", "/api/attention/similarity", body, opts),
  inductionText: (id, length, seed, opts) =>
    request("GET", `/api/models/${encodePath(id)}/induction-text?length=${length}&seed=${seed}`, undefined, opts),
  // Model ids contain a slash; the routes take them as a path, so each segment is encoded.
  loadModel: (id, opts) => request("POST", `/api/models/${encodePath(id)}/load`, undefined, opts),
  modelStatus: (id, opts) => request("GET", `/api/models/${encodePath(id)}/status`, undefined, opts),
  compositionStatus: (id, opts) => request("GET", `/api/models/${encodePath(id)}/composition`, undefined, opts),
  corpusRuns: (opts) => request("GET", "/api/corpus", undefined, opts),
  corpusHeads: (run, opts) => request("GET", `/api/corpus/${run}/heads`, undefined, opts),
  corpusHead: (run, layer, head, query, opts) =>
    request("GET", `/api/corpus/${run}/heads/${layer}/${head}?${new URLSearchParams(query)}`, undefined, opts),
  /** A zipped HeadVis tree (a File or Blob) into the corpus store: the run it became. */
  importTree: (zip, opts) => request("POST", "/api/corpus/import", zip, opts),
  corpusHeadVis: (run, layer, head, opts) =>
    request("GET", `/api/corpus/${run}/heads/${layer}/${head}/headvis`, undefined, opts),
  corpusProjection: (run, layer, head, body, opts) =>
    request("POST", `/api/corpus/${run}/heads/${layer}/${head}/projection`, body, opts),
  /** An image (a File or Blob of PNG, JPEG or WebP) through a vision transformer: the query
   * token's rows at every layer and head, rollout, distances, artifacts. */
  imageAttention: (image, { model, query }, opts) =>
    request("POST", `/api/image/attention?${new URLSearchParams({ model, query: String(query) })}`, image, opts),
  /** A bundled sample image, as a Blob. */
  imageSample: async (name, opts) => {
    const response = await send("GET", `/api/image/samples/${encodeURIComponent(name)}`, undefined, opts?.signal);
    return response.blob();
  },
  lessons: (opts) => request("GET", "/api/lessons", undefined, opts),
  lesson: (id, opts) => request("GET", `/api/lessons/${encodeURIComponent(id)}`, undefined, opts),
  checkLesson: (text, opts) => request("POST", "/api/lessons/check", { text }, opts),
  masks: (body, opts) => request("POST", "/api/lab/masks", body, opts),
  scaling: (body, opts) => request("POST", "/api/lab/scaling", body, opts),
  /** Trains the lab's small model; onLine gets each line (started, snapshots, end). */
  train: (body, onLine, opts) => streamLines("/api/lab/train", body, onLine, opts),
  /** Any other lab route: POST /api/lab/{topic}. */
  lab: (topic, body, opts) => request("POST", `/api/lab/${topic}`, body, opts),
};
