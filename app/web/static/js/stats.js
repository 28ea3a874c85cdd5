// Row statistics of attention matrices (each row a softmax distribution).

/** Mean Shannon entropy of the rows, in nats. */
export function meanEntropy(matrix) {
  let sum = 0;
  for (const row of matrix) {
    for (const p of row) if (p > 0) sum -= p * Math.log(p);
  }
  return sum / matrix.length;
}

/** Scaled scores with null (plotted blank, shown as −∞) where the mask forbids the pair. */
export function maskedScores(detail) {
  return detail.scaled_scores.map((row, q) => row.map((v, k) => (detail.mask[q][k] ? v : null)));
}

/** Mean of each row's largest weight. */
export function meanMax(matrix) {
  return matrix.reduce((acc, row) => acc + Math.max(...row), 0) / matrix.length;
}

/** The largest value of each f x f block of a matrix (nulls skipped; null if a block has only
 * nulls): (rows x cols) -> (ceil(rows/f) x ceil(cols/f)). */
export function poolMax(matrix, f) {
  const rows = Math.ceil(matrix.length / f);
  const cols = Math.ceil(matrix[0].length / f);
  const out = Array.from({ length: rows }, () => new Array(cols).fill(null));
  matrix.forEach((row, r) => {
    const target = out[Math.floor(r / f)];
    row.forEach((v, c) => {
      if (v === null) return;
      const j = Math.floor(c / f);
      if (target[j] === null || v > target[j]) target[j] = v;
    });
  });
  return out;
}

/** Labels for blocks of f tokens: "first token (i–j)". */
export function poolLabels(tokens, f) {
  const out = [];
  for (let i = 0; i < tokens.length; i += f) {
    const j = Math.min(tokens.length, i + f) - 1;
    out.push(j > i ? `${tokens[i]} (${i}–${j})` : tokens[i]);
  }
  return out;
}
