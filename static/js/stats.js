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
