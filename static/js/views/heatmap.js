// One head as a heatmap: queries down, keys across, exact weights on hover.

import { toMatrix } from "../binary.js";
import { viridis } from "../colors.js";
import { drawHeatmap } from "./plot.js";

export async function renderHeatmap(ctx) {
  const token = ctx.renderToken;
  const { session, state, el } = ctx;
  const { layer, head } = state;
  const maps = await session.layer(layer);
  if (ctx.isStale(token)) return;
  const tokens = maps.meta.tokens;
  const n = tokens.length;
  const z = toMatrix(maps.map(0, head), n, n);
  const title = `${maps.meta.model.split("/").pop()} · layer ${layer} · head ${head} · rows: queries, columns: keys`;
  ctx.current = { kind: "head", layer, head, tokens, matrix: z, element: el.heatmap, title, colour: viridis };
  const height = Math.min(900, Math.max(420, 18 * n + 140));
  await drawHeatmap(el.heatmap, z, tokens, tokens, {
    title,
    zmin: 0,
    zmax: 1,
    hoverName: "weight",
    height,
  });
}
