// The explorer's tabs and keys: the rows of groups and views, the arrow keys along them, and the
// arrow keys over the chart area that change head and layer.

import { $, el as make } from "../dom.js";

/** Arrow keys move along a row (of tabs, or of token chips), wrapping around; Home and End
 * go to its ends. */
export function arrowThrough(items, item, event, open) {
  const at = items.indexOf(item);
  const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: items.length - 1 }[event.key];
  if (to === undefined) return;
  event.preventDefault();
  const next = items[(to + items.length) % items.length];
  open(next);
  next.focus();
}

/** Fades a row's edge where more tabs lie beyond it (classes more-left, more-right). */
function markMore(row) {
  row.classList.toggle("more-left", row.scrollLeft > 1);
  row.classList.toggle("more-right", row.scrollLeft + row.clientWidth < row.scrollWidth - 1);
}

/** Scrolls a tab's row sideways (never the page) so the tab is in view: on a phone the rows
 * scroll, and a link to a later view must show which one is open. */
function inView(tab) {
  const row = tab.parentElement;
  const rowBox = row.getBoundingClientRect();
  const box = tab.getBoundingClientRect();
  if (box.left < rowBox.left || box.right > rowBox.right) row.scrollLeft += box.left - rowBox.left - 24;
  markMore(row);
}

/**
 * Wires the tabs (page.views, the registry's rows, give each view's group) and the chart
 * area's keys to `state`; `guide` is the line under the tabs, `chart` the chart area and
 * `meta()` the open text's meta (null before a run). Returns showView(view): shows one view,
 * its group's row of views, its tab selected, its panel, and a line with the question its group
 * answers and the lab pages that teach it.
 */
export function wireTabs({ state, page, guide, chart, meta }) {
  const views = page.views.map((v) => v.name);
  const groupOf = Object.fromEntries(page.views.map((v) => [v.name, v.group]));
  const lastInGroup = {}; // the last view opened in each group: a group's tab opens it again

  /** A group's view: the one last opened there, else its first. */
  const viewOfGroup = (group) => lastInGroup[group] || views.find((name) => groupOf[name] === group);

  function showView(view) {
    const group = groupOf[view];
    lastInGroup[group] = view;
    for (const tab of document.querySelectorAll("[data-group]:not([data-view])")) {
      const selected = tab.dataset.group === group;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
    }
    for (const name of views) {
      $(`#view-${name}`).hidden = name !== view;
      const tab = $(`#tab-${name}`);
      tab.hidden = groupOf[name] !== group;
      tab.setAttribute("aria-selected", String(name === view));
      tab.tabIndex = name === view ? 0 : -1;
    }
    for (const tab of [$(`#group-${group}`), $(`#tab-${view}`)]) inView(tab);
    const question = $(`#group-${group}`).title;
    const labs = page.labs[view] || [];
    guide.replaceChildren(
      question,
      ...(labs.length
        ? [
            " Learn how it works: ",
            ...labs.flatMap((lab, i) => [
              i ? ", " : "",
              make("a", { text: lab.title, attrs: { href: `/lab/${lab.slug}` } }),
            ]),
          ]
        : []),
      make("span", { className: "keys-hint", text: " · Keys: ←/→ head, ↑/↓ layer, after a click on a map." }),
    );
  }

  for (const row of document.querySelectorAll(".tabs")) {
    row.addEventListener("scroll", () => markMore(row), { passive: true });
    window.addEventListener("resize", () => markMore(row));
  }
  const groupTabs = [...document.querySelectorAll("[data-group]:not([data-view])")];
  for (const tab of groupTabs) {
    tab.addEventListener("click", () => state.set({ view: viewOfGroup(tab.dataset.group) }));
    tab.addEventListener("keydown", (event) =>
      arrowThrough(groupTabs, tab, event, (next) => state.set({ view: viewOfGroup(next.dataset.group) })),
    );
  }
  for (const tab of document.querySelectorAll("[data-view]")) {
    tab.addEventListener("click", () => state.set({ view: tab.dataset.view }));
    tab.addEventListener("keydown", (event) => {
      const shown = [...document.querySelectorAll("[data-view]:not([hidden])")];
      arrowThrough(shown, tab, event, (next) => state.set({ view: next.dataset.view }));
    });
  }
  // A click on a map gives the chart area focus, so the arrow keys work at once.
  chart.addEventListener("pointerdown", (event) => {
    if (event.target.closest("input, select, textarea, button, a, table, canvas")) return;
    chart.dataset.pointer = "1"; // focused by a click: no keyboard focus ring until a key moves it
    chart.focus({ preventScroll: true });
  });
  chart.addEventListener("blur", () => delete chart.dataset.pointer);
  chart.addEventListener("keydown", (event) => {
    const info = meta();
    if (!info || event.target.closest("input, select, textarea, button, table")) return;
    const { layer, head } = state.get();
    const { num_layers: layers, num_heads: heads } = info;
    const moves = {
      ArrowLeft: { head: (head - 1 + heads) % heads },
      ArrowRight: { head: (head + 1) % heads },
      ArrowUp: { layer: (layer - 1 + layers) % layers },
      ArrowDown: { layer: (layer + 1) % layers },
    };
    if (!moves[event.key] || event.target.tagName === "CANVAS") return;
    event.preventDefault();
    state.set(moves[event.key]);
  });
  return showView;
}
