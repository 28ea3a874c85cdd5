// Deep zoom's map as Plotly draws it: its size (square cells, the colour bar beside them), the
// trace of one window's values in linear or log colours, and token labels where they fit.

import { BASE_CONFIG, COLORSCALE, escapeLabel, logColours } from "../views/plot.js";

const LABEL_PIXELS = 14; // room a token label needs across
const MARGIN = { t: 80, r: 60, b: 10, l: 80 }; // around the map: position labels, the colour bar
const POSITION_TICKS = { tickmode: "auto", ticktext: undefined, tickvals: undefined }; // Plotly's own
const FAST_DRAW_CELLS = 40_000;
// "Autoscale" would redraw the coarse image at full size; double-click asks for the whole map.
export const PLOT_CONFIG = {
  ...BASE_CONFIG,
  modeBarButtonsToRemove: [...BASE_CONFIG.modeBarButtonsToRemove, "autoScale2d"],
};

/** The map's height and its plot area's width and square side (pixels) in element `el`: as
 * tall as the area is wide, within 320-760 pixels. */
export function mapGeometry(el) {
  const area = (el.clientWidth || 600) - MARGIN.l - MARGIN.r;
  const height = Math.max(320, Math.min(760, area + MARGIN.t + MARGIN.b));
  return { height, area, side: Math.min(area, height - MARGIN.t - MARGIN.b) };
}

/**
 * The heatmap of one window: values[i][j] for queries from r0 + i·cell and keys from
 * c0 + j·cell, coloured on `scale` ("linear": the weights from 0 to the window's largest;
 * "log": their log10 from 10^-6 to 1), its colour bar beside the square map.
 */
export function mapTrace(values, { r0, c0, cell }, scale, { area, side }) {
  const bar = { thickness: 10, outlinewidth: 0, x: (side + 10) / area, xanchor: "left" };
  const log = scale === "log" ? logColours(values) : null;
  return {
    type: "heatmap",
    ...(log ? { ...log, colorbar: { ...bar, ...log.colorbar } } : { z: values, zmin: 0, colorbar: bar }),
    x0: c0 + (cell - 1) / 2,
    dx: cell,
    y0: r0 + (cell - 1) / 2,
    dy: cell,
    colorscale: COLORSCALE,
    // Above 40,000 cells, one image a pixel a cell (a third faster to draw than a rectangle each).
    zsmooth: values.length * (values[0]?.length || 0) > FAST_DRAW_CELLS ? "fast" : false,
    hoverinfo: "none",
  };
}

/** The layout of the window [r0, r1) × [c0, c1), with `shapes` drawn over it. */
export function mapLayout({ r0, r1, c0, c1 }, { height }, shapes) {
  return {
    height,
    margin: MARGIN,
    // Square cells: a unit of y as long as a unit of x, the plot area shrunk to fit (never the
    // ranges widened), at the top left.
    xaxis: {
      range: [c0 - 0.5, c1 - 0.5],
      side: "top",
      tickangle: -45,
      ...POSITION_TICKS,
      title: { text: "" },
      constrain: "domain",
      constraintoward: "left",
    },
    yaxis: {
      range: [r1 - 0.5, r0 - 0.5],
      ...POSITION_TICKS,
      scaleanchor: "x",
      constrain: "domain",
      constraintoward: "top",
    },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { family: "system-ui, sans-serif" },
    dragmode: "zoom",
    shapes,
  };
}

/** Ticks for positions start..stop-1 of `tokens` over `pixels`: each token's label where every
 * one gets room, Plotly's own position numbers otherwise. */
export function tokenLabels(tokens, start, stop, pixels) {
  const span = stop - start;
  if (span * LABEL_PIXELS > pixels) return POSITION_TICKS;
  const tickvals = Array.from({ length: span }, (_, i) => start + i);
  return { tickmode: "array", tickvals, ticktext: tickvals.map((i) => escapeLabel(tokens[i])) };
}
