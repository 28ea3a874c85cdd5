// One head over a corpus: its statistics' spread over the texts, texts by tenth of a ranking
// (each drawn as the explorer draws this head), its tokens, its distances, and a check of the
// user's own text against what the corpus says. State (metric, run, text) is in the URL.

import { api } from "../api.js";
import { followCorpus } from "../corpus-progress.js";
import { $, el, metricCard, readPageData, showError } from "../dom.js";
import { EMBED_STATE, embedded, keepEmbedded } from "../embed.js";
import { createState, textFields } from "../state.js";
import { drawChart, drawHeatmap, plotlyReady, warmPlotlySoon, weightScale } from "../views/plot.js";
import { drawHeadVis } from "./head-headvis.js";
import { mountProjection, PROJECTION_STATE } from "./head-projection.js";

const page = readPageData();
const { model, layer, head } = page;
const DESCRIBE = Object.fromEntries(page.statistics);
const label = (name) => page.labels[name] ?? name;
const SHOWN = ["entropy", "first", "previous", "self", "induction", "distance", "max_weight", "local"];
// The statistic shown, the corpus run and the user's own text: all in the link.
const state = createState(
  textFields({ metric: null, run: null, text: "", ...PROJECTION_STATE, ...EMBED_STATE }),
  {},
  { always: [] },
);
state.readUrl();
const value = (name) => state.get()[name];
const error = $("#head-error");

const explorerLink = (text, q) =>
  `/?${new URLSearchParams({ model, text, layer, head, ...(q === undefined ? {} : { q }) })}`; // the view a head opens in, the explorer's default
const zoomLink = (text) => `/zoom?${new URLSearchParams({ model, layer, head })}#${new URLSearchParams({ text })}`;

function tokenTable(table, caption, rows) {
  const headRow = el(
    "tr",
    {},
    ["token", "attention", "texts"].map((t) => el("th", { text: t, attrs: { scope: "col" } })),
  );
  table.replaceChildren(
    el("caption", { text: caption }),
    el("thead", {}, [headRow]),
    el(
      "tbody",
      {},
      rows.map((r) =>
        el("tr", {}, [
          el("td", { className: "tok", text: r.token }),
          el("td", { text: r.weight.toFixed(2) }),
          el("td", { text: String(r.texts) }),
        ]),
      ),
    ),
  );
}

async function drawHistograms(dashboard) {
  const grid = $("#head-histograms");
  const names = [dashboard.metric, ...SHOWN.filter((n) => n !== dashboard.metric)];
  grid.replaceChildren();
  for (const name of names) {
    const { edges, counts } = dashboard.histograms[name];
    const figure = el("figure", { className: "stage" });
    const plot = el("div", { className: "plot" });
    figure.append(plot);
    grid.append(figure);
    const mids = counts.map((_, i) => (edges[i] + edges[i + 1]) / 2);
    const mean = dashboard.statistics[name];
    figure.title = `${name}: ${DESCRIBE[name] ?? ""}`;
    await drawChart(
      plot,
      [
        {
          type: "bar",
          x: mids,
          y: counts,
          marker: { color: "#4d7ea8" },
          hovertemplate: `${label(name)} %{x:.2f}: %{y} texts<extra></extra>`,
        },
      ],
      {
        title: `${label(name)}${mean === null ? "" : ` · mean ${mean.toFixed(2)}`}: ${DESCRIBE[name] ?? ""}`,
        height: 240,
        bargap: 0.05,
        xaxis: { title: { text: label(name) } },
        yaxis: { title: { text: "texts" } },
      },
    );
  }
}

const sampleMaps = new Map(); // text idx -> its map, so that a redraw does not fetch it again

async function drawTexts(dashboard) {
  const grid = $("#head-texts");
  grid.replaceChildren();
  const count = dashboard.texts.length;
  for (const [i, item] of dashboard.texts.entries()) {
    const figure = el("figure", { className: "stage" });
    const caption = el("figcaption", {
      text: `Tenth ${item.decile + 1} of 10 · ${label(dashboard.metric)} ${item.value.toFixed(3)}`,
    });
    const links = el("p", { className: "help" }, [
      el("a", { text: "Open in the explorer", attrs: { href: explorerLink(item.text) } }),
      " · ",
      el("a", { text: "Deep zoom", attrs: { href: zoomLink(item.text) } }),
    ]);
    const placeholder = el("p", {
      className: "placeholder",
      text: `Map ${i + 1} of ${count}: waiting for the maps before it`,
      attrs: { role: "status" },
    });
    const plot = el("div", { className: "plot" }, [placeholder]);
    figure.append(caption, plot, links);
    grid.append(figure);
  }
  const figures = [...grid.children];
  for (const [i, item] of dashboard.texts.entries()) {
    const plot = figures[i].querySelector(".plot");
    const placeholder = plot.querySelector(".placeholder");
    if (placeholder) placeholder.textContent = `Map ${i + 1} of ${count}: the model is reading text ${item.idx}…`;
    if (!sampleMaps.has(item.idx)) {
      sampleMaps.set(
        item.idx,
        await api.attention({ model, text: item.text, layers: [layer], heads: [head], format: "json" }),
      );
    }
    const maps = sampleMaps.get(item.idx);
    if (!plot.isConnected) return; // redrawn meanwhile (more texts done)
    placeholder?.remove();
    const weights = maps.attentions[0][0];
    const scale = weightScale("linear", weights);
    await drawHeatmap(plot, scale.options.z, maps.tokens, maps.tokens, {
      ...scale.options,
      hoverName: "weight",
      height: 300,
      showScale: false,
      title: `text ${item.idx}: ${maps.tokens.length} tokens`,
    });
  }
}

/** A sequence's text from its tokens decoded one at a time (all an imported tree keeps): joined
 * as they are, except WordPiece's pieces, which decode without their spaces ("##" marks a piece
 * that continues a word). Close, not exact: a tokenizer may have changed the text's spacing. */
function rebuilt(tokens) {
  if (!tokens.some((t) => t.startsWith("##"))) return tokens.join("");
  const words = tokens.filter((t) => !/^\[[A-Z]+\]$/.test(t)); // [CLS], [SEP]: the tokenizer adds them
  return words.map((t, i) => (t.startsWith("##") ? t.slice(2) : i ? ` ${t}` : t)).join("");
}

/** Whether a span of two tokens or more comes twice (what an induction head copies from). */
function repeatsASpan(tokens) {
  const seen = new Set();
  for (let i = 0; i + 1 < tokens.length; i++) {
    const pair = `${tokens[i]}\u0000${tokens[i + 1]}`;
    if (seen.has(pair)) return true;
    seen.add(pair);
  }
  return false;
}

async function compareText(dashboard) {
  const text = $("#head-text").value.trim();
  const verdict = $("#head-verdict");
  state.set({ text });
  if (!text) return;
  verdict.textContent = "Running the model on your text…";
  const found = await api.heads({ model, text, layers: [layer] });
  const mine = found.roles[0][head].map((r) => r.role);
  const corpus = dashboard.roles;
  const missing = corpus.filter((r) => !mine.includes(r));
  const extra = mine.filter((r) => !corpus.includes(r));
  const value = found.statistics[dashboard.metric][0][head];
  const mean = dashboard.statistics[dashboard.metric];
  const parts = [
    `On your text (${found.tokens.length} tokens) this head's ${label(dashboard.metric)} is ${value === null ? "not defined" : value.toFixed(3)}, against ${mean === null ? "none" : mean.toFixed(3)} over the corpus.`,
  ];
  if (!missing.length && !extra.length)
    parts.push(
      corpus.length
        ? ` It does here what it does in general: ${corpus.join(", ")}.`
        : " Neither the corpus nor your text gives it a role.",
    );
  const why = !missing.includes("induction")
    ? ""
    : repeatsASpan(found.tokens)
      ? " (your text repeats a span, yet this head does not read from its earlier copy here)"
      : " (an induction head needs a repeated span to show it, and your text has none: write part of it twice)";
  if (missing.length) parts.push(` The corpus calls it ${missing.join(", ")}; on your text it is not${why}.`);
  if (extra.length) parts.push(` On your text it is ${extra.join(", ")}, which it is not over the corpus.`);
  verdict.replaceChildren(
    parts.join(""),
    " ",
    el("a", { text: "Open your text in the explorer", attrs: { href: explorerLink(text) } }),
  );
}

async function main() {
  document.title = `Layer ${layer} head ${head} of ${model} over a corpus · Attention Atlas`;
  $("#head-title").textContent = `Layer ${layer} head ${head} of ${model}, over a corpus`;
  $("#head-all").href = `/heads/${model}${value("run") !== null ? `?run=${value("run")}` : ""}`;
  $("#head-explorer").href = `/?${new URLSearchParams({ model, layer, head })}`;
  const select = $("#head-metric");
  let dashboard = null;
  let run = null;
  let live = null; // whether this server can run the model (an imported tree may lack it)
  const sequenceLink = (seq) => {
    if (!live) return null;
    const text = seq.text ?? rebuilt(seq.tokens);
    return el("a", {
      text: seq.text ? "Open in the explorer" : "Open in the explorer (text rebuilt from its tokens)",
      attrs: { href: explorerLink(text) },
    });
  };
  const showImported = async () => {
    for (const id of ["#head-atlas", "#head-yours", "#head-metric-label"]) $(id).hidden = true;
    $("#head-summary").textContent =
      `Imported from a HeadVis data tree: ${run.planned.toLocaleString("en")} sequences of ${run.corpus.replace(/^headvis:/, "")} (up to ${run.sequence_tokens} tokens each). A tree keeps HeadVis's numbers and sampled sequences, not Atlas's per-text statistics.${live ? "" : ` ${model} is not installed on this server, so the views that run the model (the explorer, your own text) are not offered.`}`;
    await drawHeadVis(run.id, layer, head, { linkFor: sequenceLink, labels: page.labels });
  };
  const show = async () => {
    if (run.source === "headvis") return showImported();
    const metric = value("metric");
    dashboard = await api.corpusHead(run.id, layer, head, metric ? { metric, per_decile: 1 } : { per_decile: 1 });
    select.value = dashboard.metric;
    $("#head-summary").textContent =
      `Over ${run.done.toLocaleString("en")} texts of ${run.corpus} (up to ${run.sequence_tokens} tokens each): ${dashboard.roles.length ? `its roles are ${dashboard.roles.join(", ")}` : "no role passes its threshold on average"}; texts ranked by ${label(dashboard.metric)}.`;
    $("#head-means").replaceChildren(
      ...run.statistics.map((name) => {
        const card = metricCard(
          label(name),
          dashboard.statistics[name] === null ? "—" : dashboard.statistics[name].toFixed(3),
        );
        card.title = `${name}: ${DESCRIBE[name] ?? ""}`;
        return card;
      }),
    );
    tokenTable($("#head-to"), "The tokens it reads most (the first token aside)", dashboard.to_tokens);
    tokenTable($("#head-from"), "The tokens that read most sharply", dashboard.from_tokens);
    const bins = dashboard.distance_edges.map((edge, i) =>
      i + 1 < dashboard.distance_edges.length ? `${edge}–${dashboard.distance_edges[i + 1] - 1}` : `${edge}+`,
    );
    await drawChart(
      $("#head-distance"),
      [{ type: "bar", x: bins, y: dashboard.distance, marker: { color: "#b2182b" } }],
      {
        title: "How far back it looks: its attention by query–key distance (tokens)",
        height: 300,
        xaxis: { type: "category", title: { text: "distance" } },
        yaxis: { title: { text: "share of attention" } },
      },
    );
    await drawHistograms(dashboard);
    mountProjection({ state, runId: run.id, layer, head, explorerLink, newTab: embedded() });
    await drawHeadVis(run.id, layer, head, { linkFor: sequenceLink, labels: page.labels }).catch(() => {
      $("#hv").hidden = true; // a run described before the job kept HeadVis's numbers
    });
    await drawTexts(dashboard);
  };
  const first = await followCorpus(model, Number(value("run")), $("#head-progress"), {
    onRun: async (found) => {
      const firstRun = run === null;
      run = found;
      if (firstRun) {
        live = (await api.models()).models.some((m) => m.id === model);
        $("#head-explorer").hidden = !live;
        select.replaceChildren(...run.statistics.map((name) => new Option(label(name), name)));
        await plotlyReady();
      }
      await show();
    },
    missing: () => {
      $("#head-summary").textContent =
        `No corpus run for ${model} yet. Run \`atlas corpus run --model ${model}\` (or \`make corpus\` for both embedded models), then reload.`;
    },
    onError: (err) => showError(error, err.message),
  });
  if (!first) return;
  select.addEventListener("change", async () => {
    state.set({ metric: select.value });
    await show().catch((err) => showError(error, err.message));
  });
  $("#head-text").value = value("text");
  $("#head-compare").addEventListener("submit", (event) => {
    event.preventDefault();
    compareText(dashboard).catch((err) => showError(error, err.message));
  });
  if (value("text")) await compareText(dashboard);
}

keepEmbedded();
warmPlotlySoon();
main().catch((err) => showError(error, err.message));
