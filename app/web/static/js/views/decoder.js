// Decoder & cross: an encoder-decoder's (T5's) decoder self-attention over a target text and
// its cross-attention from each target token over the input's tokens, one decoder layer and
// head at a time (POST /api/attention/decoder). Every other view shows the encoder's maps.

import { linearBar, viridis } from "../colors.js";
import { metricCard } from "../dom.js";
import { modelFits } from "./fits.js";
import { drawHeatmap } from "./plot.js";

export function bind(parts, set) {
  parts.target.addEventListener("change", () => set({ target: parts.target.value.trim() ? parts.target.value : "" }));
  parts.layer.addEventListener("change", () =>
    set({ decoderLayer: Math.max(0, Math.floor(Number(parts.layer.value)) || 0) }),
  );
}

/** Whether the open model has a decoder to show; where it has not, the panel says why and
 * offers one that has. */
function ready(scene) {
  const why = (model) =>
    `${model.id} is not an encoder–decoder: it has one stack of layers, and every other view shows it. This view is for models such as T5, BART or Marian, and none ships with Atlas (no small one can be had offline under an open licence). To add one: atlas serve --model ./my-t5 (a checkpoint folder), or with internet atlas serve --model google-t5/t5-small --hub-downloads.`;
  return modelFits(scene, (m) => m.encoder_decoder, why, ["results", "controls"]);
}

/** The input token a row of cross-attention weights reads most, with its weight. */
function strongest(row, tokens) {
  let best = 0;
  row.forEach((w, i) => {
    if (w > row[best]) best = i;
  });
  return `${tokens[best]} (${row[best].toFixed(2)})`;
}

export async function render(scene) {
  const { session, state, parts, isStale } = scene;
  parts.target.value = state.target || "";
  parts.target.placeholder = state.text;
  parts.layer.value = String(state.decoderLayer ?? 0);
  if (!ready(scene)) return null;
  const target = state.target || state.text;
  const layer = state.decoderLayer ?? 0;
  const answer = await session.decoder(target, layer);
  if (isStale()) return null;
  parts.layer.max = String(answer.num_layers - 1);
  const head = Math.min(state.head ?? 0, answer.num_heads - 1);
  const rows = answer.target_tokens;
  const cross = answer.cross[head];
  parts.summary.textContent = `Decoder layer ${layer} of ${answer.num_layers}, head ${head}. ${
    state.target ? "" : "The decoder reads the input itself until you type a target above. "
  }Rows are what the decoder reads: its start token, then the target's tokens but the last. The left map's columns are the same (each reads the ones before it), the right map's the input's.`;
  parts.metrics.replaceChildren(
    metricCard("decoder tokens · input tokens", `${rows.length} · ${answer.tokens.length}`),
    metricCard("the last decoder token reads most", strongest(cross[cross.length - 1], answer.tokens)),
  );
  const common = {
    zmin: 0,
    zmax: 1,
    hoverName: "weight",
    yTitle: "query (target)",
    height: Math.min(900, Math.max(360, 18 * rows.length + 160)),
  };
  await drawHeatmap(parts.decoder, answer.decoder[head], rows, rows, {
    ...common,
    xTitle: "key (target)",
    title: `Decoder self-attention · layer ${layer} · head ${head}`,
  });
  if (isStale()) return null;
  await drawHeatmap(parts.cross, cross, rows, answer.tokens, {
    ...common,
    xTitle: "key (input)",
    title: `Cross-attention · layer ${layer} · head ${head}: target → input`,
  });
  return {
    kind: "head",
    element: parts.cross,
    layer,
    head,
    where: `decoder-L${layer}-H${head}-cross`,
    tokens: answer.tokens,
    rowTokens: rows,
    matrix: cross,
    corner: "target \\ input",
    title: `Cross-attention, decoder layer ${layer}, head ${head}`,
    subtitle: "rows: target tokens (queries), columns: input tokens (keys)",
    colour: (v) => viridis(v),
    colourBar: linearBar(1, "weight"),
    payload: {
      what: "an encoder-decoder's cross-attention: each target token's weights over the input",
      target,
      decoder_self_attention: answer.decoder[head],
    },
  };
}
