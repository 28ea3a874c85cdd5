// A scatter of thousands of points on a canvas: Plotly's SVG scatter spends about 0.1 ms a point
// in one task (2,048 points: 200-440 ms here), a canvas a few ms. Axes, hover and click, and an
// optional colour bar; the hover box is text (textContent), never HTML.

import { el } from "../dom.js";

const MARGIN = { left: 56, right: 12, top: 8, bottom: 46 };
const RADIUS = 3;
const NEAR = 10; // pixels: the farthest a pointer may be from the point it picks

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

/**
 * Draws `series` ([{name, points: [[x, y]], colours: [css] | css, symbol: "circle" | "triangle"}])
 * into `root` (emptied). options: {label (the canvas's accessible name), xTitle, yTitle, bar
 * ({label, min, max, colourAt(t)} or null), hover(s, i) -> [lines], click(s, i)}. The root
 * element gets `pixelOf(s, i)`: the point's place in client pixels (the tests click there).
 */
export function drawPointCloud(root, series, options) {
  const width = Math.max(280, root.clientWidth || 600);
  const height = Math.round(Math.min(560, Math.max(320, width * 0.75)));
  const ratio = window.devicePixelRatio || 1;
  const canvas = el("canvas", { attrs: { role: "img", "aria-label": options.label } });
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.cssText = `width:${width}px;height:${height}px;display:block;cursor:crosshair`;
  const tip = el("div", { className: "cloud-tip", attrs: { role: "status" } });
  tip.hidden = true;
  const frame = el("div", { className: "cloud" }, [canvas, tip]);
  const parts = [frame];
  if (options.bar) parts.push(colourBar(options.bar));
  root.replaceChildren(...parts);

  const [x0, x1] = extent(series, 0);
  const [y0, y1] = extent(series, 1);
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const px = (x) => MARGIN.left + ((x - x0) / (x1 - x0)) * plotW;
  const py = (y) => MARGIN.top + (1 - (y - y0) / (y1 - y0)) * plotH;

  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#444";
  ctx.strokeStyle = "#e4e4e4";
  ctx.lineWidth = 1;
  ctx.textAlign = "center";
  for (const t of ticks(x0, x1)) {
    ctx.beginPath();
    ctx.moveTo(px(t), MARGIN.top);
    ctx.lineTo(px(t), MARGIN.top + plotH);
    ctx.stroke();
    ctx.fillText(String(t), px(t), MARGIN.top + plotH + 14);
  }
  ctx.textAlign = "right";
  for (const t of ticks(y0, y1)) {
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
    const groups = new Map();
    s.points.forEach((p, i) => {
      const colour = typeof s.colours === "string" ? s.colours : s.colours[i];
      if (!groups.has(colour)) groups.set(colour, []);
      groups.get(colour).push(p);
    });
    for (const [colour, points] of groups) {
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
}

function colourBar(bar) {
  const scale = el("div", { className: "cloud-bar-scale" });
  const stops = Array.from({ length: 11 }, (_, i) => bar.colourAt(i / 10));
  scale.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  const fmt = (v) => String(Number(v.toPrecision(3)));
  return el("div", { className: "cloud-bar" }, [
    el("span", { text: `${bar.label}: ${fmt(bar.min)}` }),
    scale,
    el("span", { text: fmt(bar.max) }),
  ]);
}
