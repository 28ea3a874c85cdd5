// The notebook widget (anywidget): the explorer's own views, reading a WidgetSession.
// Python (attention_atlas.widget) sends the panels' markup, the views' modules, the maps and
// plotly.js with it.

import { fillIndexSelect } from "./dom.js";
import { WidgetSession } from "./widget-session.js";

/** plotly.js once per page, from the copy the Python side sent (nothing from a CDN). */
function loadPlotly(model) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__atlasPlotly) {
    window.__atlasPlotly = new Promise((resolve, reject) => {
      const url = URL.createObjectURL(new Blob([model.get("plotly_js")], { type: "text/javascript" }));
      const script = document.createElement("script");
      script.src = url;
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => reject(new Error("plotly.js could not be loaded"));
      document.head.append(script);
    });
  }
  return window.__atlasPlotly;
}

function partsOf(panel) {
  return Object.fromEntries([...panel.querySelectorAll("[data-part]")].map((node) => [node.dataset.part, node]));
}

async function render({ model, el }) {
  el.classList.add("atlas-widget");
  el.innerHTML = model.get("panels");
  await loadPlotly(model);
  // The views this widget offers, by the registry's names: {name: module}, each module sent
  // by Python (attention_atlas/bundle.py, view_modules) as a data: URL.
  const VIEW_MODULES = Object.fromEntries(
    await Promise.all(Object.entries(model.get("modules")).map(async ([name, url]) => [name, await import(url)])),
  );
  const session = new WidgetSession(model);
  const info = session.meta;
  const root = el.querySelector(".atlas-root");
  const layerSelect = root.querySelector("[data-control=layer]");
  const headSelect = root.querySelector("[data-control=head]");
  const status = root.querySelector("[data-control=status]");
  const panels = Object.fromEntries(
    [...root.querySelectorAll("section[role=tabpanel]")].map((panel) => [panel.id.replace(/^.*view-/, ""), panel]),
  );
  const views = Object.fromEntries(Object.entries(panels).map(([name, panel]) => [name, partsOf(panel)]));
  // One state object, mirrored to the widget's traits so Python can read and set it.
  let state = {
    view: model.get("view"),
    layer: model.get("layer"),
    head: model.get("head"),
    query: null,
    threshold: 0.05,
    overlay: null,
    qkScope: "head",
    qkMethod: "pca",
    generated: null,
    colours: "linear",
  };
  let token = 0;

  function set(change) {
    state = { ...state, ...change };
    for (const name of ["view", "layer", "head"]) if (name in change) model.set(name, state[name]);
    model.save_changes();
    draw();
  }

  const headView = Object.keys(VIEW_MODULES)[0]; // a head opens in the first view, the registry's map of one head
  const open = (layer, head) => set({ layer, head, view: headView });
  for (const [name, module] of Object.entries(VIEW_MODULES))
    if (views[name] && module.bind) module.bind(views[name], set);
  layerSelect.addEventListener("change", () => set({ layer: Number(layerSelect.value) }));
  headSelect.addEventListener("change", () => set({ head: Number(headSelect.value) }));
  for (const tab of root.querySelectorAll("[role=tab]"))
    tab.addEventListener("click", () => set({ view: tab.dataset.view }));
  for (const name of ["view", "layer", "head"]) {
    model.on(`change:${name}`, () => {
      if (state[name] !== model.get(name)) {
        state = { ...state, [name]: model.get(name) };
        draw();
      }
    });
  }

  async function draw() {
    const mine = ++token;
    fillIndexSelect(layerSelect, info.num_layers, state.layer, "L");
    fillIndexSelect(headSelect, info.num_heads, state.head, "h");
    for (const tab of root.querySelectorAll("[role=tab]"))
      tab.setAttribute("aria-selected", String(tab.dataset.view === state.view));
    for (const [name, panel] of Object.entries(panels)) panel.hidden = name !== state.view;
    status.textContent = "";
    try {
      const scene = {
        state: Object.freeze({ ...state }),
        session,
        info,
        parts: views[state.view],
        set,
        open,
        isStale: () => mine !== token,
        projections: info.projections,
      };
      await VIEW_MODULES[state.view].render(scene);
    } catch (error) {
      if (mine === token) status.textContent = error.message;
    }
  }
  draw();
}

export default { render };
