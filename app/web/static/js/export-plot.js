// A Plotly chart as the export buttons save it: drawn again off screen at slide size (a PNG at
// least 1,600 pixels wide), under the figure's heading, on white, its colour bars labelled and
// the log scale named where the colours are log.

import { logBar } from "./colors.js";
import { headingLines, svgToPng } from "./export-svg.js";
import { escapeLabel, LOG_FLOOR, TITLE_LINE, TOOLBAR_BAND } from "./views/plot.js";

const MIN_WIDTH = 800; // CSS pixels; the PNG is drawn at twice that (export-svg.js's svgToPng)
const FONT = 14; // pixels, the heading's
const LINE = Math.ceil(FONT * 1.3); // pixels a line of it takes (Plotly's line spacing)
// Pixels from the top to where Plotly sets a title anchored at its top (it sets the first line
// about a line higher than that: the title's first line starts about 8 pixels down).
const TITLE_Y = 26;
const FONTS = { title: FONT, text: FONT, subtitle: FONT };
const ROLE = {
  title: (text) => `<b>${text}</b>`,
  text: (text) => text,
  subtitle: (text) => `<span style="color:#555">${text}</span>`,
};

const unescapeLabel = (text) =>
  text.replace(/&#34;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");

/** The title a chart shows on screen (escaped, wrapped with <br>), or "". */
function titleText(layout) {
  return (typeof layout.title === "string" ? layout.title : layout.title?.text) || "";
}

const isLog = (trace) => trace.type === "heatmap" && trace.zmin === LOG_FLOOR && trace.zmax === 0;

/** A heatmap's colour bar as exported: thicker, and named where its colours are log. */
function exportedTrace(trace) {
  if (trace.type !== "heatmap" || trace.showscale === false) return { ...trace };
  const title = isLog(trace) ? { title: { text: "weight (log)", side: "right" } } : {};
  return { ...trace, colorbar: { ...(trace.colorbar || {}), thickness: 16, ...title } };
}

/**
 * The chart drawn in `el` as a PNG or SVG blob, titled with `head` (export-svg.js's
 * figureHeading; its subtitle, when it has none, the chart's own title).
 */
export async function plotImage(el, format, head) {
  const shown = el._fullLayout || {};
  const width = Math.max(MIN_WIDTH, Math.round(shown.width || el.clientWidth || 0));
  const layout = JSON.parse(JSON.stringify(el.layout));
  const oldTitle = titleText(layout);
  const note = el.data.some(isLog) ? logBar(LOG_FLOOR).note : "";
  const subtitle = head.subtitle ?? unescapeLabel(oldTitle.replace(/<br>/g, " "));
  const lines = headingLines({ ...head, subtitle }, width - 20, note, FONTS);
  // The top margin held the title below the tool bar's band and the column labels above the
  // map (`above`): the exported title takes the band's place and the old title's.
  const oldTop = layout.margin?.t ?? 80;
  const oldLines = oldTitle ? oldTitle.split("<br>").length : 0;
  const above = Math.max(0, oldTop - (oldLines ? TOOLBAR_BAND + oldLines * TITLE_LINE + 8 : 10));
  const top = TITLE_Y + lines.length * LINE + 4 + above;
  const height = Math.round((shown.height || layout.height || 450) - oldTop + top);
  Object.assign(layout, {
    width,
    height,
    paper_bgcolor: "#fff",
    margin: { ...(layout.margin || {}), t: top },
    title: {
      text: lines.map(({ text, role }) => ROLE[role](escapeLabel(text))).join("<br>"),
      font: { size: FONT },
      x: 10 / width,
      xref: "container",
      xanchor: "left",
      y: 1 - TITLE_Y / height,
      yref: "container",
      yanchor: "top",
    },
  });
  const figure = { data: el.data.map(exportedTrace), layout, config: { staticPlot: true } };
  const svg = sharpCells(await window.Plotly.toImage(figure, { format: "svg", width, height, imageDataOnly: true }));
  return format === "svg" ? new Blob([svg], { type: "image/svg+xml" }) : svgToPng(svg, width, height);
}

/** Plotly's SVG with its heatmaps' images (a pixel a cell, for large maps) drawn without blur
 * when scaled up, as the page draws them. */
function sharpCells(svgText) {
  const doc = new DOMParser().parseFromString(svgText, "image/svg+xml");
  const images = doc.querySelectorAll("image");
  if (!images.length) return svgText;
  for (const image of images) {
    image.setAttribute("image-rendering", "optimizeSpeed"); // SVG 1.1 readers (Inkscape ...)
    image.style.imageRendering = "pixelated";
  }
  return new XMLSerializer().serializeToString(doc);
}
