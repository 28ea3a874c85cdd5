// Plotly helpers shared by every view. Token labels are user text: Plotly renders a small
// HTML subset in labels and hovers, so every label passes through escapeLabel first, and
// axes are numeric (tickvals/ticktext) so repeated tokens never merge into one column.

import { decade, linearBar, logBar, viridis } from "../colors.js";

export const COLORSCALE = "Viridis";

// Log colours: the decades from 10^-6 to 1. A row spread evenly over 8,192 keys gives each
// 1.2 × 10^-4; zero (a masked key) and anything under 10^-6 take the lowest colour.
export const LOG_FLOOR = -6;

/** log10 of a weight, clipped at 10^-6 (zero, a masked key, too). */
const logWeight = (w) => (w > 0 ? Math.max(LOG_FLOOR, Math.log10(w)) : LOG_FLOOR);

/** Attention weights (rows of numbers in [0, 1]) for a log colour scale: their log10, clipped
 * at 10^-6, the colour range, and a colour bar labelled with the weights (10⁻⁶ ... 1). */
export function logColours(weights) {
  const z = weights.map((row) => row.map(logWeight));
  const decades = Array.from({ length: 1 - LOG_FLOOR }, (_, i) => LOG_FLOOR + i);
  return {
    z,
    zmin: LOG_FLOOR,
    zmax: 0,
    colorbar: { tickmode: "array", tickvals: decades, ticktext: decades.map(decade) },
  };
}

/**
 * A map of attention weights (rows of numbers in [0, 1]) in the scale the user chose (the
 * state's `colours`): `options` for drawHeatmap ({z, zmin, zmax, colorbar, hoverValues}; draw
 * options.z), and for the exports `colour(weight)`, the same colour as a CSS string, and `bar`,
 * its colour bar (colors.js).
 * "log": log10 of each weight from 10^-6 to 1, hovering still reads the weight; "linear": the
 * weight from 0 to `top` (1 unless the map's own largest value should top the scale).
 */
export function weightScale(scale, weights, top = 1) {
  if (scale === "log") {
    const colour = (w) => viridis(1 - logWeight(w) / LOG_FLOOR);
    return { options: { ...logColours(weights), hoverValues: weights }, colour, bar: logBar(LOG_FLOOR) };
  }
  return { options: { z: weights, zmin: 0, zmax: top }, colour: (w) => viridis(w / top), bar: linearBar(top) };
}

// Offline: no button may send a chart anywhere (plotly.js shows "Share chart..." by default).
export const BASE_CONFIG = {
  responsive: true,
  displaylogo: false,
  showSendToCloud: false,
  showEditInChartStudio: false,
  showLink: false,
  plotlyServerURL: "",
  toImageButtonOptions: { format: "png", scale: 2 },
  modeBarButtonsToRemove: ["select2d", "lasso2d", "sendChartToCloud", "editInChartStudio"],
};

// Plotly decodes numeric entities and only a few named ones (&amp; &lt; &gt; but not &quot;,
// which it would print as is), so a double quote becomes &#34;.
export function escapeLabel(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&#34;");
}

export function formatNumber(x, digits = 4) {
  if (x === null || x === undefined) return "−∞";
  if (!Number.isFinite(x)) return x > 0 ? "∞" : "−∞";
  return Number(x).toFixed(digits);
}

const FAST_DRAW_CELLS = 40_000;
export const TOOLBAR_BAND = 40; // pixels at the top of a chart kept for Plotly's tool bar (26 px tall)
export const TITLE_LINE = 17; // pixels a 13 px title line takes
const TITLE_CHAR = 7.2; // average pixels a character of a 13 px title takes
const TICK_FONT = 12; // px, Plotly's tick labels
const TICK_ROOM = 8; // pixels between a tick label and the plot: the tick (5 px) and a gap
// An axis title sits STANDOFF pixels beyond its axis's tick labels, however long they are
// (Plotly measures them when title.standoff is set); the margin holds its AXIS_TITLE_BAND.
const AXIS_TITLE_FONT = 13;
const STANDOFF = 6;
const AXIS_TITLE_BAND = STANDOFF + Math.ceil(AXIS_TITLE_FONT * 1.3) + 2;
const LABEL_MAX = 180; // pixels of a tick label the margins make room for (a longer one is cut)

/** An axis title that keeps clear of the axis's tick labels; `text` is raw. */
export function axisTitle(text) {
  return text ? { text: escapeLabel(text), standoff: STANDOFF, font: { size: AXIS_TITLE_FONT } } : { text: "" };
}

let measurer = null;

/** Pixels the widest of `labels` (raw text) takes as a 12 px tick label, at most LABEL_MAX. */
function labelPixels(labels) {
  measurer ??= document.createElement("canvas").getContext("2d");
  measurer.font = `${TICK_FONT}px system-ui, sans-serif`;
  let widest = 0;
  for (const label of new Set(labels)) widest = Math.max(widest, measurer.measureText(String(label)).width);
  return Math.min(LABEL_MAX, Math.ceil(widest));
}

/** Title text (raw) broken into lines that fit `width` pixels, escaped, joined with <br>. */
export function wrapTitle(text, width) {
  const perLine = Math.max(12, Math.floor((width - 16) / TITLE_CHAR));
  const lines = [];
  let line = "";
  for (const word of String(text).split(" ")) {
    let rest = word;
    while (rest.length > perLine) {
      // a word longer than a line (a long token) is split
      if (line) lines.push(line);
      lines.push(rest.slice(0, perLine));
      rest = rest.slice(perLine);
      line = "";
    }
    if (!rest) continue;
    if (line && line.length + 1 + rest.length > perLine) {
      lines.push(line);
      line = rest;
    } else {
      line = line ? `${line} ${rest}` : rest;
    }
  }
  if (line) lines.push(line);
  return { text: lines.map(escapeLabel).join("<br>"), lines: lines.length };
}

/**
 * Layout pieces that keep a title readable at any width: wrapped to the chart's width and set
 * below the tool bar's band, with the top margin grown to fit it and `above` pixels of tick
 * labels drawn above the plot. `title` is raw text.
 */
export function titleLayout(title, width, height, font = 13, above = 0) {
  if (!title) return { margin: { t: 10 + above } };
  const wrapped = wrapTitle(title, width);
  return {
    title: {
      text: wrapped.text,
      font: { size: font },
      x: 8 / width,
      xref: "container",
      xanchor: "left",
      yref: "container",
      y: 1 - TOOLBAR_BAND / height,
      yanchor: "top",
    },
    margin: { t: TOOLBAR_BAND + wrapped.lines * TITLE_LINE + 8 + above },
  };
}

/**
 * Draw (or redraw in place) a heatmap of z[row][col].
 * rows/cols: label arrays (raw user text); options: {title, zmin, zmax, showText, colorscale,
 * xTitle, yTitle, hoverName, height, shapes (Plotly shapes drawn over the map), numbered
 * (false: the labels are unique already, e.g. "L3", and are shown as they are), missingText
 * (written in a null cell when showText: "−∞", a masked score, unless told otherwise),
 * colorbar (merged into the colour bar's settings), hoverValues (what hovering shows when z is
 * not the values themselves: log colours), cellText (raw text written in each cell instead of
 * its number, where cells are large enough: the logit lens's top guesses), hoverText (a
 * line of raw text per cell added to its hover)}.
 */
export async function drawHeatmap(el, z, rows, cols, options = {}) {
  // Each chart in a task of its own: drawing a 512 x 512 map takes ~100-180 ms, and views that
  // draw several must not add them up into one long task.
  await nextTask();
  const name = options.hoverName || "value";
  // Category axes named "index · token": hovers show the token text at any length, and
  // repeated tokens stay separate columns (the ticks show the bare tokens).
  const trace = {
    type: "heatmap",
    z,
    x: categories(cols, options.numbered),
    y: categories(rows, options.numbered),
    colorscale: options.colorscale || COLORSCALE,
    zmin: options.zmin,
    zmax: options.zmax,
    zmid: options.zmid, // 0 for signed data, so the diverging colours meet at zero
    hoverongaps: false,
    // Large maps as one image, a pixel a cell, scaled without blur: about a third faster to
    // draw than a rectangle per cell, and as sharp.
    zsmooth: rows.length * cols.length > FAST_DRAW_CELLS ? "fast" : false,
    showscale: options.showScale ?? true,
    colorbar: { thickness: 10, outlinewidth: 0, ...(options.colorbar || {}) },
  };
  // Where z is not the value itself (log colours), hovering reads the values from customdata.
  if (options.hoverValues) trace.customdata = options.hoverValues;
  const extra = options.hoverText ? "<br>%{hovertext}" : "";
  if (options.hoverText) trace.hovertext = options.hoverText.map((row) => row.map((t) => escapeLabel(t)));
  trace.hovertemplate = `%{y} → %{x}<br>${name} %{${options.hoverValues ? "customdata" : "z"}:.6f}${extra}<extra></extra>`;
  const height = options.height ?? Math.min(820, Math.max(280, 18 * rows.length + 150));
  const width = el.clientWidth || 600;
  const cellWidth = (width - 140) / cols.length;
  const cellHeight = (height - 150) / rows.length;
  if (options.cellText && cellWidth >= 34 && cellHeight >= 13) {
    // Words in the cells (a token each): user text, so escaped like every label.
    trace.text = options.cellText.map((row) => row.map((t) => escapeLabel(t)));
    trace.texttemplate = "%{text}";
    trace.textfont = { size: Math.min(12, Math.floor(cellHeight - 2)) };
  } else if (options.showText && cellWidth >= 34 && cellHeight >= 16) {
    const missing = options.missingText ?? formatNumber(null);
    trace.text = z.map((row) => row.map((v) => (v === null ? missing : formatNumber(v, options.digits ?? 3))));
    trace.texttemplate = "%{text}";
    trace.textfont = { size: 12 };
  }
  // Label every k-th token so labels never overlap (~14 px a label across, ~13 px down).
  const axes = {
    xaxis: { labels: cols, pixels: width - 140, perLabel: 14 },
    yaxis: { labels: rows, pixels: height - 150, perLabel: 13 },
  };
  const xTicks = tokenTicks(axes.xaxis);
  // With a title, the axis title joins it so the two never collide above the plot.
  const title = options.title && options.xTitle ? `${options.title} — columns: ${options.xTitle}` : options.title;
  const xTitle = title ? "" : options.xTitle;
  // Column labels sit above the map, rotated 45°: room for the longest one shown, and for the
  // axis title above them. Margins from the labels' own widths: Plotly's automargin would
  // draw every chart twice.
  const columnLabels = Math.ceil((labelPixels(xTicks.tickvals.map((i) => cols[i])) + TICK_FONT) * Math.SQRT1_2);
  const head = titleLayout(title, width, height, 13, columnLabels + TICK_ROOM + (xTitle ? AXIS_TITLE_BAND : 0));
  const layout = {
    title: head.title,
    margin: {
      t: head.margin.t,
      r: 10,
      b: 10,
      l: labelPixels(rows) + TICK_ROOM + (options.yTitle ? AXIS_TITLE_BAND : 4),
    },
    xaxis: { ...xTicks, type: "category", side: "top", tickangle: -45, title: axisTitle(xTitle) },
    yaxis: { ...tokenTicks(axes.yaxis), type: "category", autorange: "reversed", title: axisTitle(options.yTitle) },
    height,
    shapes: options.shapes || [],
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { family: "system-ui, sans-serif" },
  };
  return window.Plotly.react(el, [trace], layout, { ...BASE_CONFIG, ...(options.config || {}) }).then(() =>
    followZoom(el, axes),
  );
}

/** "index · label" for each label, escaped: unique category names that hovers can show. */
function categories(labels, numbered = true) {
  return labels.map((label, i) => (numbered === false ? escapeLabel(label) : `${i} · ${escapeLabel(label)}`));
}

/** Calls fn(row, col) when a cell of the chart in `el` is clicked (its indices, not labels). */
export function onCellClick(el, fn) {
  el._onCell = fn;
  if (el._cellClicks) return;
  el._cellClicks = true;
  el.on("plotly_click", (event) => {
    const point = event.points?.[0];
    if (!point) return;
    const [row, col] = Array.isArray(point.pointIndex) ? point.pointIndex : [point.pointNumber, point.pointNumber];
    el._onCell(row, col, point);
  });
}

/**
 * Ticks for an axis of tokens: as many labels as fit (`perLabel` pixels each over `pixels`),
 * every k-th token over the visible `range` of indices, so zooming in brings labels back.
 */
export function tokenTicks({ labels, pixels, perLabel }, range = [0, labels.length - 1]) {
  const lo = Math.max(0, Math.ceil(Math.min(...range)));
  const hi = Math.min(labels.length - 1, Math.floor(Math.max(...range)));
  const fit = Math.max(1, Math.floor(pixels / perLabel));
  const every = Math.max(1, Math.ceil((hi - lo + 1) / fit));
  const tickvals = [];
  for (let i = Math.ceil(lo / every) * every; i <= hi; i += every) tickvals.push(i);
  return { tickmode: "array", tickvals, ticktext: tickvals.map((i) => escapeLabel(labels[i])), automargin: false };
}

/** Re-thin an element's token axes whenever the user zooms or pans (or resets). */
function followZoom(el, axes) {
  el._tokenAxes = axes;
  if (el._followsZoom) return;
  el._followsZoom = true;
  el.on("plotly_relayout", (event) => {
    const update = {};
    for (const [name, axis] of Object.entries(el._tokenAxes)) {
      const moved = Object.keys(event).some((k) => k.startsWith(`${name}.range`) || k === `${name}.autorange`);
      if (!moved || !el.layout[name]?.range) continue;
      const ticks = tokenTicks(axis, el.layout[name].range);
      update[`${name}.tickvals`] = ticks.tickvals;
      update[`${name}.ticktext`] = ticks.ticktext;
    }
    if (Object.keys(update).length) window.Plotly.relayout(el, update);
  });
}

/** Any other chart; layout.title may be raw text or {text, font}: it is wrapped and placed
 * below the tool bar like the heatmaps' titles. tokenAxes ({xaxis: {labels, pixels, perLabel}})
 * names axes whose positions are token indices: their labels thin out and follow the zoom.
 * An axis with a title keeps it clear of its tick labels (the margin grows to hold both). */
export async function drawChart(el, traces, layout, config = {}, tokenAxes = {}) {
  await nextTask();
  const { title, ...rest } = layout;
  const text = typeof title === "string" ? title : title?.text;
  const head = titleLayout(text, el.clientWidth || 600, layout.height ?? 450, title?.font?.size ?? 13);
  for (const [name, axis] of Object.entries(tokenAxes)) rest[name] = { ...(rest[name] || {}), ...tokenTicks(axis) };
  for (const [name, axis] of Object.entries(rest)) {
    if (!/^[xy]axis\d*$/.test(name) || !axis?.title?.text) continue;
    rest[name] = { ...axis, automargin: true, title: { standoff: STANDOFF, ...axis.title } };
  }
  return window.Plotly.react(
    el,
    traces,
    {
      paper_bgcolor: "rgba(0,0,0,0)",
      ...rest,
      title: head.title,
      margin: { r: 10, b: 40, l: 50, ...(rest.margin || {}), t: head.margin.t },
    },
    { ...BASE_CONFIG, ...config },
  ).then(() => followZoom(el, tokenAxes));
}

/** Resolves in a new task (after the browser has had a chance to paint and handle input):
 * scheduler.yield where the browser has it, else a message to ourselves; not setTimeout, which
 * browsers hold back 4 ms once timeouts nest five deep (a grid drawn in 20 slices lost 80 ms). */
export function nextTask() {
  if (globalThis.scheduler?.yield) return globalThis.scheduler.yield();
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => resolve();
    channel.port2.postMessage(null);
  });
}

/** Plotly's first heatmap costs about 130 ms more than later ones (compiling its drawing code):
 * pay it while the page is idle, on a tiny map off screen, so the first real one stays short. */
export async function warmPlotly() {
  const scratch = document.createElement("div");
  scratch.setAttribute("aria-hidden", "true");
  scratch.style.cssText = "position:absolute;left:-10000px;top:0;width:300px;height:200px";
  document.body.append(scratch);
  // In two tasks (the axes and layout first, then a heatmap), so neither is a long one.
  await window.Plotly.react(scratch, [], { height: 200 }, BASE_CONFIG);
  await nextTask();
  await window.Plotly.react(
    scratch,
    [
      {
        type: "heatmap",
        z: [
          [0, 1],
          [1, 0],
        ],
        zsmooth: "fast",
      },
    ],
    { height: 200 },
    BASE_CONFIG,
  );
  window.Plotly.purge(scratch);
  scratch.remove();
}

/** warmPlotly in a task of its own once plotly.js is there: a page calls it on opening, so that
 * the cost is paid while its data loads. */
export function warmPlotlySoon() {
  return plotlyReady().then(() => setTimeout(warmPlotly, 0));
}

/** Resolves once plotly.js (loaded with `defer`) is available. */
export function plotlyReady() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  return new Promise((resolve) => {
    window.addEventListener("DOMContentLoaded", () => resolve(window.Plotly), { once: true });
  });
}
