// Export: PNG and SVG of what a view shows, and its numbers as JSON or CSV.
//
// Each view's render() returns a description of what it shows (`current`):
//   {kind: "head" | "svg" | "grid", element, layer, head, tokens, matrix, rowTokens?, suffix?,
//    payload?, matrixName?, where?, blank?, corner?}
// matrix is the (rows x cols) map behind the view (rowTokens label its rows when they are not
// the tokens); payload is extra JSON that says what the numbers are (a counterfactual's scale
// and temperature, the overlaid heads ...); suffix names the file after it; matrixName is the
// JSON field of matrix ("weights" unless the view shows something else); where names the file
// when it is not one head ("all-heads", "rollout-L5" ...); blank is what a null cell is in CSV
// ("-inf": a masked score), corner the CSV's top-left cell (by default: query \ key).

import { downloadPlot } from "./views/plot.js";

const VECTOR_SVG_LIMIT = 128; // tokens: above this a heatmap's SVG holds the map as an image

function download(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function slug(text) {
  return String(text).replace(/[^a-z0-9]+/gi, "-").replace(/^-|-$/g, "").slice(0, 40) || "attention";
}

// Spreadsheet programs run cells that start with these characters as formulas.
const FORMULA_START = /^[=+\-@\t\r]/;

function csvCell(value) {
  if (typeof value === "number") return String(value);
  let text = String(value);
  if (FORMULA_START.test(text)) text = `'${text}`;
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** A matrix as CSV; null cells (masked scores) are written as `blank`. */
export function toCsv(colTokens, matrix, rowTokens = colTokens, blank = "-inf", corner = "query \\ key") {
  const lines = [[corner, ...colTokens].map(csvCell).join(",")];
  matrix.forEach((row, i) => lines.push([csvCell(rowTokens[i]), ...row.map((v) => (v === null ? blank : String(v)))].join(",")));
  return lines.join("\r\n") + "\r\n";
}

function escapeXml(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** A heatmap as vector SVG: one rect per cell, token labels as text (small maps only). */
export function vectorHeatmapSvg(tokens, matrix, title, colour, rowTokens = tokens) {
  const n = matrix.length;
  const m = matrix[0].length;
  const cell = Math.max(6, Math.min(24, Math.floor(720 / Math.max(n, m))));
  const left = 130;
  const top = 40;
  const bottom = 120;
  const width = left + m * cell + 20;
  const height = top + n * cell + bottom;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="${Math.min(12, cell)}">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${left}" y="20" font-size="14">${escapeXml(title)}</text>`,
  ];
  for (let r = 0; r < n; r++) {
    for (let c = 0; c < m; c++) {
      const v = matrix[r][c];
      if (v === null) continue;
      parts.push(`<rect x="${left + c * cell}" y="${top + r * cell}" width="${cell}" height="${cell}" fill="${colour(v)}"><title>${escapeXml(`${rowTokens[r]} → ${tokens[c]}: ${v}`)}</title></rect>`);
    }
    parts.push(`<text x="${left - 4}" y="${top + r * cell + cell * 0.75}" text-anchor="end">${escapeXml(rowTokens[r])}</text>`);
  }
  for (let c = 0; c < m; c++) {
    const x = left + c * cell + cell * 0.7;
    const y = top + n * cell + 6;
    parts.push(`<text transform="translate(${x},${y}) rotate(60)">${escapeXml(tokens[c])}</text>`);
  }
  parts.push("</svg>");
  return parts.join("");
}

/** An SVG element drawn to a PNG blob (2x), through an image on a canvas. */
async function svgToPng(svgText, width, height) {
  const url = URL.createObjectURL(new Blob([svgText], { type: "image/svg+xml" }));
  try {
    const image = new Image();
    image.src = url;
    await image.decode();
    const canvas = document.createElement("canvas");
    canvas.width = width * 2;
    canvas.height = height * 2;
    const c2d = canvas.getContext("2d");
    c2d.fillStyle = "#fff";
    c2d.fillRect(0, 0, canvas.width, canvas.height);
    c2d.scale(2, 2);
    c2d.drawImage(image, 0, 0, width, height);
    return await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  } finally {
    URL.revokeObjectURL(url);
  }
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

export async function exportCurrent(format, current, info, notify = () => {}) {
  const where = current.where || (current.kind === "grid" ? "all-heads" : `L${current.layer ?? 0}-H${current.head ?? 0}`);
  const base = `${slug(info.model)}-${where}${current.suffix || ""}`;
  if (format === "png" || format === "svg") {
    if (current.kind === "svg") {
      const text = inlineSvg(current.element);
      if (format === "svg") return download(`${base}.svg`, new Blob([text], { type: "image/svg+xml" }));
      const { width, height } = current.element.getBoundingClientRect();
      return download(`${base}.png`, await svgToPng(text, width, height));
    }
    if (current.kind === "grid") {
      if (format === "svg") throw new Error("The all-heads grid is a picture of pixels: export it as PNG (or its numbers as JSON).");
      return download(`${base}.png`, await current.toPng());
    }
    if (!current.element) throw new Error("This view has no chart to export.");
    const n = current.tokens?.length ?? Infinity;
    if (format === "svg" && current.matrix && current.colour && n <= VECTOR_SVG_LIMIT) {
      const svg = vectorHeatmapSvg(current.tokens, current.matrix, current.title || base, current.colour, current.rowTokens);
      return download(`${base}.svg`, new Blob([svg], { type: "image/svg+xml" }));
    }
    if (format === "svg") notify(`Above ${VECTOR_SVG_LIMIT} tokens the SVG holds the map itself as an embedded image (labels and axes stay vector).`);
    return downloadPlot(current.element, format, base);
  }
  if (!current.matrix && !current.payload) throw new Error("This view has no numbers to export.");
  if (format === "json") {
    const payload = {
      model: info.model, text: info.text, text_pair: info.textPair || null, layer: current.layer, head: current.head,
      tokens: current.tokens, ...(current.rowTokens ? { row_tokens: current.rowTokens } : {}),
      ...(current.matrix ? { [current.matrixName || "weights"]: current.matrix } : {}), ...(current.payload || {}),
    };
    return download(`${base}.json`, new Blob([JSON.stringify(payload, null, 1)], { type: "application/json" }));
  }
  if (!current.matrix) throw new Error("This view's numbers do not form one table: export them as JSON.");
  return download(`${base}.csv`, new Blob([toCsv(current.tokens, current.matrix, current.rowTokens, current.blank ?? "-inf", current.corner)], { type: "text/csv" }));
}
