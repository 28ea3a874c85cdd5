// Every layer x head as a canvas thumbnail, drawn a batch of layers at a time, yielding to the page.

import { VIRIDIS_LUT } from "../colors.js";
import { el as make } from "../dom.js";
import { nextTask } from "./plot.js";

const THUMB = 56; // pixels a side, at most
const GROUP_BYTES = 2 ** 20; // u8 weights asked for at a time (one layer at least)
const FRAME_MS = 12; // drawing before the grid gives the page a frame

/** Draws one head's map, max-pooled to at most THUMB pixels a side; returns the pooled values. */
function drawThumbnail(canvas, flat, n) {
  const size = Math.min(THUMB, n);
  const pooled = new Float32Array(size * size);
  canvas.width = size;
  canvas.height = size;
  const ctx2d = canvas.getContext("2d");
  const image = ctx2d.createImageData(size, size);
  const step = n / size;
  for (let py = 0; py < size; py++) {
    const r0 = Math.floor(py * step);
    const r1 = Math.max(r0 + 1, Math.floor((py + 1) * step));
    for (let px = 0; px < size; px++) {
      const c0 = Math.floor(px * step);
      const c1 = Math.max(c0 + 1, Math.floor((px + 1) * step));
      let peak = 0; // max-pool so a sharp head stays sharp when shrunk
      for (let r = r0; r < r1; r++) {
        const base = r * n;
        for (let c = c0; c < c1; c++) if (flat[base + c] > peak) peak = flat[base + c];
      }
      pooled[py * size + px] = peak;
      const [red, green, blue] = VIRIDIS_LUT[Math.round(Math.sqrt(peak) * 255)];
      const o = (py * size + px) * 4;
      image.data[o] = red;
      image.data[o + 1] = green;
      image.data[o + 2] = blue;
      image.data[o + 3] = 255;
    }
  }
  ctx2d.putImageData(image, 0, 0);
  return pooled;
}

const shownIn = new WeakMap(); // grid element -> what its thumbnails show (for the export)

/** scene.open(layer, head) opens a head; the grid is drawn once per text, layer by layer. */
export async function render({ session, state, parts, info, open }) {
  const { num_layers: layers, num_heads: heads, num_kv_heads: kvHeads } = info;
  const key = `${session.model}|${session.text}|${session.textPair}`;
  const grid = parts.grid;
  if (grid.dataset.key === key) {
    markSelected(grid, state.layer, state.head);
    return gridExport(grid, shownIn.get(grid));
  }
  grid.dataset.key = key;
  grid.replaceChildren();
  grid.style.gridTemplateColumns = `3.5em repeat(${heads}, minmax(24px, ${THUMB}px))`;
  grid.setAttribute("role", "grid");
  grid.setAttribute("aria-label", `${layers} layers by ${heads} heads: arrow keys move, Enter opens a head`);
  const perGroup = heads / kvHeads;
  parts.gqa.textContent =
    kvHeads < heads
      ? `This model shares each key/value head among ${perGroup} query heads (grouped-query attention): the labels kv0, kv1 … above the columns show which heads share keys.`
      : "";
  // Header row: head numbers, and the key/value group for GQA models.
  const header = make("div", { attrs: { role: "row" }, className: "grid-row" }, [
    make("div", { attrs: { role: "columnheader" }, className: "grid-label", text: "layer" }),
  ]);
  for (let h = 0; h < heads; h++) {
    const label = kvHeads < heads ? `h${h} · kv${Math.floor(h / perGroup)}` : `h${h}`;
    header.append(make("div", { text: label, className: "grid-label", attrs: { role: "columnheader" } }));
  }
  grid.append(header);
  const canvases = [];
  const columns = [...header.children].slice(1).map((label) => label.textContent);
  const shown = { tokens: session.meta.tokens, layers, heads, columns, size: 0, maps: {} };
  shownIn.set(grid, shown);
  for (let l = 0; l < layers; l++) {
    const row = make("div", { attrs: { role: "row" }, className: "grid-row" }, [
      make("div", { text: `L${l}`, className: "grid-label", attrs: { role: "rowheader" } }),
    ]);
    const cells = [];
    for (let h = 0; h < heads; h++) {
      const canvas = make("canvas", {
        attrs: {
          tabindex: "-1",
          role: "gridcell",
          "aria-label": `Layer ${l}, head ${h}`,
          "data-layer": l,
          "data-head": h,
        },
      });
      canvas.addEventListener("click", () => open(l, h));
      row.append(canvas);
      cells.push(canvas);
    }
    grid.append(row);
    canvases.push(cells);
  }
  // One tab stop for the whole grid (the selected head); arrow keys move inside it.
  grid.addEventListener("keydown", (event) => {
    const cell = event.target.closest("canvas[data-layer]");
    if (!cell) return;
    const l = Number(cell.dataset.layer);
    const h = Number(cell.dataset.head);
    const moves = {
      ArrowLeft: [l, h - 1],
      ArrowRight: [l, h + 1],
      ArrowUp: [l - 1, h],
      ArrowDown: [l + 1, h],
      Home: [l, 0],
      End: [l, heads - 1],
      PageUp: [0, h],
      PageDown: [layers - 1, h],
    };
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      open(l, h, { focusView: true });
      return;
    }
    const to = moves[event.key];
    if (!to) return;
    event.preventDefault();
    event.stopPropagation(); // the chart area's own arrow keys change the open head instead
    const [nl, nh] = [Math.min(layers - 1, Math.max(0, to[0])), Math.min(heads - 1, Math.max(0, to[1]))];
    focusCell(grid, canvases[nl][nh]);
  });
  markSelected(grid, state.layer, state.head);
  await fillIn(grid, key, session, canvases, shown, parts.status);
  return gridExport(grid, shown);
}

/** The block a text's thumbnails are pooled in on the server: 1 (whole maps, pooled here) up to
 * twice THUMB tokens; above, ceil(n / THUMB), so each map comes at most THUMB values a side (a
 * 512-token layer of 9 heads: 24 KB instead of 2.4 MB). */
function thumbnailCell(n) {
  return n > 2 * THUMB ? Math.ceil(n / THUMB) : 1;
}

/** Draws every layer's thumbnails while the rest of the page stays live: the layers' u8 maps
 * (block maxima for a long text: thumbnailCell) come GROUP_BYTES at a time (all of a short
 * text's in one answer), the next group fetched while one is drawn, and the grid yields to the
 * page after FRAME_MS of drawing. */
async function fillIn(grid, key, session, canvases, shown, status) {
  const layers = canvases.length;
  const heads = canvases[0].length;
  const n = session.meta.tokens.length;
  const cell = thumbnailCell(n);
  const side = Math.ceil(n / cell);
  const perGroup = Math.max(1, Math.floor(GROUP_BYTES / (heads * side * side)));
  const groups = [];
  for (let l = 0; l < layers; l += perGroup) {
    groups.push(Array.from({ length: Math.min(perGroup, layers - l) }, (_, i) => l + i));
  }
  let next = session.coarseLayers(groups[0], cell);
  let drawingSince = performance.now();
  for (let g = 0; g < groups.length; g++) {
    if (grid.dataset.key !== key) return; // a newer sentence replaced this grid
    status.textContent = `Loading layer ${groups[g][0] + 1} of ${layers}…`;
    const maps = await next;
    shown.size = Math.min(THUMB, maps.side); // what is drawn: a widget's maps come whole
    shown.cell = maps.cell;
    if (g + 1 < groups.length) {
      next = session.coarseLayers(groups[g + 1], cell);
      next.catch(() => {}); // awaited next round; a grid left behind drops it quietly
    }
    for (const [i, l] of groups[g].entries()) {
      if (grid.dataset.key !== key) return;
      for (let h = 0; h < heads; h++) {
        shown.maps[`${l},${h}`] = drawThumbnail(canvases[l][h], maps.map(i, h), maps.side);
      }
      if (performance.now() - drawingSince > FRAME_MS) {
        await nextTask(); // let the page paint and answer input
        drawingSince = performance.now();
      }
    }
  }
  status.textContent = `${layers * heads} heads shown.`;
}

/** What the grid's export buttons save: the thumbnails as one picture (export-grid.js), and the
 * values they show. */
function gridExport(grid, shown) {
  return {
    kind: "grid",
    element: grid,
    scope: `all heads: ${shown.layers} layers × ${shown.heads} heads`,
    get subtitle() {
      const pooled = shown.size < shown.tokens.length ? `, max-pooled to ${shown.size} × ${shown.size} cells` : "";
      return `each head's map, queries down and keys across${pooled}`;
    },
    thumbnails: shown,
    get payload() {
      return {
        what: `the all-heads grid as shown: each head's map (u8, error <= 1/510) max-pooled to at most 56 x 56 cells, row-major (${
          shown.cell > 1
            ? "each cell the largest weight of a cell x cell block of tokens counted from the top left, the last blocks short"
            : "the tokens split into as even blocks as the size allows"
        }); brightness in the picture is sqrt(weight)`,
        tokens: shown.tokens,
        layers: shown.layers,
        heads: shown.heads,
        size: shown.size,
        cell: shown.cell,
        maps: Object.fromEntries(
          Object.entries(shown.maps).map(([at, pooled]) => [at, Array.from(pooled, (v) => Math.round(v * 1e4) / 1e4)]),
        ),
      };
    },
  };
}

function focusCell(grid, cell) {
  for (const c of grid.querySelectorAll('canvas[tabindex="0"]')) c.tabIndex = -1;
  cell.tabIndex = 0;
  cell.focus();
}

function markSelected(grid, layer, head) {
  for (const c of grid.querySelectorAll("canvas.selected")) {
    c.classList.remove("selected");
    c.removeAttribute("aria-selected");
  }
  const selected = grid.querySelector(`canvas[data-layer="${layer}"][data-head="${head}"]`);
  if (!selected) return;
  selected.classList.add("selected");
  selected.setAttribute("aria-selected", "true");
  if (!grid.contains(document.activeElement)) {
    for (const c of grid.querySelectorAll('canvas[tabindex="0"]')) c.tabIndex = -1;
    selected.tabIndex = 0;
  }
}
