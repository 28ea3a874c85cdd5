// One forward pass (POST /api/lab/forward-pass): tokens, embeddings, the residual stream through
// every block and the next token; a block's attention opened on demand (POST /api/attention,
// which reads the same cached pass).

import { api } from "../api.js";
import { $, el, metricCard, readPageData } from "../dom.js";
import {
  describeModel,
  explorerLink,
  fillModels,
  headThumbnails,
  labels,
  labForm,
  numbersTable,
  read,
} from "../lab.js";
import { drawChart, drawHeatmap, escapeLabel, onCellClick } from "../views/plot.js";

const EXAMPLE = "The Eiffel Tower is in the city of";
const page = readPageData();
const fields = { model: $("#pass-model"), text: $("#pass-text") };
const blockFields = { layer: $("#pass-layer") };
fields.text.value = EXAMPLE;
let shown = null; // the pass drawn last: {model, text, r}
let openBlockNow = () => {};

const percent = (p) => `${(100 * p).toFixed(p < 0.001 ? 3 : 1)}%`;

function openLayer(layer) {
  blockFields.layer.value = String(layer);
  blockFields.layer.dispatchEvent(new Event("change", { bubbles: true }));
}

function tokenList(r) {
  $("#pass-tokens").replaceChildren(
    ...r.tokens.map((token, i) =>
      el("li", {}, [
        el("span", { className: "tok", text: token }),
        el("span", { className: "id", text: String(r.token_ids[i]) }),
      ]),
    ),
  );
}

/** What happens to the embedding rows before the first block, read off the numbers: the
 * stream's first row is the rows themselves, the rows times one factor (Gemma's √d), or
 * something else (positions added, a norm). */
function entering(r, v) {
  const ratios = r.entering_norms.map((n, i) => n / r.embedding_norms[i]);
  const same = (a, b) => Math.abs(a - b) <= 1e-4 * Math.max(Math.abs(a), Math.abs(b));
  const positions = r.rotary
    ? "Nothing is added for position: this model rotates queries and keys by position inside attention (RoPE)."
    : "Nothing is added for position: this model adds a bias for each distance to the attention scores.";
  if (ratios.every((x) => same(x, 1))) return `The first block reads these rows as they are. ${positions}`;
  if (ratios.every((x) => same(x, ratios[0]))) {
    return `${v.model} multiplies every row by ${ratios[0].toFixed(2)} before the first block (√${r.d_model} = ${Math.sqrt(r.d_model).toFixed(2)}): the stream's first row below is that. ${positions}`;
  }
  return `${v.model} changes each row before the first block (GPT-2 and BERT add a position vector, BERT a segment vector too, and BERT-style encoders normalise the sum): the stream's first row below is that.`;
}

async function drawEmbeddings(r, v) {
  $("#pass-embed-note").textContent =
    `Each token's row of the embedding matrix, ${r.d_model} numbers; the first ${r.shown_dims} are drawn, the norms use all ${r.d_model}. ${entering(r, v)}`;
  await drawHeatmap($("#pass-embed"), r.embeddings, r.tokens, labels("d", r.shown_dims), {
    zmid: 0,
    colorscale: "RdBu",
    xTitle: "dimension",
    yTitle: "token",
    hoverName: "value",
    title: `embedding rows (${r.tokens.length} × ${r.d_model}, first ${r.shown_dims} dimensions)`,
  });
  const width = $("#pass-embed-norms").clientWidth || 600;
  await drawChart(
    $("#pass-embed-norms"),
    [
      {
        type: "bar",
        x: r.tokens.map((_, i) => i),
        y: r.embedding_norms,
        customdata: r.tokens.map(escapeLabel),
        hovertemplate: "%{customdata}: |e| = %{y:.3f}<extra></extra>",
        marker: { color: "#3b4cca" },
      },
    ],
    { title: "each embedding row's length |e|", height: 320, yaxis: { title: { text: "norm" } }, margin: { b: 70 } },
    {},
    { xaxis: { labels: r.tokens, pixels: width - 60, perLabel: 16 } },
  );
}

async function drawStream(r) {
  $("#pass-stream-note").textContent =
    "How long each token's vector is after each block (its norm), and how much each block's attention and MLP add, on average over the tokens. " +
    (r.renormalised
      ? "In this model each addition is followed by a LayerNorm (post-norm, as BERT), so the stream is rescaled after every block."
      : "Each block adds to the stream and nothing else touches it: the norms inside a block read a normalised copy.") +
    " Click a block to open its attention below.";
  const rows = [r.entering_norms, ...r.residual_norms, ...(r.final_norms ? [r.final_norms] : [])];
  const names = ["embedding", ...labels("after block ", r.num_layers), ...(r.final_norms ? ["final norm"] : [])];
  const z = rows.map((row) => row.map((x) => Math.log10(Math.max(x, 1e-6))));
  const lo = Math.floor(Math.min(...z.flat()));
  const hi = Math.ceil(Math.max(...z.flat()));
  const ticks = Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
  const stream = $("#pass-stream");
  await drawHeatmap(stream, z, names, r.tokens, {
    xTitle: "token",
    hoverName: "norm",
    hoverValues: rows,
    zmin: lo,
    zmax: hi,
    colorbar: { tickmode: "array", tickvals: ticks, ticktext: ticks.map((d) => String(10 ** d)) },
    title: "each token's vector length after each block (log colours); click a block to open it",
  });
  onCellClick(stream, (row) => {
    if (row >= 1 && row <= r.num_layers) openLayer(row - 1);
  });
  const mean = (grid) => grid.map((row) => row.reduce((a, b) => a + b, 0) / row.length);
  const blocks = Array.from({ length: r.num_layers }, (_, l) => l);
  const added = $("#pass-added");
  await drawChart(
    added,
    [
      {
        type: "bar",
        name: "attention adds",
        x: blocks,
        y: mean(r.attention_norms),
        marker: { color: "#3b4cca" },
        hovertemplate: "block %{x}: attention adds |a| = %{y:.3f} (mean over tokens)<extra></extra>",
      },
      {
        type: "bar",
        name: "MLP adds",
        x: blocks,
        y: mean(r.mlp_norms),
        marker: { color: "#d1495b" },
        hovertemplate: "block %{x}: the MLP adds |m| = %{y:.3f} (mean over tokens)<extra></extra>",
      },
    ],
    {
      title:
        "how much each block's attention and MLP add to the stream (mean length over tokens, log scale); click a block to open it",
      height: 340,
      barmode: "group",
      legend: { orientation: "h", y: -0.25 },
      xaxis: { title: { text: "block (layer)" }, dtick: r.num_layers > 12 ? 5 : 1 },
      yaxis: { type: "log", dtick: 1, title: { text: "norm" } },
    },
  );
  if (!added._blockClicks) {
    added._blockClicks = true;
    added.on("plotly_click", (event) => {
      const x = event.points?.[0]?.x;
      if (Number.isInteger(x)) openLayer(x);
    });
  }
}

async function drawNext(r) {
  $("#pass-no-head").hidden = !r.no_head;
  $("#pass-next-section").hidden = Boolean(r.no_head);
  if (r.no_head) {
    $("#pass-no-head").textContent =
      `${r.no_head} This pass stops at the last hidden state (the stream after the last block, above).`;
    return;
  }
  const n = r.tokens.length;
  const top = r.next_token;
  $("#pass-next-note").textContent =
    `After the last block the final norm rescales each vector; the LM head turns it into ${r.vocab_size.toLocaleString("en-US")} logits, ` +
    `one for each token of the vocabulary, and their softmax (in float64) gives the next token's probabilities. The ${top.length} likeliest after “${r.tokens[n - 1]}”:`;
  const ranks = top.map((_, i) => i);
  await drawChart(
    $("#pass-next"),
    [
      {
        type: "bar",
        orientation: "h",
        x: top.map((g) => g.probability),
        y: ranks,
        customdata: top.map((g) => [escapeLabel(g.token), g.logit.toFixed(3), g.token_id]),
        hovertemplate: "%{customdata[0]} (id %{customdata[2]}): p = %{x:.4f}, logit %{customdata[1]}<extra></extra>",
        marker: { color: "#3b4cca" },
      },
    ],
    {
      title: "the next token's probabilities (top 10)",
      height: 380,
      yaxis: {
        autorange: "reversed",
        tickmode: "array",
        tickvals: ranks,
        ticktext: top.map((g) => escapeLabel(g.token)),
        automargin: true,
      },
      xaxis: { title: { text: "probability" }, range: [0, Math.min(1, top[0].probability * 1.15)] },
    },
  );
  $("#pass-guesses").replaceChildren(
    numbersTable(
      "The top guess at every position: what the model expects to come next after each token",
      ["position", "token", "top guess next", "probability", "the text's next token"],
      r.top_guess.map((g, i) => [
        i,
        r.tokens[i],
        g.token,
        percent(g.probability),
        i + 1 < n ? `${r.tokens[i + 1]}${r.token_ids[i + 1] === g.token_id ? " ✓" : ""}` : "(not written yet)",
      ]),
      "pass-guess-table",
    ),
  );
}

async function runPass(signal) {
  const v = read(fields);
  const model = page.models?.find((m) => m.id === v.model);
  if (model && !model.loaded)
    $("#pass-metrics").replaceChildren(
      el("p", { className: "busy", text: `Loading ${v.model} (the first time takes up to half a minute)…` }),
    );
  const r = await api.lab("forward-pass", { model: v.model, text: v.text }, { signal });
  if (model) model.loaded = true;
  shown = { model: r.model, text: v.text, r };
  const best = r.next_token?.[0];
  $("#pass-metrics").replaceChildren(
    metricCard("tokens", String(r.tokens.length), "tokens"),
    metricCard("blocks × width", `${r.num_layers} × ${r.d_model}`, "blocks"),
    metricCard("likeliest next token", best ? best.token : "none: no LM head", "next"),
    metricCard("its probability", best ? percent(best.probability) : "—", "next-p"),
  );
  blockFields.layer.max = String(r.num_layers - 1);
  tokenList(r);
  await drawEmbeddings(r, v);
  await drawStream(r);
  await drawNext(r);
  openBlockNow();
}

async function openBlock(signal) {
  if (!shown) return;
  const { model, text, r } = shown;
  const layer = Math.min(read(blockFields).layer, r.num_layers - 1);
  const body = await api.attention({ model, text, layers: [layer] }, { signal });
  const maps = body.attentions[0];
  $("#pass-block-title").textContent = `Attention inside block ${layer}`;
  $("#pass-block-note").textContent =
    `The ${maps.length} heads of block ${layer} on this text, each one map (row: query token, column: key; colour ∝ √weight)` +
    `${body.num_kv_heads < body.num_heads ? `, sharing ${body.num_kv_heads} key/value heads` : ""}. Choose a head to see how it is computed.`;
  const headPage = (h) =>
    `/lab/what-a-head-is?${new URLSearchParams({ model, text, layer: String(layer), head: String(h) })}`;
  headThumbnails($("#pass-heads"), maps, { label: (h) => `head ${h}`, href: headPage });
  $("#pass-explorer").textContent = `See block ${layer} in the explorer`;
  $("#pass-explorer").href = explorerLink(model, text, layer, 0);
}

async function start() {
  page.models = await fillModels(fields.model);
  if (page.models.some((m) => m.id === page.smollm2)) fields.model.value = page.smollm2;
  openBlockNow = labForm({ form: $("#block-form"), error: $("#block-error"), fields: blockFields, run: openBlock });
  labForm({ form: $("#pass-form"), error: $("#pass-error"), fields, run: runPass })();
  describeModel(fields.model, $("#pass-model-note"), page.models, page.lab_tokens);
}
start();
