// The notebook's image widget (anywidget; attention_atlas.image_widget): a vision transformer's
// maps over an image, one head at a time, from the class token or a clicked patch, every head of
// the layer beside it. Python sends the image as the model saw it (PNG), the maps (float32
// [layer][head][query][key]) and the grid; layer, head and query are traits both sides move.

import { el } from "./dom.js";
import { paintPatches, patchUnder } from "./patch-overlay.js";

const SCALE = 2;
const THUMB_SCALE = 0.5;

async function render({ model, el: root }) {
  root.classList.add("atlas-widget");
  const grid = model.get("meta"); // {model, width, height, patch, rows, cols, prefix, names, layers, heads}
  const tokens = grid.prefix + grid.rows * grid.cols;
  const bytes = model.get("maps"); // a DataView of float32 (L, H, T, T)
  const maps = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  const picture = await createImageBitmap(new Blob([model.get("png")], { type: "image/png" }));
  const row = (layer, head, query) => {
    const start = ((layer * grid.heads + head) * tokens + query) * tokens;
    return maps.subarray(start, start + tokens);
  };
  const name = (token) => {
    const i = token - grid.prefix;
    return i < 0 ? `the ${grid.names[token]} token` : `patch (${Math.floor(i / grid.cols)}, ${i % grid.cols})`;
  };

  const layerSelect = el("select", { attrs: { "aria-label": "layer" } });
  const headSelect = el("select", { attrs: { "aria-label": "head" } });
  for (let l = 0; l < grid.layers; l++) layerSelect.append(new Option(`layer ${l}`, String(l)));
  for (let h = 0; h < grid.heads; h++) headSelect.append(new Option(`head ${h}`, String(h)));
  const classButton = el("button", { text: "From the class token", attrs: { type: "button" } });
  const readout = el("p", { className: "readout", attrs: { "aria-live": "polite" } });
  const canvas = el("canvas", {
    attrs: { tabindex: "0", "aria-label": "the image, darkened where the head gives little weight" },
  });
  canvas.style.width = `${grid.width * SCALE}px`;
  canvas.style.maxWidth = "100%";
  canvas.style.cursor = "crosshair";
  const thumbs = el("div", { className: "image-thumbs" });
  root.replaceChildren(
    el("p", {
      className: "status",
      text: `${grid.model} · ${grid.layers} layers × ${grid.heads} heads · ${grid.rows} × ${grid.cols} patches of ${grid.patch} px`,
    }),
    el("div", { className: "row" }, [layerSelect, headSelect, classButton]),
    el("div", { className: "image-views" }, [el("div", {}, [canvas, readout]), thumbs]),
  );

  function draw() {
    const layer = model.get("layer");
    const head = model.get("head");
    const query = model.get("query");
    layerSelect.value = String(layer);
    headSelect.value = String(head);
    const i = query - grid.prefix;
    const outlined = i >= 0 ? [[Math.floor(i / grid.cols), i % grid.cols, "#ffffff"]] : [];
    const values = row(layer, head, query);
    paintPatches(canvas, picture, grid, values, { outlined, scale: SCALE });
    const patches = Array.from(values.slice(grid.prefix));
    const best = patches.indexOf(Math.max(...patches));
    readout.textContent = `Layer ${layer} head ${head} from ${name(query)}: most weight on ${name(best + grid.prefix)} (${patches[best].toFixed(3)}).`;
    thumbs.replaceChildren(
      ...Array.from({ length: grid.heads }, (_, h) => {
        const small = el("canvas", { attrs: { "aria-hidden": "true" } });
        paintPatches(small, picture, grid, row(layer, h, query), { outlined, scale: THUMB_SCALE });
        const button = el(
          "button",
          { className: "head-thumb", attrs: { type: "button", "aria-pressed": String(h === head) } },
          [small, el("span", { text: `head ${h}` })],
        );
        button.addEventListener("click", () => set({ head: h }));
        return button;
      }),
    );
  }

  function set(change) {
    for (const [key, value] of Object.entries(change)) model.set(key, value);
    model.save_changes();
    draw();
  }

  layerSelect.addEventListener("change", () => set({ layer: Number(layerSelect.value) }));
  headSelect.addEventListener("change", () => set({ head: Number(headSelect.value) }));
  classButton.addEventListener("click", () => set({ query: 0 }));
  canvas.addEventListener("click", (event) => {
    const [r, c] = patchUnder(event, canvas, grid);
    set({ query: grid.prefix + r * grid.cols + c });
  });
  for (const trait of ["layer", "head", "query"]) model.on(`change:${trait}`, draw);
  draw();
}

export default { render };
