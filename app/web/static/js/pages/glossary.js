// The glossary page: each picture is a small attention pattern drawn from its definition
// (rows: queries, columns: keys, darker = more weight), or a sentence cut into tokens.

const N = 8; // tokens in a pattern
const SVG = "http://www.w3.org/2000/svg";

/** Row-stochastic weights (N x N) of each named pattern. */
const PATTERNS = {
  previous: {
    label: "a previous-token head: each row's weight on the token before it",
    weight: (i, j) => (i === 0 ? Number(j === 0) : Number(j === i - 1)),
  },
  causal: {
    label: "a causal mask: each row sees itself and earlier keys (grey: masked)",
    weight: (i, j) => (j <= i ? 1 / (i + 1) : null),
  },
  sink: {
    label: "an attention sink: most of every row on the first token",
    weight: (i, j) => (j > i ? null : i === 0 ? 1 : j === 0 ? 0.8 : 0.2 / i),
  },
  // the sequence A B C D A B C D: in the second copy each row attends to the token after its earlier copy
  duplicate: {
    label: "a duplicate-token head on a sequence written twice: each token of the second copy on its earlier copy",
    weight: (i, j) => (j > i ? null : i < 4 ? Number(j === 0) : Number(j === i - 4)),
  },
  local: {
    label: "a local window head: each row spread over its neighbours",
    weight: (i, j) => (Math.abs(i - j) <= 1 ? 1 / (1 + Number(i > 0) + Number(i < N - 1)) : 0),
  },
  self: { label: "a self head: each row on its own token", weight: (i, j) => Number(i === j) },
  separator: {
    label: "a separator head: every row on the punctuation (tokens 3 and 7)",
    weight: (_i, j) => (j === 3 || j === 7 ? 0.5 : 0),
  },
  induction: {
    label: "an induction head on a sequence written twice: the stripe one after the earlier copy",
    weight: (i, j) => (j > i ? null : i < 4 ? Number(j === 0) : Number(j === i - 3)),
  },
};

function drawPattern(box, name) {
  const pattern = PATTERNS[name];
  const cell = 14;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", String(N * cell));
  svg.setAttribute("height", String(N * cell));
  svg.setAttribute("aria-hidden", "true");
  for (let i = 0; i < N; i++) {
    for (let j = 0; j < N; j++) {
      const w = pattern.weight(i, j);
      const rect = document.createElementNS(SVG, "rect");
      Object.entries({ x: j * cell, y: i * cell, width: cell - 1, height: cell - 1 }).forEach(([k, v]) =>
        rect.setAttribute(k, String(v)),
      );
      rect.setAttribute("fill", w === null ? "#d9dbe1" : `rgba(59, 76, 202, ${Math.max(0.04, w)})`);
      svg.append(rect);
    }
  }
  box.setAttribute("aria-label", `Picture: ${pattern.label}.`);
  const caption = document.createElement("span");
  caption.className = "status";
  caption.textContent = pattern.label;
  box.replaceChildren(svg, caption);
}

function drawTokens(box) {
  const pieces = ["The", "␣animal", "␣didn", "'", "t", "␣cross", "␣the", "␣street"];
  box.setAttribute("aria-label", `Picture: "The animal didn't cross the street" in tokens: ${pieces.join(" ")}.`);
  const chips = document.createElement("div");
  chips.className = "tokens";
  for (const piece of pieces) {
    const chip = document.createElement("span");
    chip.className = "token";
    chip.textContent = piece;
    chips.append(chip);
  }
  const caption = document.createElement("span");
  caption.className = "status";
  caption.textContent = "a sentence in tokens; ␣ marks a token that starts with a space";
  box.replaceChildren(chips, caption);
}

for (const box of document.querySelectorAll("[data-picture]")) {
  if (box.dataset.picture === "tokens") drawTokens(box);
  else drawPattern(box, box.dataset.picture);
}
