// Every head of a model over a corpus: a scatter on any two corpus statistics, coloured by a
// third, and a finder over them. A click opens the head's page. State is in the URL.

import { api } from "../api.js";
import { followCorpus } from "../corpus-progress.js";
import { $, el, readPageData, showError } from "../dom.js";
import { EMBED_STATE, embedLink, keepEmbedded } from "../embed.js";
import { createState, textFields } from "../state.js";
import { drawChart, plotlyReady, warmPlotlySoon } from "../views/plot.js";

const page = readPageData();
const { model } = page;
const error = $("#heads-error");
// The axes, the colour, the finder's statistic and range, and the corpus run: all in the link.
const state = createState(
  textFields({
    x: "previous",
    y: "first",
    colour: "entropy",
    find: "induction",
    min: "0.3",
    max: "1",
    run: null,
    ...EMBED_STATE,
  }),
  {},
  { always: [], keepEmpty: true },
);
state.readUrl();
const value = (name) => state.get()[name];
const DESCRIBE = Object.fromEntries(page.statistics);
const label = (name) => page.labels[name] ?? name;

const headLink = (layer, head, run) => embedLink(`/head/${model}/${layer}/${head}?run=${run}`);

function cells(data, name) {
  const out = [];
  (data.statistics[name] ?? []).forEach((row, layer) => row.forEach((v, head) => out.push({ layer, head, v })));
  return out;
}

// Where a run lacks a statistic (a HeadVis tree has only HeadVis's six), its nearest.
const FALLBACK = {
  previous: "prev_token_score",
  self: "self_attention_score",
  entropy: "pattern_entropy",
  distance: "qk_distance",
  induction: "induction_score",
  first: "self_attention_score",
};
const usable = (data, name) =>
  name in data.statistics ? name : FALLBACK[name] in data.statistics ? FALLBACK[name] : Object.keys(data.statistics)[0];

/** The axis, colour and finder choices: the run's statistics, Atlas's and HeadVis's apart. */
function fillChoices(data) {
  const groups = [
    ["Atlas: mean over texts", Object.keys(DESCRIBE).filter((n) => n in data.statistics && !data.headvis.includes(n))],
    ["HeadVis: pooled over every row", data.headvis],
  ].filter(([, names]) => names.length);
  for (const [id, key] of CHOICES) {
    const select = $(id);
    select.replaceChildren(
      ...groups.map(([name, names]) => {
        const group = el("optgroup", { attrs: { label: name } });
        for (const n of names) {
          const option = new Option(label(n), n);
          option.title = `${n}: ${DESCRIBE[n] ?? ""}`;
          group.append(option);
        }
        return group;
      }),
    );
    const chosen = usable(data, value(key));
    if (chosen !== value(key)) state.set({ [key]: chosen });
    select.value = chosen;
  }
}

async function drawScatter(data) {
  const [x, y, colour] = ["x", "y", "colour"].map(value);
  const xs = cells(data, x);
  const ys = cells(data, y);
  const cs = cells(data, colour);
  const spread = cells({ statistics: data.spread }, y); // none for HeadVis's pooled metrics
  const spreadNote = y in data.spread ? " (± %{customdata[2]:.3f} over texts)" : "";
  const plot = $("#heads-scatter");
  await drawChart(
    plot,
    [
      {
        type: "scatter",
        mode: "markers",
        x: xs.map((c) => c.v),
        y: ys.map((c) => c.v),
        marker: {
          color: cs.map((c) => c.v),
          colorscale: "Viridis",
          showscale: true,
          size: 9,
          colorbar: { title: { text: label(colour) }, thickness: 10 },
        },
        customdata: xs.map((c, i) => [
          c.layer,
          c.head,
          spread[i]?.v ?? 0,
          data.roles[c.layer][c.head].join(", ") || "no role",
        ]),
        hovertemplate: `L%{customdata[0]} h%{customdata[1]}<br>${label(x)} %{x:.3f}<br>${label(y)} %{y:.3f}${spreadNote}<br>%{customdata[3]}<extra></extra>`,
      },
    ],
    {
      title: `${data.run.layers * data.run.heads} heads of ${model} over ${data.run.done} ${data.run.source === "headvis" ? "sequences" : "texts"} of ${data.run.corpus.replace(/^headvis:/, "")}: ${label(x)} across, ${label(y)} up, colour ${label(colour)}`,
      height: 520,
      xaxis: { title: { text: label(x) } },
      yaxis: { title: { text: label(y) } },
    },
  );
  plot.removeAllListeners?.("plotly_click");
  plot.on("plotly_click", (event) => {
    const [layer, head] = event.points[0].customdata;
    location.href = headLink(layer, head, data.run.id);
  });
}

function drawFinder(data) {
  const name = value("find");
  const lo = Number(value("min"));
  const hi = Number(value("max"));
  const found = cells(data, name)
    .filter((c) => c.v !== null && c.v >= lo && c.v <= hi)
    .sort((a, b) => b.v - a.v);
  const headRow = el(
    "tr",
    {},
    ["head", label(name), "± over texts", "roles on the corpus"].map((t) =>
      el("th", { text: t, attrs: { scope: "col" } }),
    ),
  );
  $("#heads-found").replaceChildren(
    el("caption", { text: `${found.length} heads with ${label(name)} from ${lo} to ${hi}` }),
    el("thead", {}, [headRow]),
    el(
      "tbody",
      {},
      found.map((c) =>
        el("tr", {}, [
          el("td", {}, [
            el("a", {
              text: `layer ${c.layer} head ${c.head}`,
              attrs: { href: headLink(c.layer, c.head, data.run.id) },
            }),
          ]),
          el("td", { text: c.v.toFixed(3) }),
          el("td", { text: name in data.spread ? (data.spread[name][c.layer][c.head] ?? 0).toFixed(3) : "—" }),
          el("td", { text: data.roles[c.layer][c.head].join(", ") || "—" }),
        ]),
      ),
    ),
  );
}

const CHOICES = [
  ["#heads-x", "x"],
  ["#heads-y", "y"],
  ["#heads-colour", "colour"],
  ["#heads-find-stat", "find"],
];

function bindControls(current) {
  for (const [id, key] of CHOICES) {
    const select = $(id);
    select.addEventListener("change", () => {
      state.set({ [key]: select.value });
      if (current() === null) return;
      (key === "find" ? Promise.resolve(drawFinder(current())) : drawScatter(current())).catch((err) =>
        showError(error, err.message),
      );
    });
  }
  for (const [id, key] of [
    ["#heads-find-min", "min"],
    ["#heads-find-max", "max"],
  ]) {
    const input = $(id);
    input.value = value(key);
    input.addEventListener("change", () => {
      state.set({ [key]: input.value });
      if (current() !== null) drawFinder(current());
    });
  }
}

/** The import form: a zipped HeadVis tree becomes a run, and the page moves to its scatter. */
function bindImport() {
  const status = $("#heads-import-status");
  $("#heads-import").addEventListener("submit", async (event) => {
    event.preventDefault();
    const [file] = $("#heads-import-file").files;
    if (!file) {
      status.textContent = "Choose a zip of a HeadVis tree first.";
      return;
    }
    status.textContent = `Importing ${file.name} (${(file.size / 2 ** 20).toFixed(1)} MB)…`;
    try {
      const run = await api.importTree(file);
      status.textContent = `Imported as run ${run.id}: ${run.layers} layers × ${run.heads} heads of ${run.model}. Opening its heads…`;
      location.href = `/heads/${run.model}?run=${run.id}`;
    } catch (err) {
      status.textContent = `Not imported: ${err.message}`;
    }
  });
}

async function main() {
  $("#heads-title").textContent = `Every head of ${model}, over a corpus`;
  bindImport();
  let data = null;
  bindControls(() => data);
  await followCorpus(model, Number(value("run")), $("#heads-progress"), {
    onRun: async (run) => {
      if (data === null) await plotlyReady();
      data = await api.corpusHeads(run.id);
      fillChoices(data);
      $("#heads-summary").textContent =
        run.source === "headvis"
          ? `Run ${run.id}: imported from a HeadVis data tree, ${run.planned.toLocaleString("en")} sequences of ${run.corpus.replace(/^headvis:/, "")}, up to ${run.sequence_tokens} tokens each: HeadVis's six metrics only.`
          : `Run ${run.id}: ${run.done.toLocaleString("en")} texts of ${run.corpus}, up to ${run.sequence_tokens} tokens each. HeadVis's metrics are listed apart: they pool every row of the run, where Atlas's average each text's.`;
      await drawScatter(data);
      drawFinder(data);
    },
    missing: () => {
      $("#heads-summary").textContent =
        `No corpus run for ${model} yet. Run \`atlas corpus run --model ${model}\` (or \`make corpus\`), then reload.`;
    },
    onError: (err) => showError(error, err.message),
  });
}

keepEmbedded();
warmPlotlySoon();
main().catch((err) => showError(error, err.message));
