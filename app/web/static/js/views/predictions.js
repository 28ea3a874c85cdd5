// The model's own predictions under a head's map: what it predicts after each token (decoders)
// or at each mask token (encoders with a masked-LM head), and, on hover of a query row, that
// row's top-k. Tokens are always set as text, never as markup.

import { el } from "../dom.js";

const percent = (p) => (p >= 0.995 ? "100%" : p >= 0.001 ? `${(100 * p).toFixed(1)}%` : "<0.1%");

function explain(answer) {
  if (answer.kind === "masked") {
    return answer.positions.length
      ? "What the masked-LM head puts at each mask token, most likely first."
      : `This model predicts masked tokens: write ${answer.mask_token} in the sentence to see its guesses.`;
  }
  return "What the model predicts after each token (its top guess and how sure it is; ✓ where that guess is the text's own next token). Hover a row of the map for its top candidates.";
}

function chip(answer, row) {
  const [top] = row.candidates;
  const hit = row.actual_rank === 0;
  return el("li", { className: `prediction${hit ? " hit" : ""}`, attrs: { "data-position": String(row.position) } }, [
    el("span", { className: "tok", text: answer.tokens[row.position] }),
    el("span", { className: "arrow", text: " → " }),
    el("span", { className: "tok predicted", text: top.token }),
    el("span", { className: "prob", text: ` ${percent(top.probability)}${hit ? " ✓" : ""}` }),
  ]);
}

function describeRow(answer, row) {
  const lead =
    answer.kind === "masked"
      ? `At ${answer.mask_token} (token ${row.position})`
      : `After “${answer.tokens[row.position]}” (token ${row.position})`;
  const list = row.candidates.map((c) => `${c.token} ${percent(c.probability)}`).join(" · ");
  return `${lead}: ${list}`;
}

/** Fills `part` from session.predictions(); returns the answer (or null) for the export. */
export async function drawPredictions(part, session, plot, isStale) {
  if (!part) return null;
  if (!session.predictions) {
    part.hidden = true; // the notebook widget shows maps it was given, without a model
    return null;
  }
  part.hidden = false;
  if (session.meta?.predicts === "none") {
    const name = session.meta.model.split("/").pop();
    const text = `${name} has no language-model head in its checkpoint (it is a sentence encoder, or a base model saved without its head), so it cannot predict tokens: its attention is all there is. A checkpoint saved with its head (BertForMaskedLM, a causal LM) shows its predictions here.`;
    part.replaceChildren(el("h2", { text: "Predictions" }), el("p", { className: "help", text }));
    return null;
  }
  let answer;
  try {
    answer = await session.predictions();
  } catch (err) {
    if (err.name === "AbortError" || isStale()) return null;
    part.replaceChildren(el("h2", { text: "Predictions" }), el("p", { className: "help", text: err.message }));
    return null;
  }
  if (isStale()) return null;
  const detail = el("p", { className: "prediction-detail", attrs: { "aria-live": "polite" } });
  const byPosition = new Map(answer.positions.map((row) => [row.position, row]));
  part.replaceChildren(
    el("h2", { text: "Predictions" }),
    el("p", { className: "help", text: explain(answer) }),
    el(
      "ol",
      { className: "prediction-strip" },
      answer.positions.map((row) => chip(answer, row)),
    ),
    detail,
  );
  if (plot.on && !plot._predictionHover) {
    plot._predictionHover = true;
    plot.on("plotly_hover", (event) => {
      const point = event.points?.[0];
      const rowIndex = Array.isArray(point?.pointIndex) ? point.pointIndex[0] : null;
      const row = plot._predictions?.get(rowIndex);
      plot._predictionDetail.textContent = row ? describeRow(plot._answer, row) : "";
    });
  }
  plot._predictions = byPosition;
  plot._predictionDetail = detail;
  plot._answer = answer;
  return answer;
}
