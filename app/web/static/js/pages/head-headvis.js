// A head as HeadVis shows it (GET /api/corpus/{run}/heads/{layer}/{head}/headvis): its six
// metrics, the max-activation histogram over every sequence of the run, the query-key distance
// and top tokens over its sampled sequences, and those sequences by interval, each a line of
// tokens shaded as HeadVis shades them. A click on a token shows what that query reads.

import { api } from "../api.js";
import { $, el, metricCard } from "../dom.js";
import { drawChart } from "../views/plot.js";

const SHADE = [255, 140, 0]; // dark text stays readable on it at any weight

/** A token as text a reader can see: a newline or tab shown as a mark. */
const shown = (token) => token.replaceAll("\n", "↵").replaceAll("\t", "⇥") || "∅";

/** sequence -> rows[q] = [[k, weight], ...] from its flat COO. */
function rowsOf(seq) {
  const rows = Array.from({ length: seq.tokens.length }, () => []);
  seq.attention_indices.forEach((index, i) => {
    const q = Math.floor(index / seq.tokens.length);
    rows[q].push([index % seq.tokens.length, seq.attention_values[i]]);
  });
  return rows;
}

/** Each token's shade when no query is chosen: the most it receives from a query, row 0 and
 * key 0 left out (HeadVis's own rule for maxima). */
function received(rows, length) {
  const out = new Array(length).fill(0);
  rows.forEach((row, q) => {
    if (q === 0) return;
    for (const [k, w] of row) if (k > 0) out[k] = Math.max(out[k], w);
  });
  return out;
}

function shade(span, weight) {
  span.style.backgroundColor = `rgba(${SHADE.join(",")},${(0.85 * Math.min(1, weight)).toFixed(3)})`;
}

function drawSequence(seq, { top, linkFor }) {
  const rows = rowsOf(seq);
  const base = received(rows, seq.tokens.length);
  const line = el("p", { className: "hv-tokens" });
  const spans = seq.tokens.map((token, i) => {
    const span = el("span", { className: "hv-tok", text: shown(token), attrs: { "data-i": String(i) } });
    shade(span, base[i]);
    span.title = `${JSON.stringify(token)} receives at most ${base[i].toFixed(3)}`;
    return span;
  });
  line.append(...spans);
  let chosen = null;
  const choose = (q) => {
    chosen = chosen === q ? null : q;
    const weights = chosen === null ? base : new Array(seq.tokens.length).fill(0);
    if (chosen !== null) for (const [k, w] of rows[chosen]) weights[k] = w;
    spans.forEach((span, i) => {
      shade(span, weights[i]);
      span.classList.toggle("hv-query", i === chosen);
      span.title =
        chosen === null
          ? `${JSON.stringify(seq.tokens[i])} receives at most ${base[i].toFixed(3)}`
          : `${JSON.stringify(seq.tokens[chosen])} → ${JSON.stringify(seq.tokens[i])}: ${weights[i].toFixed(3)}`;
    });
    note.textContent =
      chosen === null
        ? "Shaded by the most each token receives from one query (the first row and token left out). Click a token to see what it reads."
        : `What ${JSON.stringify(seq.tokens[chosen])} (position ${chosen}) reads: its kept weights. Click it again for the overview.`;
  };
  line.addEventListener("click", (event) => {
    const span = event.target.closest(".hv-tok");
    if (span) choose(Number(span.dataset.i));
  });
  const note = el("p", { className: "help" });
  const label = `${top ? "Top interval" : `Interval ${seq.interval}`} · max activation ${seq.max_activation.toFixed(3)} · sequence ${seq.sequence_id}, ${seq.seq_len} tokens`;
  const link = linkFor(seq);
  const figure = el("figure", { className: "hv-sequence" }, [
    el("figcaption", {}, [label, ...(link ? [" · ", link] : [])]),
    line,
    note,
  ]);
  choose(null);
  return figure;
}

function tokenTable(table, caption, rows) {
  table.replaceChildren(
    el("caption", { text: caption }),
    el("thead", {}, [
      el(
        "tr",
        {},
        ["token", "kept weight"].map((t) => el("th", { text: t, attrs: { scope: "col" } })),
      ),
    ]),
    el(
      "tbody",
      {},
      rows
        .slice(0, 12)
        .map((r) =>
          el("tr", {}, [el("td", { className: "tok", text: shown(r.token) }), el("td", { text: r.weight.toFixed(2) })]),
        ),
    ),
  );
}

/**
 * Draw the HeadVis section of a head's page. linkFor(sequence) gives a link element opening the
 * sequence in the explorer, or null where none can be made (no live model); labels names each
 * metric (the page's data).
 */
export async function drawHeadVis(runId, layer, head, { linkFor, labels }) {
  const section = $("#hv");
  const data = await api.corpusHeadVis(runId, layer, head);
  section.hidden = false;
  $("#hv-metrics").replaceChildren(
    ...Object.entries(data.metrics).map(([name, v]) =>
      metricCard(labels[name] ?? name, v === null ? "—" : v.toFixed(3)),
    ),
    metricCard("mean max activation", data.mean_max_activation === null ? "—" : data.mean_max_activation.toFixed(3)),
  );
  if (data.histogram) {
    const { bin_edges: edges, bin_values: values } = data.histogram;
    await drawChart(
      $("#hv-activation"),
      [
        {
          type: "bar",
          x: values.map((_, i) => (edges[i] + edges[i + 1]) / 2),
          y: values,
          marker: { color: "#d97706" },
          hovertemplate: "max activation %{x:.2f}: %{y} sequences<extra></extra>",
        },
      ],
      {
        title: "Max activation over every sequence of the run",
        height: 280,
        bargap: 0.05,
        xaxis: { title: { text: "max activation" }, range: [0, 1] },
        yaxis: { title: { text: "sequences" } },
      },
    );
  }
  if (data.qk_distance_histogram) {
    const { bin_edges: edges, bin_values: values } = data.qk_distance_histogram;
    let last = values.length;
    while (last > 1 && values[last - 1] === 0) last -= 1; // trailing empty bins dropped
    await drawChart(
      $("#hv-distance"),
      [{ type: "bar", x: edges.slice(0, last).map(String), y: values.slice(0, last), marker: { color: "#b2182b" } }],
      {
        title: "Q–K distance of the kept weights of its samples",
        height: 280,
        xaxis: { type: "category", title: { text: "distance from (tokens)" } },
        yaxis: { title: { text: "attention mass" } },
      },
    );
  }
  tokenTable($("#hv-keys"), "Top key tokens: where its attention goes", data.top_key_tokens);
  tokenTable($("#hv-queries"), "Top query tokens (mostly how often each occurs)", data.top_query_tokens);
  const order = [...data.sequences].sort((a, b) => b.interval - a.interval || b.max_activation - a.max_activation);
  const highest = order.length ? order[0].interval : 0;
  $("#hv-sampling").textContent = order.length
    ? `${order.length} sequences kept: the run's sequences fall into ${data.n_intervals} intervals of max activation; the top one keeps its highest, each other a random few. Highest interval first.`
    : "No sequence was sampled (a run shorter than its warm-up samples nothing).";
  const box = $("#hv-sequences");
  box.replaceChildren(...order.map((seq) => drawSequence(seq, { top: seq.interval === highest, linkFor })));
  return data;
}
