// The pictures the export buttons save, as SVG text: a figure's heading (which model, heads and
// text, and what the picture shows), a colour bar, a heatmap cell by cell, a view's own drawing
// framed by a heading; and any of them drawn into a PNG at slide size. Tokens and the text are
// user text: every string reaches the SVG through escapeXml.

const FONT = "Helvetica, Arial, sans-serif";
export const PAD = 16; // pixels around a figure
export const BAR_WIDTH = 70; // pixels a colour bar takes with its tick labels
const MIN_WIDTH = 640; // narrower figures are widened so their heading fits
const EM = 0.58; // a character's width in ems (estimated, bold included: text is not measured)
const FONTS = { title: 16, text: 13, subtitle: 12 }; // pixels
const STYLE = {
  title: 'font-weight="bold" fill="#111"',
  text: 'fill="#222"',
  subtitle: 'fill="#555"',
};

// XML 1.0 cannot hold these at all, not even escaped: a C0 control becomes its picture (␀ ...),
// a lone surrogate or a non-character U+FFFD.
const NOT_XML =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding those characters is its job
  /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Any text as SVG character data or a double-quoted attribute value. */
export function escapeXml(text) {
  return String(text)
    .replace(NOT_XML, (c) => (c < " " ? String.fromCharCode(0x2400 + c.charCodeAt(0)) : "\uFFFD"))
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

/** `text` cut to at most `max` characters, ending in "…" where it was cut. */
export function shorten(text, max) {
  const chars = [...String(text)];
  return chars.length <= max
    ? chars.join("")
    : `${chars
        .slice(0, Math.max(1, max - 1))
        .join("")
        .trimEnd()}…`;
}

/** Words in lines of at most `perLine` characters, at most `maxLines` of them (the last cut). */
function wrap(text, perLine, maxLines) {
  const lines = [];
  let line = "";
  for (const word of String(text).split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > perLine) {
      lines.push(line);
      line = word;
    } else {
      line = line ? `${line} ${word}` : word;
    }
  }
  if (line) lines.push(line);
  const kept = lines.slice(0, maxLines);
  if (lines.length > maxLines) kept[maxLines - 1] = shorten(`${kept[maxLines - 1]} ${lines[maxLines]}`, perLine);
  return kept.map((l) => shorten(l, perLine));
}

/** A view's own title as a caption: without its "click ..." and "hover ..." hints. */
function caption(title) {
  return String(title || "")
    .split(" · ")
    .filter((part) => !/^(click|hover)\b/i.test(part))
    .join(" · ");
}

/**
 * What a figure's heading says, from the export's `current` (export.js) and the page's `info`:
 * {title: "model · layer 3 · head 5", texts: [the text, its pair?], subtitle: what it shows}.
 */
export function figureHeading(current, info) {
  const title = [info.model || "attention"];
  if (current.scope) title.push(current.scope);
  else {
    if (current.layer !== undefined && current.layer !== null) title.push(`layer ${current.layer}`);
    if (current.head !== undefined && current.head !== null) title.push(`head ${current.head}`);
  }
  const texts = [info.text, info.textPair].filter(Boolean);
  const subtitle = current.subtitle ?? current.title;
  return { title: title.join(" · "), texts, subtitle: subtitle ? caption(subtitle) : null };
}

/**
 * The heading as lines that fit `width` pixels: [{text, role}], role "title" (wrapped to two
 * lines), "text" (the text in quotes, cut with "…") or "subtitle" (what it shows and `note`,
 * the colour scale when not linear). `fonts` gives each role's size in pixels.
 */
export function headingLines(head, width, note = "", fonts = FONTS) {
  const per = (role) => Math.max(16, Math.floor(width / (fonts[role] * EM)));
  const lines = wrap(head.title, per("title"), 2).map((text) => ({ text, role: "title" }));
  if (head.texts.length) {
    const each = Math.floor((per("text") - 3 * head.texts.length) / head.texts.length);
    lines.push({ text: head.texts.map((t) => `“${shorten(t.trim(), each)}”`).join(" + "), role: "text" });
  }
  const subtitle = [head.subtitle, note].filter(Boolean).join(" · ");
  for (const text of wrap(subtitle, per("subtitle"), 2)) lines.push({ text, role: "subtitle" });
  return lines;
}

/** The heading drawn at the top of a figure `width` pixels wide: {svg, height}. */
export function headerSvg(head, width, note = "") {
  let y = PAD;
  const parts = ['<g id="figure-heading">'];
  for (const { text, role } of headingLines(head, width - 2 * PAD, note)) {
    y += Math.round(FONTS[role] * 1.3);
    parts.push(
      `<text class="figure-${role}" x="${PAD}" y="${y}" font-size="${FONTS[role]}" ${STYLE[role]}>${escapeXml(text)}</text>`,
    );
  }
  parts.push("</g>");
  return { svg: parts.join(""), height: y + 10 };
}

/** A colour bar (colors.js) `height` pixels tall at (x, y): the scale, tick labels, its label. */
export function colourBarSvg(bar, x, y, height) {
  const stops = Array.from(
    { length: 17 },
    (_, i) => `<stop offset="${i / 16}" stop-color="${bar.colourAt(1 - i / 16)}"/>`,
  );
  const parts = [
    `<g id="colour-bar" font-size="11" fill="#333">`,
    `<defs><linearGradient id="colour-bar-scale" x1="0" y1="0" x2="0" y2="1">${stops.join("")}</linearGradient></defs>`,
    `<text class="colour-bar-label" x="${x}" y="${y - 8}">${escapeXml(bar.label)}</text>`,
    `<rect x="${x}" y="${y}" width="14" height="${height}" fill="url(#colour-bar-scale)" stroke="#888" stroke-width="0.5"/>`,
  ];
  for (const { at, text } of bar.ticks) {
    const ty = y + (1 - at) * height;
    parts.push(`<line x1="${x + 14}" x2="${x + 18}" y1="${ty}" y2="${ty}" stroke="#555"/>`);
    parts.push(`<text class="colour-bar-tick" x="${x + 21}" y="${ty + 4}">${escapeXml(text)}</text>`);
  }
  parts.push("</g>");
  return parts.join("");
}

/** A standalone SVG file: `body` on white, `width` x `height` pixels. */
export function svgDocument(width, height, body, fontSize = 12) {
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${FONT}" font-size="${fontSize}">` +
    `<rect width="100%" height="100%" fill="#fff"/>${body}</svg>`
  );
}

const labelWidth = (labels, font) => Math.ceil(Math.max(1, ...labels.map((t) => [...String(t)].length)) * font * 0.6);

/**
 * A heatmap as vector SVG (small maps: a rect per cell, its value in a tooltip), with the
 * heading, token labels and the colour bar: `current` gives tokens (columns), rowTokens, matrix,
 * colour(value) and colourBar. Returns {svg, width, height}.
 */
export function vectorHeatmapSvg(current, head) {
  const { tokens, matrix, colour, colourBar: bar } = current;
  const rowTokens = current.rowTokens || tokens;
  const n = matrix.length;
  const m = matrix[0].length;
  const cell = Math.max(6, Math.min(28, Math.floor(720 / Math.max(n, m))));
  const font = Math.min(12, cell);
  const left = PAD + Math.min(160, labelWidth(rowTokens, font)) + 6;
  const below = Math.min(140, Math.ceil(labelWidth(tokens, font) * Math.sin(Math.PI / 3)) + 16);
  const barX = left + m * cell + 28;
  const width = Math.max(MIN_WIDTH, barX + (bar ? BAR_WIDTH : 0) + PAD);
  const heading = headerSvg(head, width, bar?.note);
  const top = heading.height + 18; // room for the colour bar's label
  const parts = [heading.svg, `<g id="heatmap" font-size="${font}">`];
  for (let r = 0; r < n; r++) {
    for (let c = 0; c < m; c++) {
      const v = matrix[r][c];
      if (v === null) continue;
      parts.push(
        `<rect x="${left + c * cell}" y="${top + r * cell}" width="${cell}" height="${cell}" fill="${colour(v)}"><title>${escapeXml(`${rowTokens[r]} → ${tokens[c]}: ${v}`)}</title></rect>`,
      );
    }
    parts.push(
      `<text x="${left - 4}" y="${top + r * cell + cell * 0.75}" text-anchor="end">${escapeXml(rowTokens[r])}</text>`,
    );
  }
  for (let c = 0; c < m; c++) {
    const x = left + c * cell + cell * 0.35;
    parts.push(`<text transform="translate(${x},${top + n * cell + 6}) rotate(60)">${escapeXml(tokens[c])}</text>`);
  }
  parts.push(
    `<rect x="${left}" y="${top}" width="${m * cell}" height="${n * cell}" fill="none" stroke="#bbb" stroke-width="0.5"/></g>`,
  );
  const barHeight = Math.max(140, Math.min(n * cell, 360));
  if (bar) parts.push(colourBarSvg(bar, barX, top, barHeight));
  const height = top + Math.max(n * cell + below, barHeight + 10) + PAD;
  return { svg: svgDocument(width, height, parts.join("")), width, height };
}

/**
 * A view's own SVG drawing (`drawing`, serialized, `size` {width, height}) under the heading,
 * with `notes` (lines of text: what is hidden, which heads) and `keys` ([{text, colour}]: a
 * coloured label for each kind of mark) between them. Returns {svg, width, height}.
 */
export function framedSvg(drawing, size, head, { notes = [], keys = [] } = {}) {
  const inner = { width: Math.ceil(size.width), height: Math.ceil(size.height) };
  const width = Math.max(MIN_WIDTH, inner.width + 2 * PAD);
  const heading = headerSvg(head, width);
  let y = heading.height;
  const parts = [heading.svg, '<g id="figure-notes" font-size="12" fill="#333">'];
  for (const note of notes) {
    y += 16;
    parts.push(`<text x="${PAD}" y="${y}">${escapeXml(note)}</text>`);
  }
  if (keys.length) {
    y += 18;
    let x = PAD;
    for (const { text, colour } of keys) {
      parts.push(
        `<rect x="${x}" y="${y - 9}" width="18" height="4" fill="${escapeXml(colour)}"/><text x="${x + 22}" y="${y}" fill="${escapeXml(colour)}">${escapeXml(text)}</text>`,
      );
      x += 34 + [...text].length * 7;
    }
  }
  parts.push(`</g><g transform="translate(${PAD},${y + 12})">${drawing}</g>`);
  const height = y + 12 + inner.height + PAD;
  return { svg: svgDocument(width, height, parts.join("")), width, height };
}

/** SVG text drawn into a PNG blob at least `minWidth` pixels wide (and at least 2x), through an
 * image on a canvas. */
export async function svgToPng(svgText, width, height, minWidth = 1600) {
  const scale = Math.max(2, minWidth / width);
  const url = URL.createObjectURL(new Blob([svgText], { type: "image/svg+xml" }));
  try {
    const image = new Image();
    image.src = url;
    await image.decode();
    const canvas = document.createElement("canvas");
    canvas.width = Math.ceil(width * scale);
    canvas.height = Math.ceil(height * scale);
    const c2d = canvas.getContext("2d");
    c2d.fillStyle = "#fff";
    c2d.fillRect(0, 0, canvas.width, canvas.height);
    c2d.drawImage(image, 0, 0, canvas.width, canvas.height);
    return await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  } finally {
    URL.revokeObjectURL(url);
  }
}
