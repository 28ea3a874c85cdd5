// Export: Plotly's own PNG/SVG, and the current map as JSON or CSV.

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

export function toCsv(tokens, matrix) {
  const lines = [["query \\ key", ...tokens].map(csvCell).join(",")];
  matrix.forEach((row, i) => lines.push([csvCell(tokens[i]), ...row.map((v) => (v === null ? "-inf" : String(v)))].join(",")));
  return lines.join("\r\n") + "\r\n";
}

export async function exportCurrent(format, current, info) {
  const base = `${slug(info.model)}-L${current.layer ?? 0}-H${current.head ?? 0}`;
  if (format === "png" || format === "svg") {
    if (current.kind === "svg") {
      const xml = new XMLSerializer().serializeToString(current.element);
      return download(`${base}-lines.svg`, new Blob([xml], { type: "image/svg+xml" }));
    }
    if (!current.element) throw new Error("This view has no single chart to export; open a head first.");
    return window.Plotly.downloadImage(current.element, { format, filename: base, scale: format === "png" ? 2 : 1 });
  }
  if (!current.matrix) throw new Error("This view has no single map to export; open a head first.");
  if (format === "json") {
    const payload = { model: info.model, text: info.text, text_pair: info.textPair || null, layer: current.layer, head: current.head, tokens: current.tokens, weights: current.matrix };
    return download(`${base}.json`, new Blob([JSON.stringify(payload, null, 1)], { type: "application/json" }));
  }
  return download(`${base}.csv`, new Blob([toCsv(current.tokens, current.matrix)], { type: "text/csv" }));
}
