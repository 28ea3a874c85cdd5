// Switch heads off and see what changes: the predictions before and after, how far every
// later head's rows moved, and the open head's map both ways.

import { el, metricCard } from "../dom.js";
import { headLabels } from "./heads.js";
import { drawHeatmap, onCellClick, weightScale } from "./plot.js";

/** "3.0, 3.4" -> [{layer: 3, head: 0}, ...]: distinct heads the model has, in the text's order. */
export function parseHeads(text, info) {
  const seen = new Set();
  const heads = [];
  for (const [, l, h] of String(text || "").matchAll(/(\d+)\s*\.\s*(\d+)/g)) {
    const layer = Number(l);
    const head = Number(h);
    const key = `${layer}.${head}`;
    if (layer < info.num_layers && head < info.num_heads && !seen.has(key)) {
      seen.add(key);
      heads.push({ layer, head });
    }
  }
  return heads;
}

const formatHeads = (heads) => heads.map((h) => `${h.layer}.${h.head}`).join(", ");

export function bind(parts, set) {
  parts.heads.addEventListener("change", () => set({ ablate: parts.heads.value.trim() }));
  parts.mode.addEventListener("change", () => set({ ablation: parts.mode.value }));
  parts.colours.addEventListener("change", () => set({ colours: parts.colours.value }));
}

/** The predictions before and after, a row a position; on a next-token model, the token that
 * really comes next in the text beside them, and each guess that is it marked ✓. */
function table(answer) {
  const next = answer.predicts === "next_token";
  const titles = [
    "position",
    "token",
    ...(next ? ["next in the text"] : []),
    "top guess",
    "after ablation",
    "KL (nats)",
    "logit change",
  ];
  const head = el(
    "tr",
    {},
    titles.map((t) => el("th", { text: t, attrs: { scope: "col" } })),
  );
  const rows = answer.positions.map((row) => {
    const [before] = row.base;
    const [after] = row.ablated;
    const changed = before.token_id !== after.token_id;
    const truth = next ? answer.tokens[row.position + 1] : undefined;
    const mark = (guess) => (truth !== undefined && guess.token === truth ? " ✓" : "");
    return el("tr", { className: changed ? "changed" : "" }, [
      el("td", { text: String(row.position) }),
      el("td", { className: "tok", text: answer.tokens[row.position] }),
      ...(next
        ? [
            el("td", {
              className: "tok",
              text: truth ?? "—",
              attrs: { title: truth === undefined ? "the text ends here" : "the token the text really has next" },
            }),
          ]
        : []),
      el("td", { className: "tok", text: `${before.token} ${(100 * before.probability).toFixed(1)}%${mark(before)}` }),
      el("td", {
        className: "tok",
        text: `${after.token} ${(100 * after.probability).toFixed(1)}%${mark(after)}${changed ? " ←" : ""}`,
      }),
      el("td", { text: row.kl.toFixed(4) }),
      el("td", { text: row.logit_change.toFixed(3) }),
    ]);
  });
  return [
    el("caption", {
      text: next
        ? "✓: the guess is the token the text really has next; ←: ablation changed the top guess"
        : "←: ablation changed the top guess",
    }),
    el("thead", {}, [head]),
    el("tbody", {}, rows),
  ];
}

export async function render({ session, state, info, parts, set, open, isStale }) {
  const heads = parseHeads(state.ablate, info);
  parts.heads.value = state.ablate || "";
  parts.mode.value = state.ablation === "mean" ? "mean" : "zero";
  parts.colours.value = state.colours;
  parts.addCurrent.onclick = () =>
    set({ ablate: formatHeads([...parseHeads(state.ablate, info), { layer: state.layer, head: state.head }]) });
  parts.addCurrent.textContent = `Add the open head (${state.layer}.${state.head})`;
  if (!heads.length) {
    parts.summary.textContent =
      "Name the heads to switch off as layer.head (for example 3.0, 3.4), or add the open head.";
    parts.results.hidden = true;
    return null;
  }
  parts.results.hidden = false;
  const answer = await session.ablate({ heads, mode: parts.mode.value, layer: state.layer, head: state.head });
  if (isStale()) return null;
  const changed = answer.positions.filter((r) => r.base[0].token_id !== r.ablated[0].token_id).length;
  const meanKl = answer.positions.reduce((s, r) => s + r.kl, 0) / Math.max(1, answer.positions.length);
  const largest = Math.max(...answer.attention_change.flat());
  parts.summary.textContent = `Switched off (${answer.mode}): ${formatHeads(answer.ablated)}.${answer.predicts === "none" ? " This model has no language-model head, so only the maps' change is shown: pick SmolLM2 above to see the predictions change too." : ""}`;
  parts.metrics.replaceChildren(
    ...(answer.predicts === "none"
      ? [metricCard("predictions", "no LM head")]
      : [
          metricCard("top guesses changed", `${changed} of ${answer.positions.length}`),
          metricCard("mean KL (nats)", meanKl.toFixed(4)),
        ]),
    metricCard("largest head change (mean TV)", largest.toFixed(3)),
  );
  parts.table.replaceChildren(...(answer.positions.length ? table(answer) : []));
  const labels = headLabels(info);
  const marks = answer.ablated.map((h) => ({
    type: "rect",
    x0: h.head - 0.5,
    x1: h.head + 0.5,
    y0: h.layer - 0.5,
    y1: h.layer + 0.5,
    line: { color: "#e4572e", width: 2 },
  }));
  await drawHeatmap(parts.change, answer.attention_change, labels.layers, labels.heads, {
    title: "how far each head's rows moved (mean total variation) · switched-off heads outlined · click to open",
    zmin: 0,
    zmax: Math.max(largest, 1e-9),
    hoverName: "moved",
    numbered: false,
    shapes: marks,
    height: Math.min(820, Math.max(300, 22 * info.num_layers + 150)),
  });
  onCellClick(parts.change, (layer, head) => open(layer, head));
  if (isStale()) return null;
  const tokens = answer.tokens;
  // The open head both ways in the chosen colour scale.
  const common = { xTitle: "key", yTitle: "query", hoverName: "weight" };
  const before = weightScale(state.colours, answer.weights);
  await drawHeatmap(parts.before, before.options.z, tokens, tokens, {
    ...common,
    ...before.options,
    title: `layer ${answer.layer} · head ${answer.head}, as computed`,
  });
  if (isStale()) return null;
  const after = weightScale(state.colours, answer.ablated_weights);
  await drawHeatmap(parts.after, after.options.z, tokens, tokens, {
    ...common,
    ...after.options,
    title: "with the heads switched off",
  });
  return {
    kind: "head",
    element: parts.after,
    layer: answer.layer,
    head: answer.head,
    tokens,
    matrix: answer.ablated_weights,
    matrixName: "ablated_weights",
    title: `layer ${answer.layer} head ${answer.head} with ${formatHeads(answer.ablated)} switched off (${answer.mode})`,
    colour: after.colour,
    colourBar: after.bar,
    suffix: `-ablated-${answer.mode}-${answer.ablated.map((h) => `L${h.layer}H${h.head}`).join("-")}`,
    payload: { what: "an intervention: these heads switched off, not what the model computed", ...answer },
  };
}
