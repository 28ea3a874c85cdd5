// A small grid of numbers (layers x heads) as an HTML table whose cells are coloured on the
// heatmaps' viridis scale, each value written in its cell and each cell a button. Redrawing it
// as rows arrive costs a few milliseconds (a Plotly heatmap of 30 x 9 numbered cells took ~80 ms
// here, twice that on slower machines), and screen readers read it as the table it is.

import { contrastOnWhite, VIRIDIS_LUT } from "../colors.js";
import { formatNumber } from "./plot.js";

/**
 * Draws values[row][col] (null: no value) into `el`, replacing what was there.
 * options: {caption (raw text), rows, cols (labels; a column label may have a second line
 * after " · "), max (the colour scale's top; its bottom is 0), digits, missingText (a null
 * cell's text), name (the statistic, in each cell's tooltip), open ([row, col] outlined as
 * open), onPick(row, col)}. The arrow keys move between cells; one cell is in the tab order.
 */
export function drawHeatTable(el, values, options) {
  const { rows, cols, max, digits, missingText, name, open = [-1, -1] } = options;
  const table = document.createElement("table");
  table.className = "heat-table";
  const caption = table.createCaption();
  caption.textContent = options.caption;
  const headRow = table.createTHead().insertRow();
  headRow.insertCell(); // the corner above the row labels
  for (const label of cols) {
    const [first, second] = String(label).split(" · ");
    const cell = headerCell("col", first);
    if (second) cell.append(document.createElement("br"), small(second));
    headRow.append(cell);
  }
  const body = table.createTBody();
  values.forEach((row, r) => {
    const line = body.insertRow();
    line.append(headerCell("row", rows[r]));
    row.forEach((value, c) => {
      const button = document.createElement("button");
      button.type = "button";
      button.tabIndex = -1;
      button.dataset.row = String(r);
      button.dataset.col = String(c);
      button.dataset.value = value === null ? "" : String(value);
      button.textContent = value === null ? missingText : formatNumber(value, digits);
      button.title = `${rows[r]}, ${cols[c]}: ${name} ${value === null ? missingText : formatNumber(value, 6)}`;
      if (value !== null) paint(button, value / max);
      if (r === open[0] && c === open[1]) button.setAttribute("aria-current", "true");
      line.insertCell().append(button);
    });
  });
  // The cell in the tab order: the one focused before this redraw (keyboard users keep their
  // place as rows arrive), else the open one, else the first.
  const had = el.contains(document.activeElement) ? document.activeElement.dataset : null;
  const kept = had?.row && table.querySelector(`button[data-row="${had.row}"][data-col="${had.col}"]`);
  const start = kept || table.querySelector("button[aria-current]") || table.querySelector("button");
  if (start) start.tabIndex = 0;
  table.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (button) options.onPick(Number(button.dataset.row), Number(button.dataset.col));
  });
  table.addEventListener("keydown", (event) => moveFocus(table, event));
  el.replaceChildren(table, legend(max, digits));
  if (kept) kept.focus({ preventScroll: true });
}

function headerCell(scope, text) {
  const cell = document.createElement("th");
  cell.scope = scope;
  cell.textContent = text;
  return cell;
}

function small(text) {
  const span = document.createElement("span");
  span.className = "heat-table-sub";
  span.textContent = text;
  return span;
}

/** Background on the viridis scale at t in [0, 1]; black or white text, whichever contrasts more
 * (at least 4.5:1 on every colour of the scale). */
function paint(button, t) {
  const rgb = VIRIDIS_LUT[Math.max(0, Math.min(255, Math.round(t * 255)))];
  button.style.background = `rgb(${rgb.join(",")})`;
  const onWhite = contrastOnWhite(rgb); // white text on it; black text gets 21 / onWhite
  button.style.color = onWhite >= 21 / onWhite ? "#fff" : "#000";
}

/** The colour scale under the table: 0 to max. */
function legend(max, digits) {
  const bar = document.createElement("div");
  bar.className = "heat-legend";
  const stops = VIRIDIS_LUT.filter((_, i) => i % 32 === 0 || i === 255).map((c) => `rgb(${c.join(",")})`);
  const ramp = document.createElement("span");
  ramp.className = "heat-legend-ramp";
  ramp.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  ramp.setAttribute("aria-hidden", "true");
  bar.append(formatNumber(0, digits), ramp, formatNumber(max, digits));
  return bar;
}

const STEPS = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };

/** Roving focus: an arrow key moves to the neighbouring cell, Home/End to a row's ends. */
function moveFocus(table, event) {
  const from = event.target.closest("button");
  if (!from) return;
  const row = Number(from.dataset.row);
  let col = Number(from.dataset.col);
  let next = row;
  if (event.key in STEPS) {
    next += STEPS[event.key][0];
    col += STEPS[event.key][1];
  } else if (event.key === "Home") col = 0;
  else if (event.key === "End") col = Infinity;
  else return;
  const lines = table.tBodies[0].rows;
  if (next < 0 || next >= lines.length) return;
  const buttons = lines[next].querySelectorAll("button");
  const to = buttons[Math.max(0, Math.min(buttons.length - 1, col))];
  event.preventDefault();
  from.tabIndex = -1;
  to.tabIndex = 0;
  to.focus();
}
