// Colour maps for canvas drawing (Plotly draws its own charts).

const VIRIDIS = [
  [68, 1, 84],
  [72, 40, 120],
  [62, 74, 137],
  [49, 104, 142],
  [38, 130, 142],
  [31, 158, 137],
  [53, 183, 121],
  [109, 205, 89],
  [180, 222, 44],
  [253, 231, 37],
];

/** 256-entry lookup table: [r, g, b] for t in [0, 1]. */
export const VIRIDIS_LUT = Array.from({ length: 256 }, (_, i) => {
  const t = (i / 255) * (VIRIDIS.length - 1);
  const lo = Math.floor(t);
  const hi = Math.min(lo + 1, VIRIDIS.length - 1);
  const f = t - lo;
  return VIRIDIS[lo].map((c, k) => Math.round(c + (VIRIDIS[hi][k] - c) * f));
});

/** A weight in [0, 1] as a CSS colour on the viridis scale (the heatmaps' own). */
export function viridis(value) {
  const [r, g, b] = VIRIDIS_LUT[Math.max(0, Math.min(255, Math.round(value * 255)))];
  return `rgb(${r},${g},${b})`;
}

function channel(c) {
  const v = c / 255;
  return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
}

/** WCAG contrast ratio of an [r, g, b] colour against white. */
export function contrastOnWhite([r, g, b]) {
  const luminance = 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  return 1.05 / (luminance + 0.05);
}

function hslToRgb(h, s, l) {
  const a = s * Math.min(l, 1 - l);
  const f = (n) => {
    const k = (n + h / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

/**
 * A colour for head `h` of a layer with `count` heads: every head its own hue (evenly spread,
 * neighbours alternately lighter and darker so they stay apart), each dark enough for text on
 * white (contrast >= 4.5:1, WCAG AA).
 */
export function headColour(h, count) {
  const hue = (h * 360) / Math.max(count, 1) + 210;
  let lightness = h % 2 ? 0.5 : 0.38;
  let rgb = hslToRgb(hue % 360, 0.85, lightness);
  while (contrastOnWhite(rgb) < 4.6 && lightness > 0.05) {
    lightness -= 0.02;
    rgb = hslToRgb(hue % 360, 0.85, lightness);
  }
  return `rgb(${rgb.join(", ")})`;
}

const SUPERSCRIPT = "⁰¹²³⁴⁵⁶⁷⁸⁹";

/** 10^d written as it is read ("10⁻⁶"); 10^0 is "1". */
export function decade(d) {
  if (d === 0) return "1";
  return `10${d < 0 ? "⁻" : ""}${[...String(Math.abs(d))].map((digit) => SUPERSCRIPT[digit]).join("")}`;
}

// Colour bars for the exported pictures: {label, note?, ticks: [{at, text}], colourAt(t)}, where t
// (and a tick's `at`) is a place on the bar from 0 (bottom) to 1 (top); `note` names a scale that
// is not linear ("log colours, 10⁻⁶ to 1"). Every bar here is viridis from bottom to top.

/** Values from 0 to `top` in linear colours (viridis(v / top)). */
export function linearBar(top = 1, label = "weight") {
  const text = (v) => (top === 1 ? String(v) : String(Number(v.toPrecision(2))));
  return { label, ticks: [0, 0.25, 0.5, 0.75, 1].map((at) => ({ at, text: text(at * top) })), colourAt: viridis };
}

/** Weights in log colours: one tick per decade from 10^floor to 1. */
export function logBar(floor, label = "weight (log)") {
  const ticks = Array.from({ length: 1 - floor }, (_, i) => ({ at: 1 - (floor + i) / floor, text: decade(floor + i) }));
  return { label, note: `log colours, ${decade(floor)} to 1`, ticks, colourAt: viridis };
}

/** Weights drawn by the brightness of their square root (the all-heads grid's thumbnails). */
export function sqrtBar(label = "weight") {
  const ticks = [0, 0.05, 0.25, 0.5, 1].map((w) => ({ at: Math.sqrt(w), text: String(w) }));
  return { label, note: "colours: √weight", ticks, colourAt: viridis };
}

/** Signed values from -1 to 1 in `colour(v)`'s colours (a difference of weights). */
export function signedBar(colour, label) {
  const ticks = [-1, -0.5, 0, 0.5, 1].map((v) => ({
    at: (v + 1) / 2,
    text: v > 0 ? `+${v}` : String(v).replace("-", "−"),
  }));
  return { label, ticks, colourAt: (t) => colour(2 * t - 1) };
}
