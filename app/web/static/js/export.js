// Export: PNG and SVG of what a view shows, and its numbers as JSON or CSV.
//
// Each view's render() returns a description of what it shows (`current`):
//   {kind: "head" | "svg" | "grid", element, layer, head, tokens, matrix, rowTokens?, suffix?,
//    payload?, matrixName?, where?, blank?, corner?, title?, subtitle?, scope?, colour?,
//    colourBar?, notes?, keys?, thumbnails?}
// matrix is the (rows x cols) map behind the view (rowTokens label its rows when they are not
// the tokens); payload is extra JSON that says what the numbers are (a counterfactual's scale
// and temperature, the overlaid heads ...); suffix names the file after it; matrixName is the
// JSON field of matrix ("weights" unless the view shows something else); where names the file
// when it is not one head ("all-heads", "rollout-L5" ...); blank is what a null cell is in CSV
// ("-inf": a masked score), corner the CSV's top-left cell (by default: query \ key).
// The pictures (export-svg.js) carry a heading: the model, then `scope` (which heads, when not
// one: "layer 2 · heads 0 and 3") or the layer and head, the text, and `subtitle` (else `title`,
// else a chart's own title): what the picture shows. A heatmap of at most 128 tokens with
// colour(value) (a CSS colour) saves as vector SVG, with colourBar (colors.js) beside it;
// "svg" views save their drawing with `notes` (lines of text) and `keys` ([{text, colour}]) under
// the heading; "grid" carries `thumbnails` (export-grid.js); any other chart is Plotly's image.

import { gridSvg } from "./export-grid.js";
import { plotImage } from "./export-plot.js";
import { figureHeading, framedSvg, svgToPng, vectorHeatmapSvg } from "./export-svg.js";

const VECTOR_SVG_LIMIT = 128; // tokens: above this a heatmap's SVG holds the map as an image
const PNG_WIDTH = 1600; // pixels at least: a slide's width
const GRID_PNG_WIDTH = 2000; // the all-heads grid's small maps need more

/** Saves `blob` as the file `name` (the browser's download). */
export function download(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** A file name's part made of `text`: letters, digits and dashes, at most 40. */
export function slug(text) {
  return (
    String(text)
      .replace(/[^a-z0-9]+/gi, "-")
      .replace(/^-|-$/g, "")
      .slice(0, 40) || "attention"
  );
}

// Spreadsheet programs run cells that start with these characters as formulas.
const FORMULA_START = /^[=+\-@\t\r]/;

function csvCell(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return String(value);
  let text = String(value);
  if (FORMULA_START.test(text)) text = `'${text}`;
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** Rows of cells (the header first) as CSV; empty cells for null, formulas defused. */
export function csvTable(rows) {
  return `${rows.map((row) => row.map(csvCell).join(",")).join("\r\n")}\r\n`;
}

/** A matrix as CSV; null cells (masked scores) are written as `blank`. */
export function toCsv(colTokens, matrix, rowTokens = colTokens, blank = "-inf", corner = "query \\ key") {
  const lines = [[corner, ...colTokens].map(csvCell).join(",")];
  matrix.forEach((row, i) =>
    lines.push([csvCell(rowTokens[i]), ...row.map((v) => (v === null ? blank : String(v)))].join(",")),
  );
  return `${lines.join("\r\n")}\r\n`;
}

function inlineSvg(element) {
  // The page's stylesheet does not travel with the file: carry the text styles inline.
  const copy = element.cloneNode(true);
  copy.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  copy.setAttribute("font-family", "ui-monospace, Menlo, monospace");
  copy.setAttribute("font-size", "12");
  for (const text of copy.querySelectorAll("text.dim")) text.setAttribute("opacity", "0.35");
  return new XMLSerializer().serializeToString(copy);
}

/** The picture of what a view shows, as an SVG or PNG blob. */
async function picture(format, current, info, notify) {
  const head = figureHeading(current, info);
  let drawn; // {svg, width, height}
  if (current.kind === "grid") {
    drawn = gridSvg(current.thumbnails, head);
  } else if (current.kind === "svg") {
    drawn = framedSvg(inlineSvg(current.element), current.element.getBoundingClientRect(), head, current);
  } else {
    if (!current.element) throw new Error("This view has no chart to export.");
    // A map with its numbers is drawn by our own SVG in both formats: square cells, whatever
    // the shape of the chart on the page (the PNG is that SVG, rasterised).
    const long = (current.tokens?.length ?? 0) > VECTOR_SVG_LIMIT;
    if (!current.matrix || !current.colour || long) {
      if (format === "svg" && long)
        notify(
          `Above ${VECTOR_SVG_LIMIT} tokens the SVG holds the map itself as an embedded image (labels and axes stay vector).`,
        );
      return plotImage(current.element, format, head);
    }
    drawn = vectorHeatmapSvg(current, head);
  }
  if (format === "svg") return new Blob([drawn.svg], { type: "image/svg+xml" });
  return svgToPng(drawn.svg, drawn.width, drawn.height, current.kind === "grid" ? GRID_PNG_WIDTH : PNG_WIDTH);
}

export async function exportCurrent(format, current, info, notify = () => {}) {
  const where =
    current.where || (current.kind === "grid" ? "all-heads" : `L${current.layer ?? 0}-H${current.head ?? 0}`);
  const base = `${slug(info.model)}-${where}${current.suffix || ""}`;
  if (format === "png" || format === "svg")
    return download(`${base}.${format}`, await picture(format, current, info, notify));
  if (!current.matrix && !current.payload) throw new Error("This view has no numbers to export.");
  if (format === "json") {
    const payload = {
      model: info.model,
      text: info.text,
      text_pair: info.textPair || null,
      layer: current.layer,
      head: current.head,
      tokens: current.tokens,
      ...(current.rowTokens ? { row_tokens: current.rowTokens } : {}),
      ...(current.matrix ? { [current.matrixName || "weights"]: current.matrix } : {}),
      ...(current.payload || {}),
    };
    return download(`${base}.json`, new Blob([JSON.stringify(payload, null, 1)], { type: "application/json" }));
  }
  if (!current.matrix) throw new Error("This view's numbers do not form one table: export them as JSON.");
  return download(
    `${base}.csv`,
    new Blob([toCsv(current.tokens, current.matrix, current.rowTokens, current.blank ?? "-inf", current.corner)], {
      type: "text/csv",
    }),
  );
}
