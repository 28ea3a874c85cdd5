// Colour maps for canvas drawing (Plotly draws its own charts).

const VIRIDIS = [
  [68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
];

/** 256-entry lookup table: [r, g, b] for t in [0, 1]. */
export const VIRIDIS_LUT = Array.from({ length: 256 }, (_, i) => {
  const t = (i / 255) * (VIRIDIS.length - 1);
  const lo = Math.floor(t);
  const hi = Math.min(lo + 1, VIRIDIS.length - 1);
  const f = t - lo;
  return VIRIDIS[lo].map((c, k) => Math.round(c + (VIRIDIS[hi][k] - c) * f));
});

/** Distinct colours for overlaying heads (colour-blind friendly, Okabe–Ito). */
export const HEAD_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000"];
