// One head as a heatmap: queries down, keys across, exact weights on hover.

import { toMatrix } from "../binary.js";
import { drawHeatmap, weightScale } from "./plot.js";
import { drawPredictions } from "./predictions.js";

/** Dashed lines where a generated continuation begins (queries below, keys to the right). */
export function continuationEdge(generated, n) {
  if (generated === null || generated === undefined || generated >= n) return [];
  const line = { type: "line", line: { color: "#f97316", width: 2, dash: "dash" } };
  const edge = generated - 0.5;
  return [
    { ...line, xref: "x", yref: "paper", x0: edge, x1: edge, y0: 0, y1: 1 },
    { ...line, xref: "paper", yref: "y", x0: 0, x1: 1, y0: edge, y1: edge },
  ];
}

export function bind(parts, set) {
  parts.colours.addEventListener("change", () => set({ colours: parts.colours.value }));
}

/** Every view: render(scene) reads scene.state, draws into scene.parts and returns what the
 * export buttons save (see export.js); scene = {state, session, info, parts, set, isStale}. */
/** The open head in Deep zoom, on the same text (in the fragment, never sent): where the
 * model's heads replay and the text is one (Deep zoom takes no sentence pair); never in a
 * notebook, which has no pages (no `models`). */
function deepZoomLink(link, session, state, models) {
  const replay = models?.find((m) => m.id === session.model)?.replay;
  link.hidden = !replay || Boolean(session.textPair);
  if (link.hidden) return;
  const query = new URLSearchParams({ model: session.model, layer: String(state.layer), head: String(state.head) });
  if (state.colours === "log") query.set("colours", "log");
  link.href = `/zoom?${query}#${new URLSearchParams({ text: session.text })}`;
}

export async function render({ session, state, parts, models, isStale }) {
  const { layer, head } = state;
  const maps = await session.layer(layer);
  if (isStale()) return null;
  const tokens = maps.meta.tokens; // keys
  const queries = maps.meta.query_tokens || tokens; // differ only for cross-attention (notebooks)
  const n = queries.length;
  const z = toMatrix(maps.map(0, head), n, tokens.length);
  const title = `${maps.meta.model.split("/").pop()} · layer ${layer} · head ${head} · rows: queries, columns: keys`;
  const height = Math.min(900, Math.max(420, 18 * n + 140));
  parts.colours.value = state.colours;
  deepZoomLink(parts.deepZoom, session, state, models);
  const scale = weightScale(state.colours, z);
  await drawHeatmap(parts.plot, scale.options.z, queries, tokens, {
    ...scale.options,
    title,
    hoverName: "weight",
    height,
    shapes: continuationEdge(state.generated, n),
  });
  if (isStale()) return null;
  await drawPredictions(parts.predictions, session, parts.plot, isStale);
  return {
    kind: "head",
    layer,
    head,
    tokens,
    matrix: z,
    element: parts.plot,
    title,
    subtitle: "rows: queries, columns: keys",
    colour: scale.colour,
    colourBar: scale.bar,
  };
}
