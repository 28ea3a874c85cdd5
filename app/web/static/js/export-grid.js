// The all-heads grid as one vector picture: every head's thumbnail (the max-pooled map the grid
// shows, in its √weight colours) in its layer's row and head's column, with the heading, the
// layer and head labels and the colour bar.

import { sqrtBar, VIRIDIS_LUT } from "./colors.js";
import { BAR_WIDTH, colourBarSvg, escapeXml, headerSvg, PAD, svgDocument } from "./export-svg.js";

const SIDE = 64; // pixels a head's map takes, about
const GAP = 8;
const ROW_LABEL = 34; // pixels for "L12"

/** One head's pooled map (size x size values, row-major) as paths in map cells: one path per
 * colour, a run of like cells along a row one rectangle. */
function mapPaths(pooled, size) {
  const paths = new Map(); // index into VIRIDIS_LUT -> path data
  const colourOf = (i) => Math.round(Math.sqrt(pooled[i]) * 255);
  for (let r = 0; r < size; r++) {
    for (let c = 0; c < size; ) {
      const index = colourOf(r * size + c);
      let end = c + 1;
      while (end < size && colourOf(r * size + end) === index) end++;
      paths.set(index, `${paths.get(index) || ""}M${c} ${r}h${end - c}v1h-${end - c}z`);
      c = end;
    }
  }
  return [...paths].map(([index, d]) => `<path fill="rgb(${VIRIDIS_LUT[index].join(",")})" d="${d}"/>`).join("");
}

/**
 * The grid as SVG. thumbnails: {layers, heads, size, maps: {"layer,head": pooled values},
 * columns: a label per head ("h3", or "h3 · kv1" where heads share keys)}; head: the figure's
 * heading (export-svg.js). Returns {svg, width, height}.
 */
export function gridSvg(thumbnails, head) {
  const { layers, heads, size, maps, columns } = thumbnails;
  const zoom = Math.max(1, Math.round(SIDE / Math.max(1, size))); // whole pixels a cell: crisp
  const side = size * zoom;
  const pitch = side + GAP;
  const columnLines = Math.max(1, ...columns.map((label) => label.split(" · ").length));
  const left = PAD + ROW_LABEL;
  const barX = left + heads * pitch - GAP + 28;
  const width = barX + BAR_WIDTH + PAD;
  const bar = sqrtBar();
  const heading = headerSvg(head, width, bar.note);
  const top = heading.height + 14 * columnLines + 8;
  const parts = [heading.svg, `<g id="grid-labels" font-size="12" fill="#333">`];
  columns.forEach((label, h) => {
    label.split(" · ").forEach((line, i) => {
      const y = heading.height + 14 * (i + 1);
      parts.push(`<text x="${left + h * pitch + side / 2}" y="${y}" text-anchor="middle">${escapeXml(line)}</text>`);
    });
  });
  for (let l = 0; l < layers; l++) {
    parts.push(`<text x="${left - 6}" y="${top + l * pitch + side / 2 + 4}" text-anchor="end">L${l}</text>`);
  }
  parts.push('</g><g id="grid-maps" shape-rendering="crispEdges">');
  for (let l = 0; l < layers; l++) {
    for (let h = 0; h < heads; h++) {
      const x = left + h * pitch;
      const y = top + l * pitch;
      const pooled = maps[`${l},${h}`];
      parts.push(`<g class="head-map" transform="translate(${x},${y})"><title>layer ${l}, head ${h}</title>`);
      // A head not drawn yet (the grid still loading) is an empty frame.
      parts.push(pooled ? `<g transform="scale(${zoom})">${mapPaths(pooled, size)}</g>` : "");
      parts.push(`<rect width="${side}" height="${side}" fill="none" stroke="#ccc" stroke-width="0.5"/></g>`);
    }
  }
  parts.push("</g>");
  parts.push(colourBarSvg(bar, barX, top, Math.max(140, Math.min(layers * pitch - GAP, 320))));
  const height = Math.max(top + layers * pitch - GAP, top + 140) + PAD;
  return { svg: svgDocument(width, height, parts.join("")), width, height };
}
