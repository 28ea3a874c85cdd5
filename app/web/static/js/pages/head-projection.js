// The head page's projection (POST /api/corpus/{run}/heads/{layer}/{head}/projection): the
// head's queries and keys (or values, or outputs) over a sample of the corpus's tokens, in 2-D,
// coloured by query or key, token, position or a per-token statistic. A click opens the point's
// text in the explorer at that token. Its settings live in the page's one state object (the
// keys of PROJECTION_STATE), so a link reopens the same picture.

import { api } from "../api.js";
import { viridis } from "../colors.js";
import { $, el, metricCard, showError } from "../dom.js";
import { csvTable, download, slug } from "../export.js";
import { figureHeading, framedSvg, svgToPng } from "../export-svg.js";
import { drawPointCloud } from "../views/point-cloud.js";

/** The panel's keys in the page's state, with their defaults (all text fields). `project` is
 * "1" once the user asked for a projection: a link with it draws one at once. */
export const PROJECTION_STATE = {
  plane: "qk",
  pcolour: "kind",
  ptokens: "1024",
  pmethod: "pca",
  pseed: "0",
  project: "",
};

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const OTHER = "#c4c4c4";
const KIND = { query: "#2166ac", key: "#b2182b" };
// A per-point statistic: [the colour bar's label, the value of point i (null: none, drawn grey)].
const STATISTIC = {
  position: ["position in its text", (a, i) => a.position[i]],
  received: ["attention received (log₁₀)", (a, i) => Math.log10(Math.max(a.received[i], 1e-4))], // the first token takes most
  entropy: ["entropy of its row (nats)", (a, i) => a.entropy[i]],
  activation: ["HeadVis activation of its row", (a, i) => a.activation[i]],
  textmax: ["its text's HeadVis max_activation", (a, i) => a.texts[a.text[i]].max_activation],
};
const PLANES = { qk: ["query_key", "queries and keys"], v: ["value_plane", "values"], o: ["output_plane", "outputs"] };

/** A token as a reader sees it: a newline or tab as a mark. */
const shown = (token) => token.replaceAll("\n", "↵").replaceAll("\t", "⇥") || "∅";

/** The most frequent ordinary tokens (PALETTE's length), most frequent first. */
function frequentTokens(answer) {
  const counts = new Map();
  answer.token.forEach((t, i) => {
    if (!answer.special[i]) counts.set(t, (counts.get(t) ?? 0) + 1);
  });
  return [...counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, PALETTE.length);
}

/** (each point's colour for `kind` ("query", "key" or the plane's one kind), the colour bar or null). */
function colouring(answer, by, kind) {
  if (by === "kind") return [KIND[kind] ?? KIND.query, null];
  if (by === "token") {
    const index = new Map(frequentTokens(answer).map(([t], i) => [t, i]));
    return [answer.token.map((t, i) => (answer.special[i] || !index.has(t) ? OTHER : PALETTE[index.get(t)])), null];
  }
  const [label, read] = STATISTIC[by];
  const values = answer.token.map((_, i) => read(answer, i));
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (v === null) continue;
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  if (min > max) return [OTHER, null]; // no point has the number (a run described before it was kept)
  const span = max - min || 1;
  return [values.map((v) => (v === null ? OTHER : viridis((v - min) / span))), { label, min, max, colourAt: viridis }];
}

const fixed = (v, digits) => (v === null || v === undefined ? "–" : v.toFixed(digits));

/** A point's hover lines (text, never HTML). */
function hoverLines(answer, kind, i) {
  const text = answer.texts[answer.text[i]];
  return [
    `${kind} of “${shown(answer.token[i])}”`,
    `text ${text.idx}, position ${answer.position[i]}`,
    `receives ${answer.received[i].toFixed(3)} · entropy ${answer.entropy[i].toFixed(2)}`,
    `HeadVis activation ${fixed(answer.activation[i], 3)} · its text's ${fixed(text.max_activation, 3)}`,
  ];
}

const percent = (x) => `${(100 * x).toFixed(1)} %`;

/** One row a drawn point: which kind, its token and text, where it is drawn and its numbers. */
function pointRows(answer, kinds, pointsOf) {
  const rows = [
    ["kind", "token", "text", "position", "x", "y", "received", "entropy", "activation", "text_max_activation"],
  ];
  for (const kind of kinds)
    pointsOf[kind].forEach(([x, y], i) => {
      const text = answer.texts[answer.text[i]];
      rows.push([
        kind,
        answer.token[i],
        text.idx,
        answer.position[i],
        x,
        y,
        answer.received[i],
        answer.entropy[i],
        answer.activation[i],
        text.max_activation,
      ]);
    });
  return rows;
}

/**
 * Shows the panel for a run the job described and binds it to the page's state.
 * page: {state, runId, layer, head, explorerLink(text, query), newTab}.
 */
export function mountProjection(page) {
  const { state, runId, layer, head } = page;
  const section = $("#pj");
  if (section.dataset.run === String(runId)) return; // bound already (the page redraws as texts are done)
  section.dataset.run = String(runId);
  section.hidden = false;
  const value = (name) => state.get()[name];
  const inputs = {
    plane: $("#pj-plane"),
    pcolour: $("#pj-colour"),
    ptokens: $("#pj-tokens"),
    pmethod: $("#pj-method"),
  };
  for (const [name, input] of Object.entries(inputs)) input.value = value(name);
  let answer = null;
  let asked = null; // the request `answer` answers
  let drawn = null; // what the plot shows now: {kinds, pointsOf, caption, keys}
  const status = $("#pj-status");

  const draw = async () => {
    if (!answer) return;
    const [field, title] = PLANES[value("plane")];
    const by = value("pcolour");
    const planeKind = { qk: null, v: "value", o: "output" }[value("plane")];
    const kinds = planeKind ? [planeKind] : ["query", "key"];
    const pointsOf = { query: answer.queries, key: answer.keys, value: answer.values, output: answer.outputs };
    let bar = null;
    const series = kinds.map((kind) => {
      const [colours, scale] = colouring(answer, by, kind);
      bar = scale;
      return { name: kind, points: pointsOf[kind], colours, symbol: kind === "key" ? "triangle" : "circle" };
    });
    const explained = answer[field].explained;
    const axis = (i) => (explained ? `axis ${i + 1} (${percent(explained[i])} of the variance)` : `UMAP ${i + 1}`);
    $("#pj-metrics").replaceChildren(
      metricCard("tokens", answer.token.length.toLocaleString("en")),
      metricCard("texts", String(answer.texts.length)),
      metricCard("key/value head", String(answer.kv_head)),
      ...(explained ? [metricCard("variance on the plane", percent(explained[0] + explained[1]))] : []),
    );
    const legend = $("#pj-legend");
    legend.hidden = by !== "token";
    legend.replaceChildren(
      ...frequentTokens(answer).map(([t, n], i) => {
        const chip = el("li", { className: "chip", text: `${shown(t)} ×${n}` });
        chip.style.borderLeft = `12px solid ${PALETTE[i]}`;
        return chip;
      }),
    );
    const plot = $("#pj-plot");
    const open = (kindIndex, i) => {
      const text = answer.texts[answer.text[i]];
      const link = el("a", {
        text: "Open it in the explorer at this token",
        attrs: { href: page.explorerLink(text.text, answer.position[i]) },
      });
      if (page.newTab) link.target = "_blank";
      $("#pj-picked").replaceChildren(
        `The ${kinds[kindIndex]} of “${shown(answer.token[i])}”, position ${answer.position[i]} of text ${text.idx}. `,
        link,
      );
      if (!page.newTab) window.location.assign(link.href);
    };
    const what = `${title} of ${answer.token.length} tokens`;
    drawPointCloud(plot, series, {
      label: `Layer ${layer} head ${head}: ${what}, ${answer.method.toUpperCase()}${planeKind ? "" : " (● queries, ▲ keys)"}`,
      xTitle: axis(0),
      yTitle: axis(1),
      bar,
      hover: (k, i) => hoverLines(answer, kinds[k], i),
      click: open,
    });
    const caption = `${what}, ${answer.method.toUpperCase()}`;
    $("#pj-caption").textContent =
      `Layer ${layer} head ${head}: ${caption}${planeKind ? "" : ". ● queries (blue), ▲ keys (red) when coloured by kind"}.`;
    const keys =
      by === "token"
        ? frequentTokens(answer).map(([t], i) => ({ text: shown(t), colour: PALETTE[i] }))
        : by === "kind" && !planeKind
          ? [
              { text: "● queries", colour: KIND.query },
              { text: "▲ keys", colour: KIND.key },
            ]
          : [];
    const colouredBy = $("#pj-colour").selectedOptions[0]?.textContent ?? by;
    const subtitle = `${caption[0].toUpperCase()}${caption.slice(1)}, coloured by ${colouredBy}`;
    drawn = { kinds, pointsOf, subtitle, keys };
    $("#pj-export").hidden = false;
  };

  /** The picture as the export buttons save it: the plot's own drawing under the heading. */
  const picture = async (format) => {
    const cloud = $("#pj-plot").picture();
    const heading = figureHeading({ layer, head, subtitle: drawn.subtitle }, { model: answer.model });
    const framed = framedSvg(cloud.svg, cloud, heading, { keys: drawn.keys });
    if (format === "svg") return new Blob([framed.svg], { type: "image/svg+xml" });
    return svgToPng(framed.svg, framed.width, framed.height);
  };

  const exportAs = async (format) => {
    if (!answer || !drawn) return;
    const base = `${slug(answer.model)}-L${layer}-H${head}-projection-${value("plane")}`;
    if (format === "json") {
      const shownAs = { plane: value("plane"), colour: value("pcolour") };
      const body = JSON.stringify({ ...answer, shown: shownAs }, null, 1);
      return download(`${base}.json`, new Blob([body], { type: "application/json" }));
    }
    if (format === "csv") {
      const body = csvTable(pointRows(answer, drawn.kinds, drawn.pointsOf));
      return download(`${base}.csv`, new Blob([body], { type: "text/csv" }));
    }
    return download(`${base}.${format}`, await picture(format));
  };
  for (const button of $("#pj-export").querySelectorAll("button[data-export]"))
    button.addEventListener("click", () =>
      exportAs(button.dataset.export).catch((err) => showError($("#head-error"), err.message)),
    );

  const project = async () => {
    const body = {
      tokens: Number(value("ptokens")) || 1024,
      method: value("pmethod"),
      seed: Number(value("pseed")) || 0,
    };
    const key = JSON.stringify(body);
    if (asked === key) return draw();
    status.textContent = `Running the model over ${body.tokens} tokens of the corpus and projecting…`;
    showError($("#head-error"), "");
    try {
      answer = await api.corpusProjection(runId, layer, head, body);
      asked = key;
      status.textContent = `${answer.token.length} tokens of ${answer.texts.length} texts, in ${answer.seconds.toFixed(1)} s.`;
    } catch (err) {
      status.textContent = "";
      showError($("#head-error"), err.message);
      return;
    }
    await draw();
  };

  $("#pj-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.set({ ptokens: inputs.ptokens.value, pmethod: inputs.pmethod.value, project: "1" });
    project();
  });
  for (const name of ["plane", "pcolour"]) {
    inputs[name].addEventListener("change", () => {
      state.set({ [name]: inputs[name].value });
      draw();
    });
  }
  api.models().then((list) => {
    const methods = list.projections ?? ["pca"];
    inputs.pmethod.replaceChildren(...methods.map((m) => new Option(m.toUpperCase(), m)));
    inputs.pmethod.value = methods.includes(value("pmethod")) ? value("pmethod") : "pca";
  });
  let width = $("#pj-plot").clientWidth;
  new ResizeObserver(() => {
    const now = $("#pj-plot").clientWidth;
    if (now !== width) {
      width = now;
      draw();
    }
  }).observe($("#pj-plot"));
  if (value("project") === "1") project();
}
