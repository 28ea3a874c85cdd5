// Follow a token: what it attends to (its rows) and who attends to it (its columns), in every
// layer and head at once, with each layer's heads summed up.

import { headLabels } from "./heads.js";
import { drawHeatmap, onCellClick, weightScale } from "./plot.js";
import { encodeFind } from "./search.js";
import { chosenToken, fillTokenPicker } from "./tokens.js";

export function bind(parts, set) {
  parts.token.addEventListener("change", () => set({ query: Number(parts.token.value) }));
  parts.summary.addEventListener("change", () => set({ summary: parts.summary.value }));
  parts.colours.addEventListener("change", () => set({ colours: parts.colours.value }));
  // Every head ranked by its share of attention on this token (Find heads' span search).
  parts.findHeads.addEventListener("click", () => {
    const token = Number(parts.token.value);
    set({ view: "search", find: encodeFind({ kind: "marked", first: token, last: token, from: "later" }) });
  });
}

export async function render({ session, state, parts, info, open, isStale }) {
  const tokens = info.tokens;
  const token = chosenToken(state, tokens);
  fillTokenPicker(parts.token, tokens, token);
  const summary = state.summary === "max" ? "max" : "mean";
  parts.summary.value = summary;
  parts.colours.value = state.colours;
  const data = await session.follow(token);
  if (isStale()) return null;
  const labels = headLabels(info);
  const rowsOfHeads = labels.layers.flatMap((l) => labels.heads.map((h) => `${l} ${h.split(" ")[0]}`));
  const word = `“${tokens[token]}” (token ${token})`;
  const how = summary === "max" ? "the largest over each layer's heads" : "each layer's heads averaged";
  // The followed token's own column, outlined in the charts of what it attends to.
  const own = [
    {
      type: "rect",
      x0: token - 0.5,
      x1: token + 0.5,
      y0: 0,
      y1: 1,
      yref: "paper",
      line: { color: "#e4572e", width: 2 },
    },
  ];
  const layersHeight = Math.min(700, Math.max(300, 20 * info.num_layers + 170));
  const common = { yTitle: "", hoverName: "weight", height: layersHeight };
  const queryLayers = data[`query_${summary}`];
  const keyLayers = data[`key_${summary}`];
  // Each chart in the chosen colour scale (weights are in [0, 1]).
  const draw = (el, weights, rows, options) => {
    const scale = weightScale(state.colours, weights);
    return drawHeatmap(el, scale.options.z, rows, tokens, { ...common, ...scale.options, ...options }).then(
      () => scale,
    );
  };
  const queryScale = await draw(parts.queryLayers, queryLayers, labels.layers, {
    title: `what ${word} attends to, layer by layer (${how})`,
    xTitle: "key",
    shapes: own,
  });
  await draw(parts.keyLayers, keyLayers, labels.layers, {
    title: `how much each token gives ${word}, layer by layer (${how})`,
    xTitle: "query",
  });
  const headsHeight = Math.min(820, Math.max(360, 5 * rowsOfHeads.length + 170));
  const flat = (grid) => grid.flat(); // [layer][head][token] -> [layer * heads + head][token]
  await draw(parts.queryHeads, flat(data.as_query), rowsOfHeads, {
    height: headsHeight,
    title: `what ${word} attends to in every head · click a row to open its head`,
    xTitle: "key",
    shapes: own,
  });
  await draw(parts.keyHeads, flat(data.as_key), rowsOfHeads, {
    height: headsHeight,
    title: `what every token gives ${word} in every head · click a row to open its head`,
    xTitle: "query",
  });
  const openRow = (row) => open(Math.floor(row / info.num_heads), row % info.num_heads);
  onCellClick(parts.queryHeads, openRow);
  onCellClick(parts.keyHeads, openRow);
  return {
    kind: "head",
    element: parts.queryLayers,
    where: `token-${token}`,
    tokens,
    rowTokens: labels.layers,
    matrix: queryLayers,
    matrixName: `query_${summary}`,
    corner: "layer \\ key",
    colour: queryScale.colour,
    colourBar: queryScale.bar,
    title: `what ${word} attends to, layer by layer (${how})`,
    payload: {
      what: "token followed through the model: as_query[layer][head][key] is its row, as_key[layer][head][query] its column; *_mean and *_max sum up each layer's heads",
      token,
      token_text: tokens[token],
      summary,
      as_query: data.as_query,
      as_key: data.as_key,
      query_mean: data.query_mean,
      query_max: data.query_max,
      key_mean: data.key_mean,
      key_max: data.key_max,
    },
  };
}
