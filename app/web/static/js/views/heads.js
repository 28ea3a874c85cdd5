// Head roles: one statistic over every layer and head as a map, and every head in a sortable
// table with its roles (each with the score that decided it).

import { api } from "../api.js";
import { linearBar, viridis } from "../colors.js";
import { el as make } from "../dom.js";
import { drawChart, drawHeatmap, onCellClick } from "./plot.js";

const INDUCTION_LENGTH = 50; // random tokens before the repeat
const SHARES_ABOVE = 0.9; // the summary counts heads whose share passes this

/** "L3" for each layer; "h5" (or "h5 · kv1" with grouped-query attention) for each head. */
export function headLabels(info) {
  const group = info.num_heads / info.num_kv_heads;
  return {
    layers: Array.from({ length: info.num_layers }, (_, l) => `L${l}`),
    heads: Array.from({ length: info.num_heads }, (_, h) =>
      group > 1 ? `h${h} · kv${Math.floor(h / group)}` : `h${h}`,
    ),
  };
}

/** Whether a (layers x heads) grid with nulls has any value: an all-null grid is not drawn
 * (there is nothing to colour, and Plotly would drop every layer and head from its axes). */
export function anyValue(grid) {
  return grid.some((row) => row?.some((v) => v !== null));
}

/** A statistic's value written in its cell or table row; "–" where no query row qualifies. */
export const NO_VALUE = "–";

/** The largest value of a (layers x heads) grid with nulls: the colour scale's top. */
export function gridMax(grid) {
  return Math.max(1e-9, ...grid.flat().filter((v) => v !== null));
}

function format(statistic, value) {
  if (value === null) return NO_VALUE;
  return statistic === "distance" ? value.toFixed(1) : value.toFixed(3);
}

/** How the page names a statistic ("same word"; the API's key is same_word). */
const labelOf = (data, name) => data.labels?.[name] ?? name.replace("_", " ");

/** The sort state "-previous" -> {key: "previous", descending: true}. */
function parseSort(sort) {
  if (!sort) return { key: "layer", descending: false };
  return sort.startsWith("-") ? { key: sort.slice(1), descending: true } : { key: sort, descending: false };
}

export function bind(parts, set) {
  parts.stat.addEventListener("change", () => set({ stat: parts.stat.value }));
  parts.table.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-sort]");
    if (button) set({ sort: button.dataset.sort });
  });
}

export async function render({ session, state, parts, info, set, open, isStale, replaceText }) {
  parts.induction.onclick = async () => {
    parts.induction.disabled = true;
    try {
      const made = await api.inductionText(state.model, INDUCTION_LENGTH, 0);
      const patch = { text: made.text, view: "heads", stat: "induction", sort: "-induction" };
      const why = `Showing ${INDUCTION_LENGTH} random tokens written twice, the test text for induction heads.`;
      if (replaceText) replaceText(patch, why);
      else set(patch); // the notebook widget has no text of its own to keep
    } finally {
      parts.induction.disabled = false;
    }
  };
  const data = await session.heads();
  if (isStale()) return null;
  const names = Object.keys(data.statistics);
  if (parts.stat.options.length !== names.length) {
    parts.stat.replaceChildren(...names.map((name) => new Option(labelOf(data, name), name)));
  }
  const stat = names.includes(state.stat) ? state.stat : "previous";
  parts.stat.value = stat;
  // Each role's threshold, beside the statistic that decides it.
  const decides = Object.entries(data.rules).filter(([, rule]) => rule.statistic === stat);
  const roles = decides.map(([role, rule]) => `${role} head at ≥ ${rule.threshold}`);
  parts.describe.textContent = `${labelOf(data, stat)}: ${data.descriptions[stat]}.${roles.length ? ` Role: ${roles.join("; ")}.` : ""}`;
  const grid = data.statistics[stat];
  const labels = headLabels(info);
  const top = stat === "distance" ? gridMax(grid) : 1;
  const kvGroup = info.num_heads / info.num_kv_heads;
  const shapes = [
    // the open head, outlined
    {
      type: "rect",
      x0: state.head - 0.5,
      x1: state.head + 0.5,
      y0: state.layer - 0.5,
      y1: state.layer + 0.5,
      line: { color: "#e4572e", width: 2 },
    },
  ];
  for (let g = 1; kvGroup > 1 && g < info.num_kv_heads; g++) {
    // heads that share a key/value head sit between these lines
    shapes.push({
      type: "line",
      x0: g * kvGroup - 0.5,
      x1: g * kvGroup - 0.5,
      y0: -0.5,
      y1: info.num_layers - 0.5,
      line: { color: "#fff", width: 2 },
    });
  }
  const title = `${labelOf(data, stat)} of every head · rows: layers, columns: heads · click a cell to open it`;
  const scored = anyValue(grid);
  parts.map.hidden = !scored; // the summary below says why
  if (scored) {
    await drawHeatmap(parts.map, grid, labels.layers, labels.heads, {
      title,
      zmin: 0,
      zmax: top,
      hoverName: stat,
      numbered: false,
      shapes,
      showText: true,
      digits: stat === "distance" ? 1 : 2,
      missingText: NO_VALUE,
      height: Math.min(820, Math.max(300, 22 * info.num_layers + 150)),
    });
    onCellClick(parts.map, (layer, head) => open(layer, head));
  }
  parts.summary.textContent = summarise(data, stat, grid);
  parts.corpus.href = `/heads/${session.model}`; // what each head does over many texts
  await againstCorpus(session, state, parts, data, stat, open, isStale);
  showTable(parts.table, data, info, parseSort(state.sort), open);
  return {
    kind: "head",
    element: scored ? parts.map : null,
    where: `heads-${stat}`,
    tokens: labels.heads,
    rowTokens: labels.layers,
    matrix: grid,
    matrixName: stat,
    blank: "",
    corner: "layer \\ head",
    title,
    colour: (v) => viridis(v / top),
    colourBar: linearBar(top, labelOf(data, stat)),
    payload: {
      what: "statistics[name][layer][head] of every head on this text (null: no query row qualifies); roles[layer][head] strongest first",
      statistics: data.statistics,
      descriptions: data.descriptions,
      roles: data.roles,
      rules: data.rules,
    },
  };
}

const corpusHeads = new Map(); // model -> its corpus run's every-head answer (asked again while none)

/** Where the model has a corpus run: this text's statistic against the corpus mean, a dot a
 * head; heads far from the diagonal do something else on this text than in general. */
async function againstCorpus(session, state, parts, data, stat, open, isStale) {
  if (!parts.corpusPlot || !api.corpusRuns) return;
  if (!corpusHeads.get(session.model)) {
    // the server's corpus job may have described it since
    const runs = await api
      .corpusRuns()
      .then((r) => r.runs)
      .catch(() => []);
    const run = runs.filter((r) => r.model === session.model && r.done).sort((a, b) => b.done - a.done)[0];
    corpusHeads.set(session.model, run ? await api.corpusHeads(run.id).catch(() => null) : null);
  }
  const corpus = corpusHeads.get(session.model);
  parts.corpusPlot.hidden = !corpus?.statistics[stat];
  parts.openCorpus.hidden = !corpus;
  if (corpus) {
    parts.openCorpus.href = `/head/${session.model}/${state.layer}/${state.head}`;
    parts.openCorpus.textContent = `Layer ${state.layer} head ${state.head} over the corpus →`;
  }
  if (parts.corpusPlot.hidden || isStale()) return;
  const points = [];
  data.layers.forEach((layer, row) =>
    data.statistics[stat][row].forEach((here, head) => {
      const general = corpus.statistics[stat][layer][head];
      if (here !== null && general !== null) points.push({ layer, head, here, general });
    }),
  );
  const top = Math.max(1, ...points.map((p) => Math.max(p.here, p.general)));
  await drawChart(
    parts.corpusPlot,
    [
      {
        type: "scatter",
        mode: "lines",
        x: [0, top],
        y: [0, top],
        line: { color: "#bbb", dash: "dot" },
        hoverinfo: "skip",
        showlegend: false,
      },
      {
        type: "scatter",
        mode: "markers",
        x: points.map((p) => p.general),
        y: points.map((p) => p.here),
        showlegend: false,
        customdata: points.map((p) => [p.layer, p.head]),
        marker: { color: "#4d7ea8", size: 8 },
        hovertemplate: `L%{customdata[0]} h%{customdata[1]}<br>over the corpus %{x:.3f}<br>on this text %{y:.3f}<extra></extra>`,
      },
    ],
    {
      title: `${labelOf(data, stat)}: this text (up) against ${corpus.run.done} texts of ${corpus.run.corpus} (across). Off the diagonal, a head does something else here than in general; click one to open it`,
      height: 420,
      xaxis: { title: { text: "over the corpus" } },
      yaxis: { title: { text: "on this text" } },
    },
  );
  parts.corpusPlot.removeAllListeners?.("plotly_click");
  parts.corpusPlot.on("plotly_click", (event) => {
    const [layer, head] = event.points[0].customdata ?? [];
    if (layer !== undefined) open(layer, head);
  });
}

function summarise(data, stat, grid) {
  const values = grid.flatMap((row, l) => row.map((v, h) => [v, l, h])).filter(([v]) => v !== null);
  if (!values.length) {
    return stat === "induction" || stat === "duplicate"
      ? "No token repeats in this text, so no head can be scored: press “Test for induction heads”."
      : "No query row qualifies for this statistic on this text.";
  }
  values.sort((a, b) => b[0] - a[0]);
  const [v, l, h] = values[0];
  const best = `highest: layer ${l} head ${h} (${format(stat, v)})`;
  const took = data.compute_ms < 1 ? "under 1 ms" : `${data.compute_ms.toFixed(0)} ms`;
  const timing = `computed in ${took} from the cached forward pass`;
  if (stat === "distance") return `${best}; ${timing}.`;
  const above = values.filter(([x]) => x > SHARES_ABOVE).length;
  return `${above} of ${values.length} heads above ${SHARES_ABOVE}; ${best}; ${timing}.`;
}

/** Every head as a table row, sorted; the first cell opens the head. */
function showTable(table, data, info, sort, open) {
  const names = Object.keys(data.statistics);
  const rows = [];
  for (let l = 0; l < info.num_layers; l++) {
    for (let h = 0; h < info.num_heads; h++) {
      const row = { layer: l, head: h, roles: data.roles[l][h] };
      for (const name of names) row[name] = data.statistics[name][l][h];
      rows.push(row);
    }
  }
  const key =
    sort.key === "roles" || sort.key === "layer" || sort.key === "head" || names.includes(sort.key)
      ? sort.key
      : "layer";
  const value = (row) => (key === "roles" ? (row.roles[0]?.score ?? -1) : (row[key] ?? -Infinity));
  rows.sort(
    (a, b) => (sort.descending ? value(b) - value(a) : value(a) - value(b)) || a.layer - b.layer || a.head - b.head,
  );
  // The statistic sorted by comes first after the head, so that on a narrow screen the column
  // the rows are ranked by (a lesson's answer) is on screen and labelled, not scrolled away.
  const shown = names.includes(key) ? [key, ...names.filter((n) => n !== key)] : names;
  const columns = ["layer", "head", ...(names.includes(key) ? [key] : []), "roles", ...shown.filter((n) => n !== key)];
  const label = (name) => labelOf(data, name);
  const header = make(
    "tr",
    {},
    columns.map((name) => {
      const active = name === key;
      const next = active && sort.descending ? name : `-${name}`; // click again to reverse
      const title = data.descriptions[name] ? `${name}: ${data.descriptions[name]}` : "";
      const th = make(
        "th",
        { attrs: { scope: "col", "aria-sort": active ? (sort.descending ? "descending" : "ascending") : "none" } },
        [
          make("button", {
            text: label(name) + (active ? (sort.descending ? " ↓" : " ↑") : ""),
            className: "link",
            attrs: { type: "button", "data-sort": next, title },
          }),
        ],
      );
      return th;
    }),
  );
  const group = info.num_heads / info.num_kv_heads;
  const body = make("tbody");
  for (const row of rows) {
    const opener = make("button", {
      text: `L${row.layer} H${row.head}`,
      className: "link",
      attrs: { type: "button", title: `open layer ${row.layer} head ${row.head}` },
    });
    opener.addEventListener("click", () => open(row.layer, row.head, { focusView: true }));
    const roles = row.roles.map((r) => `${r.role} ${r.score.toFixed(2)}`).join(", ");
    const statistic = (name) => make("td", { text: format(name, row[name]) });
    const cells = [
      make("th", { attrs: { scope: "row" } }, [opener]),
      make("td", { text: group > 1 ? `${row.head} · kv${Math.floor(row.head / group)}` : String(row.head) }),
      ...(names.includes(key) ? [statistic(key)] : []),
      make("td", { text: roles || "–", className: "roles" }),
      ...shown.filter((n) => n !== key).map(statistic),
    ];
    const line = make("tr", { className: "opens" }, cells);
    // A click anywhere on the row opens its head, as the first cell's button does for the keyboard.
    line.addEventListener("click", (event) => {
      if (!event.target.closest("button, a")) open(row.layer, row.head, { focusView: true });
    });
    body.append(line);
  }
  table.replaceChildren(
    make("caption", { text: `${rows.length} heads, sorted by ${label(key)}` }),
    make("thead", {}, [header]),
    body,
  );
}
