// What a head is (POST /api/lab/what-a-head-is): one real layer taken apart head by head, and
// put back together against the model's own attention output.

import { api } from "../api.js";
import { $, el, metricCard, readPageData } from "../dom.js";
import { describeModel, explorerLink, fillModels, headThumbnails, labels, labForm, read } from "../lab.js";
import { drawHeatmap } from "../views/plot.js";

const page = readPageData();
const fields = { model: $("#what-model"), text: $("#what-text"), layer: $("#what-layer"), head: $("#what-head") };
$("#what-text").value = page.example_text;

const signed = { zmid: 0, colorscale: "RdBu", hoverName: "value" };
const tiny = (x) => x.toExponential(1);
const shape = (rows, cols) => `${rows} × ${cols}`;

function describe(r) {
  const n = r.tokens.length;
  const kv = r.num_kv_heads < r.num_heads ? ` (sharing ${r.num_kv_heads} K/V heads)` : "";
  $("#what-shapes").textContent =
    `X ${shape(n, r.d_model)} → ${r.num_heads} heads${kv}, each Q, K, V ${shape(n, r.head_dim)} → ` +
    `joined ${shape(n, r.num_heads * r.head_dim)} → × W_O (${shape(r.num_heads * r.head_dim, r.d_model)}) → ${shape(n, r.d_model)}`;
  $("#what-metrics").replaceChildren(
    metricCard("attention output vs the model's, max |Δ|", tiny(r.output_max_abs_diff), "output-diff"),
    metricCard(
      "every head's weights vs the model's, max |Δ|",
      tiny(Math.max(...r.weights_max_abs_diff)),
      "weights-diff",
    ),
    metricCard(
      `head ${r.head}'s output vs the model's, max |Δ|`,
      tiny(r.head_output_max_abs_diff[r.head]),
      "head-diff",
    ),
    metricCard("W_Q, W_K, W_V of one head", `${r.d_model} × ${r.head_dim}`, "head-size"),
    metricCard(`head ${r.head} reads K/V head`, `${r.kv_head_of[r.head]} of ${r.num_kv_heads}`, "kv-head"),
  );
  const group = r.kv_head_of.map((g, h) => (g === r.kv_head_of[r.head] ? h : -1)).filter((h) => h >= 0);
  $("#what-gqa").textContent =
    r.num_kv_heads < r.num_heads
      ? `${r.model} has ${r.num_heads} query heads but only ${r.num_kv_heads} key/value heads (grouped-query attention): ` +
        `each W_K and W_V serves ${r.num_heads / r.num_kv_heads} query heads. Head ${r.head} reads K/V head ${r.kv_head_of[r.head]}, ` +
        `shared by heads ${group.join(", ")}; its own W_Q makes its own queries.`
      : `Every head has its own W_Q, W_K and W_V (multi-head attention: ${r.num_heads} query and ${r.num_kv_heads} key/value heads).`;
  const extras = [
    r.rope ? "q and k are rotated by their positions (RoPE) before q·kᵀ" : "",
    r.causal ? "the future is masked before the softmax (a decoder)" : "",
    r.qkv_bias ? "W_Q, W_K and W_V each add a bias" : "",
  ].filter(Boolean);
  $("#what-x-note").textContent =
    (r.causal
      ? "One row a token: the residual stream after this block's first norm (a decoder normalises before attention), which is what the heads read. "
      : "One row a token: the residual stream entering this layer (this encoder normalises after each addition instead). ") +
    `Every head reads this same matrix.${extras.length ? ` In this model ${extras.join("; ")}.` : ""}`;
  $("#what-explorer").href = explorerLink(r.model, read(fields).text, r.layer, r.head);
}

async function drawHead(r) {
  const n = r.tokens.length;
  const dims = labels("d", r.head_dim);
  const g = r.kv_head_of[r.head];
  $("#what-head-title").textContent = `3. Head ${r.head}, taken apart`;
  const common = { ...signed, xTitle: "dimension", yTitle: "token" };
  await drawHeatmap($("#what-q"), r.q, r.tokens, dims, {
    ...common,
    title: `Q_${r.head} = X W_Q (${shape(n, r.head_dim)})`,
  });
  await drawHeatmap($("#what-k"), r.k, r.tokens, dims, {
    ...common,
    title: `K of K/V head ${g} (${shape(n, r.head_dim)})`,
  });
  await drawHeatmap($("#what-v"), r.v, r.tokens, dims, {
    ...common,
    title: `V of K/V head ${g} (${shape(n, r.head_dim)})`,
  });
  await drawHeatmap($("#what-weights"), r.weights[r.head], r.tokens, r.tokens, {
    zmin: 0,
    zmax: 1,
    xTitle: "key",
    yTitle: "query",
    hoverName: "weight",
    title: `A_${r.head} = softmax(Q Kᵀ / √${r.head_dim}${r.causal ? " + mask" : ""}) (${shape(n, n)})`,
  });
  await drawHeatmap($("#what-out"), r.head_output, r.tokens, dims, {
    ...common,
    title: `head ${r.head}'s output A V (${shape(n, r.head_dim)})`,
  });
}

async function drawWhole(r) {
  const n = r.tokens.length;
  const hd = r.head_dim;
  const joinedCols = Array.from({ length: r.num_heads * hd }, (_, i) => `h${Math.floor(i / hd)}·${i % hd}`);
  const outline = {
    type: "rect",
    xref: "x",
    yref: "y",
    x0: r.head * hd - 0.5,
    x1: (r.head + 1) * hd - 0.5,
    y0: -0.5,
    y1: n - 0.5,
    line: { color: "#e4572e", width: 3 },
  };
  await drawHeatmap($("#what-joined"), r.joined, r.tokens, joinedCols, {
    ...signed,
    xTitle: "head · dimension",
    yTitle: "token",
    shapes: [outline],
    title: `the ${r.num_heads} heads' outputs joined (${shape(n, r.num_heads * hd)}); head ${r.head} outlined`,
  });
  await drawHeatmap($("#what-output"), r.output, r.tokens, labels("d", r.d_model), {
    ...signed,
    xTitle: "dimension",
    yTitle: "token",
    title: `the attention output: joined · W_Oᵀ${r.output_bias ? " + b_O" : ""} (${shape(n, r.d_model)}); max |Δ| against the model's own ${tiny(r.output_max_abs_diff)}`,
  });
}

function pick(h) {
  fields.head.value = String(h);
  fields.head.dispatchEvent(new Event("change", { bubbles: true }));
}

async function run(signal) {
  const v = read(fields);
  const model = page.models?.find((m) => m.id === v.model);
  if (model && !model.loaded)
    $("#what-metrics").replaceChildren(
      el("p", { className: "busy", text: `Loading ${v.model} (the first time takes up to half a minute)…` }),
    );
  const r = await api.lab("what-a-head-is", { model: v.model, text: v.text, layer: v.layer, head: v.head }, { signal });
  if (model) model.loaded = true;
  describe(r);
  headThumbnails($("#what-heads"), r.weights, {
    chosen: r.head,
    onPick: pick,
    label: (h) => (r.num_kv_heads < r.num_heads ? `head ${h} · kv ${r.kv_head_of[h]}` : `head ${h}`),
  });
  await drawHeatmap($("#what-x"), r.x, r.tokens, labels("d", r.d_model), {
    ...signed,
    xTitle: "dimension",
    yTitle: "token",
    title: `X, the input of layer ${r.layer} (${shape(r.tokens.length, r.d_model)})`,
  });
  await drawHead(r);
  await drawWhole(r);
}

/** The layer and head inputs stop at the chosen model's counts (a value past them is brought
 * back, and the URL with it). */
function limitInputs() {
  const m = page.models.find((x) => x.id === fields.model.value);
  for (const [name, count] of [
    ["layer", m?.num_layers],
    ["head", m?.num_heads],
  ]) {
    if (!count) continue;
    fields[name].max = String(count - 1);
    if (Number(fields[name].value) > count - 1) {
      fields[name].value = String(count - 1);
      fields[name].dispatchEvent(new Event("change", { bubbles: true }));
    }
  }
}

async function start() {
  page.models = await fillModels(fields.model);
  if (page.models.some((m) => m.id === page.minilm)) fields.model.value = page.minilm;
  const go = labForm({ form: $("#what-form"), error: $("#what-error"), fields, run });
  describeModel(fields.model, $("#what-model-note"), page.models, page.lab_tokens);
  limitInputs();
  fields.model.addEventListener("change", limitInputs);
  go();
}
start();
