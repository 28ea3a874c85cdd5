// A scatter of thousands of points on a canvas: Plotly's SVG scatter spends about 0.1 ms a point
// in one task (2,048 points: 200-440 ms here), a canvas a few ms. Axes, hover and click, and an
// optional colour bar; the hover box is text (textContent), never HTML.

import { el } from "../dom.js";
import { escapeXml } from "../export-svg.js";

const MARGIN = { left: 56, right: 12, top: 8, bottom: 46 };
const RADIUS = 3;
const NEAR = 10; // pixels: the farthest a pointer may be from the point it picks
const PICTURE_WIDTH = 720; // pixels at least of an exported picture, however narrow the screen

/** About five round ticks from lo to hi. */
function ticks(lo, hi) {
  const step0 = (hi - lo) / 5 || 1;
  const power = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= step0);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(6)));
  return out;
}

function extent(series, axis) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of series)
    for (const p of s.points) {
      lo = Math.min(lo, p[axis]);
      hi = Math.max(hi, p[axis]);
    }
  const pad = (hi - lo) * 0.04 || 1;
  return [lo - pad, hi + pad];
}

function mark(ctx, x, y, symbol) {
  if (symbol === "triangle") {
    ctx.moveTo(x, y - RADIUS - 1);
    ctx.lineTo(x + RADIUS + 0.5, y + RADIUS);
    ctx.lineTo(x - RADIUS - 0.5, y + RADIUS);
    ctx.closePath();
  } else {
    ctx.moveTo(x + RADIUS, y);
    ctx.arc(x, y, RADIUS, 0, 2 * Math.PI);
  }
}

/** Where the axes and points go in a `width` x `height` picture of `series`. */
function frame(series, width, height) {
  const [x0, x1] = extent(series, 0);
  const [y0, y1] = extent(series, 1);
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  return {
    plotW,
    plotH,
    px: (x) => MARGIN.left + ((x - x0) / (x1 - x0)) * plotW,
    py: (y) => MARGIN.top + (1 - (y - y0) / (y1 - y0)) * plotH,
    xTicks: ticks(x0, x1),
    yTicks: ticks(y0, y1),
  };
}

/** The picture's size for a container `clientWidth` pixels wide (CSS pixels). */
function size(clientWidth) {
  const width = Math.max(280, clientWidth || 600);
  return [width, Math.round(Math.min(560, Math.max(320, width * 0.75)))];
}

/** Each (colour, points) group of a series: one path a colour, not one a point. */
function groups(s) {
  const out = new Map();
  s.points.forEach((p, i) => {
    const colour = typeof s.colours === "string" ? s.colours : s.colours[i];
    if (!out.has(colour)) out.set(colour, []);
    out.get(colour).push(p);
  });
  return out;
}

/**
 * Draws `series` ([{name, points: [[x, y]], colours: [css] | css, symbol: "circle" | "triangle"}])
 * into `root` (emptied). options: {label (the canvas's accessible name), xTitle, yTitle, bar
 * ({label, min, max, colourAt(t)} or null), hover(s, i) -> [lines], click(s, i)}. The root
 * element gets `pixelOf(s, i)`: the point's place in client pixels (the tests click there), and
 * `picture()`: the same drawing as SVG ({svg: a <g>, width, height}) for the export buttons, at
 * least PICTURE_WIDTH wide (a phone's plot is redrawn wider, not scaled up).
 */
export function drawPointCloud(root, series, options) {
  const [width, height] = size(root.clientWidth);
  const ratio = window.devicePixelRatio || 1;
  const canvas = el("canvas", { attrs: { role: "img", "aria-label": options.label } });
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.cssText = `width:${width}px;height:${height}px;display:block;cursor:crosshair`;
  const tip = el("div", { className: "cloud-tip", attrs: { role: "status" } });
  tip.hidden = true;
  const holder = el("div", { className: "cloud" }, [canvas, tip]);
  const parts = [holder];
  if (options.bar) parts.push(colourBar(options.bar));
  root.replaceChildren(...parts);

  const { plotW, plotH, px, py, xTicks, yTicks } = frame(series, width, height);

  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#444";
  ctx.strokeStyle = "#e4e4e4";
  ctx.lineWidth = 1;
  ctx.textAlign = "center";
  for (const t of xTicks) {
    ctx.beginPath();
    ctx.moveTo(px(t), MARGIN.top);
    ctx.lineTo(px(t), MARGIN.top + plotH);
    ctx.stroke();
    ctx.fillText(String(t), px(t), MARGIN.top + plotH + 14);
  }
  ctx.textAlign = "right";
  for (const t of yTicks) {
    ctx.beginPath();
    ctx.moveTo(MARGIN.left, py(t));
    ctx.lineTo(MARGIN.left + plotW, py(t));
    ctx.stroke();
    ctx.fillText(String(t), MARGIN.left - 4, py(t) + 4);
  }
  ctx.font = "12px system-ui, sans-serif";
  ctx.textAlign = "center";
  ctx.fillText(options.xTitle, MARGIN.left + plotW / 2, height - 8);
  ctx.save();
  ctx.translate(13, MARGIN.top + plotH / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText(options.yTitle, 0, 0);
  ctx.restore();

  // Points: one path per colour and symbol (a few fills, not one a point).
  ctx.globalAlpha = 0.8;
  series.forEach((s) => {
    for (const [colour, points] of groups(s)) {
      ctx.fillStyle = colour;
      ctx.beginPath();
      for (const p of points) mark(ctx, px(p[0]), py(p[1]), s.symbol);
      ctx.fill();
    }
  });
  ctx.globalAlpha = 1;

  const nearest = (event) => {
    const box = canvas.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    let best = null;
    let bestD = NEAR * NEAR;
    series.forEach((s, si) =>
      s.points.forEach((p, i) => {
        const d = (px(p[0]) - x) ** 2 + (py(p[1]) - y) ** 2;
        if (d <= bestD) {
          bestD = d;
          best = [si, i, px(p[0]), py(p[1])];
        }
      }),
    );
    return best;
  };
  let pending = false;
  canvas.addEventListener("mousemove", (event) => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const hit = nearest(event);
      tip.hidden = !hit;
      if (!hit) return;
      tip.replaceChildren(...options.hover(hit[0], hit[1]).map((line) => el("div", { text: line })));
      tip.style.left = `${Math.min(hit[2] + 10, width - 220)}px`;
      tip.style.top = `${hit[3] + 10}px`;
    });
  });
  canvas.addEventListener("mouseleave", () => {
    tip.hidden = true;
  });
  canvas.addEventListener("click", (event) => {
    const hit = nearest(event);
    if (hit) options.click(hit[0], hit[1]);
  });
  root.pixelOf = (s, i) => {
    const box = canvas.getBoundingClientRect();
    const p = series[s].points[i];
    return [box.left + px(p[0]), box.top + py(p[1])];
  };
  root.picture = () => pointCloudSvg(series, options, ...size(Math.max(width, PICTURE_WIDTH)));
}

const fmt = (v) => String(Number(v.toPrecision(3)));

/** A point's mark as an SVG path (the canvas's shapes). */
function markPath(x, y, symbol) {
  const f = (v) => v.toFixed(1);
  if (symbol === "triangle")
    return `M${f(x)},${f(y - RADIUS - 1)}L${f(x + RADIUS + 0.5)},${f(y + RADIUS)}L${f(x - RADIUS - 0.5)},${f(y + RADIUS)}Z`;
  return `M${f(x + RADIUS)},${f(y)}a${RADIUS},${RADIUS} 0 1,0 ${-2 * RADIUS},0a${RADIUS},${RADIUS} 0 1,0 ${2 * RADIUS},0`;
}

/**
 * The cloud as vector SVG: {svg (a <g>, text escaped), width, height}: the canvas's axes, grid,
 * titles and points (a path a colour and symbol), and the colour bar under it when there is one.
 */
export function pointCloudSvg(series, options, width, height) {
  const { plotW, plotH, px, py, xTicks, yTicks } = frame(series, width, height);
  const parts = ['<g font-size="11" fill="#444">'];
  for (const t of xTicks)
    parts.push(
      `<line x1="${px(t)}" x2="${px(t)}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#e4e4e4"/>`,
      `<text x="${px(t)}" y="${MARGIN.top + plotH + 14}" text-anchor="middle">${t}</text>`,
    );
  for (const t of yTicks)
    parts.push(
      `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${py(t)}" y2="${py(t)}" stroke="#e4e4e4"/>`,
      `<text x="${MARGIN.left - 4}" y="${py(t) + 4}" text-anchor="end">${t}</text>`,
    );
  parts.push(
    `<text x="${MARGIN.left + plotW / 2}" y="${height - 8}" text-anchor="middle" font-size="12">${escapeXml(options.xTitle)}</text>`,
    `<text transform="translate(13,${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle" font-size="12">${escapeXml(options.yTitle)}</text>`,
    "</g>",
  );
  for (const s of series)
    for (const [colour, points] of groups(s))
      parts.push(
        `<path class="points" fill="${escapeXml(colour)}" fill-opacity="0.8" d="${points.map((p) => markPath(px(p[0]), py(p[1]), s.symbol)).join("")}"/>`,
      );
  let total = height;
  if (options.bar) {
    const { bar } = options;
    const stops = Array.from(
      { length: 11 },
      (_, i) => `<stop offset="${i / 10}" stop-color="${bar.colourAt(i / 10)}"/>`,
    );
    const y = height + 8;
    parts.push(
      `<defs><linearGradient id="cloud-bar">${stops.join("")}</linearGradient></defs>`,
      `<g font-size="12" fill="#333"><text x="${MARGIN.left}" y="${y + 10}">${escapeXml(`${bar.label}: ${fmt(bar.min)}`)}</text>`,
      `<rect x="${MARGIN.left + 8 + 7 * (bar.label.length + 8)}" y="${y}" width="160" height="10" fill="url(#cloud-bar)" stroke="#888" stroke-width="0.5"/>`,
      `<text x="${MARGIN.left + 176 + 7 * (bar.label.length + 8)}" y="${y + 10}">${fmt(bar.max)}</text></g>`,
    );
    total += 24;
  }
  return { svg: parts.join(""), width, height: total };
}

function colourBar(bar) {
  const scale = el("div", { className: "cloud-bar-scale" });
  const stops = Array.from({ length: 11 }, (_, i) => bar.colourAt(i / 10));
  scale.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  return el("div", { className: "cloud-bar" }, [
    el("span", { text: `${bar.label}: ${fmt(bar.min)}` }),
    scale,
    el("span", { text: fmt(bar.max) }),
  ]);
}
