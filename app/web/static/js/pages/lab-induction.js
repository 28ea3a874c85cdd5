// Watch an induction head form: POST /api/lab/train streamed line by line, every snapshot kept
// for the scrubber, the knobs in the URL. One state object; render() draws it, at most once a frame.

import { api } from "../api.js";
import { headColour } from "../colors.js";
import { $, el, metricCard, readPageData, showError } from "../dom.js";
import { explorerLink, headThumbnails } from "../lab.js";
import { keepInputsInUrl } from "../urlstate.js";
import { drawChart, drawHeatmap, formatNumber, plotlyReady } from "../views/plot.js";

const DATA = readPageData();
const SNAPSHOTS_WANTED = 60; // a snapshot every steps / 60 steps: a smooth curve, a light stream
const REPLAY_PER_SECOND = 8; // Play's pace through the kept snapshots
const COLOURS = { first: "#0072B2", second: "#D55E00", chance: "#666", now: "#444", phase: "#009E73" };

const fields = {
  task: $("#train-task"),
  layers: $("#train-layers"),
  heads: $("#train-heads"),
  lr: $("#train-lr"),
  steps: $("#train-steps"),
  seed: $("#train-seed"),
  positions: $("#train-positions"),
};

const state = {
  run: null, // {started, snapshots, end}: the run shown (the one going, or the last)
  at: 0, // the snapshot shown, an index into run.snapshots
  follow: true, // while training, show each new snapshot as it arrives
  playing: null, // Play's interval timer
  chosen: null, // [layer, head] drawn large; null: the head that does the task best at the end
  controller: null, // the training request's, while one goes
};

/** The request's body from the knobs: every other field at the API's default. */
function knobs() {
  const steps = Number(fields.steps.value);
  return {
    task: fields.task.value,
    layers: Number(fields.layers.value),
    heads: Number(fields.heads.value),
    lr: Number(fields.lr.value),
    steps,
    seed: Number(fields.seed.value),
    positions: fields.positions.checked,
    every: Math.max(1, Math.round(steps / SNAPSHOTS_WANTED)),
  };
}

const isCopy = (run) => run.started.config.task === "induction";
const headName = (l, h) => `L${l} H${h}`;

/** [layer, head, value] of the largest value of `scores` (layers, heads) in layers from `from`. */
function best(scores, from = 0) {
  let top = [from, 0, Number.NEGATIVE_INFINITY];
  scores.forEach((row, l) => {
    if (l < from) return;
    row.forEach((v, h) => {
      if (v > top[2]) top = [l, h, v];
    });
  });
  return top;
}

/** The head that does the run's task: copy, a later layer's best induction head (any layer's with
 * one layer); reverse, the best reverse head. */
function taskHead(run, snapshot) {
  const layers = run.started.config.layers;
  return best(snapshot.task_score, isCopy(run) && layers > 1 ? 1 : 0);
}

/** The first snapshot where a later head's induction score passed the threshold, or null. */
function phaseChange(run) {
  return run.snapshots.find((s) => s.phase_changed) ?? null;
}

/** What to look for with these knobs, before and while training. */
function lookFor(k) {
  if (k.task === "reverse") {
    return k.positions
      ? "Look for: the second half's loss falling smoothly within a few hundred steps, and one head's map turning into an anti-diagonal. No cliff: a position is all it needs."
      : "Look for: nothing. Without positions no head knows where the mirror is: both losses stay at chance.";
  }
  if (k.layers === 1) {
    return "Look for: the second copy's loss falling to about ln 12 ≈ 2.5 nats and stopping. One layer can learn that the next token is one of those already seen, not which one: no induction head forms, however long it trains.";
  }
  if (!k.positions) {
    return "Look for: no clean previous-token head and no cliff. Without positions a head can only guess which token came just before it.";
  }
  if (k.lr >= 0.01) {
    return "Look for: both losses staying near chance. At this rate the steps overshoot: larger is not faster, and the induction head does not form.";
  }
  return `Look for: both losses flat near chance (ln ${DATA.defaults.vocab} ≈ ${Math.log(DATA.defaults.vocab).toFixed(2)} nats), then the second copy's falling off a cliff. At that step a head of layer 1 passes an induction score of ${DATA.phase_score} (the green line), and a layer-0 head becomes a previous-token head beside it.`;
}

// ---------------------------------------------------------------------------------------------
// Drawing

let drawing = false;
let again = false;
let frame = 0;

/** Draws the state on the next frame; calls while a draw is going are folded into one more. */
function schedule() {
  if (frame) return;
  frame = requestAnimationFrame(async () => {
    frame = 0;
    if (drawing) {
      again = true;
      return;
    }
    drawing = true;
    try {
      await render();
    } finally {
      drawing = false;
      if (again) {
        again = false;
        schedule();
      }
    }
  });
}

async function render() {
  const run = state.run;
  if (!run?.snapshots.length) {
    await drawEmpty();
    return;
  }
  const snapshot = run.snapshots[state.at];
  renderScrubber(run, snapshot);
  renderMetrics(run, snapshot);
  await drawLoss(run, snapshot);
  await drawScores(run, snapshot);
  renderThumbs(run, snapshot);
  await drawMap(run, snapshot);
}

function renderScrubber(run, snapshot) {
  const scrubber = $("#train-at");
  scrubber.max = String(run.snapshots.length - 1);
  scrubber.value = String(state.at);
  scrubber.disabled = run.snapshots.length < 2;
  scrubber.setAttribute("aria-valuetext", `step ${snapshot.step}`);
  $("#train-at-value").textContent = `step ${snapshot.step} of ${run.started.config.steps}`;
  $("#train-play").disabled = run.snapshots.length < 2;
  $("#train-play").textContent = state.playing ? "Pause" : "Play";
}

function renderMetrics(run, snapshot) {
  const copy = isCopy(run);
  const [l, h, score] = taskHead(run, snapshot);
  const [pl, ph, previous] = best(snapshot.previous_token.slice(0, 1));
  const phase = phaseChange(run);
  const nats = (x) => `${x.toFixed(2)} nats`;
  const cards = [
    metricCard("step", `${snapshot.step} (${snapshot.elapsed.toFixed(1)} s)`, "step"),
    metricCard(copy ? "loss, first copy" : "loss, first half", nats(snapshot.loss_first), "loss-first"),
    metricCard(copy ? "loss, second copy" : "loss, mirrored half", nats(snapshot.loss_second), "loss-second"),
    metricCard(
      copy ? "best induction head" : "best reverse head",
      `${headName(l, h)} · ${score.toFixed(2)}`,
      "task-head",
    ),
  ];
  if (copy) {
    cards.push(
      metricCard("best previous-token head, layer 0", `${headName(pl, ph)} · ${previous.toFixed(2)}`, "previous-head"),
    );
    const when = phase ? `step ${phase.step} (${phase.elapsed.toFixed(1)} s)` : run.end ? "none" : "not yet";
    cards.push(metricCard("phase change", when, "phase-change"));
  }
  $("#train-metrics").replaceChildren(...cards);
}

/** Vertical lines at the shown step and at the phase change, over a chart of steps. */
function stepLines(run, snapshot) {
  const phase = phaseChange(run);
  const line = (x, colour, dash) => ({
    type: "line",
    xref: "x",
    yref: "paper",
    x0: x,
    x1: x,
    y0: 0,
    y1: 1,
    line: { color: colour, width: 1.5, dash },
  });
  const shapes = [line(snapshot.step, COLOURS.now, "dot")];
  if (phase) shapes.push(line(phase.step, COLOURS.phase, "solid"));
  return shapes;
}

async function drawLoss(run, snapshot) {
  const steps = run.snapshots.map((s) => s.step);
  const copy = isCopy(run);
  const chance = Math.log(run.started.config.vocab);
  const top = Math.max(chance, ...run.snapshots.map((s) => Math.max(s.loss_first, s.loss_second)));
  const line = (key, name, colour) => ({
    type: "scatter",
    mode: "lines",
    name,
    x: steps,
    y: run.snapshots.map((s) => s[key]),
    line: { color: colour, width: 2 },
    hovertemplate: `${name}<br>step %{x}: %{y:.3f} nats<extra></extra>`,
  });
  await drawChart(
    $("#train-loss"),
    [
      line("loss_first", copy ? "first copy" : "first half", COLOURS.first),
      line("loss_second", copy ? "second copy" : "mirrored half", COLOURS.second),
      {
        type: "scatter",
        mode: "lines",
        name: `chance: ln ${run.started.config.vocab}`,
        x: [0, run.started.config.steps],
        y: [chance, chance],
        line: { color: COLOURS.chance, dash: "dash", width: 1 },
        hoverinfo: "skip",
      },
    ],
    {
      title: copy ? "Loss on the probe batch (the phase change: green)" : "Loss on the probe batch",
      xaxis: { title: { text: "step" }, range: [0, run.started.config.steps] },
      yaxis: { title: { text: "nats" }, range: [0, top * 1.08] },
      legend: { orientation: "h", y: -0.25 },
      shapes: stepLines(run, snapshot),
      height: 360,
    },
  );
}

async function drawScores(run, snapshot) {
  const steps = run.snapshots.map((s) => s.step);
  const { layers, heads } = run.started.config;
  const copy = isCopy(run);
  const traces = [];
  const series = (key, l, h, label, dash) => ({
    type: "scatter",
    mode: "lines",
    name: `${headName(l, h)} ${label}`,
    x: steps,
    y: run.snapshots.map((s) => s[key][l][h]),
    line: { color: headColour(h, heads), width: dash === "solid" ? 2 : 1.5, dash },
    hovertemplate: `${headName(l, h)} ${label}<br>step %{x}: %{y:.3f}<extra></extra>`,
  });
  for (let l = 0; l < layers; l++) {
    for (let h = 0; h < heads; h++) {
      if (!copy) traces.push(series("task_score", l, h, "reverse", l ? "dot" : "solid"));
      else if (l > 0 || layers === 1) traces.push(series("induction", l, h, "induction", l > 1 ? "dot" : "solid"));
      if (copy && l === 0) traces.push(series("previous_token", l, h, "previous-token", "dash"));
    }
  }
  const shapes = stepLines(run, snapshot);
  if (copy) {
    const threshold = DATA.phase_score;
    shapes.push({
      type: "line",
      xref: "paper",
      x0: 0,
      x1: 1,
      y0: threshold,
      y1: threshold,
      line: { color: COLOURS.phase, width: 1, dash: "dot" },
    });
  }
  const title = copy
    ? layers > 1
      ? "Induction score of later heads (solid), previous-token score of layer 0 (dashed)"
      : "Induction (solid) and previous-token (dashed) score of each head"
    : "Reverse score of each head: weight on the mirrored key";
  await drawChart($("#train-scores"), traces, {
    title,
    xaxis: { title: { text: "step" }, range: [0, run.started.config.steps] },
    yaxis: { title: { text: "score" }, range: [0, 1] },
    showlegend: traces.length <= 12,
    legend: { orientation: "h", y: -0.25 },
    shapes,
    height: 360,
  });
}

function chosenHead(run) {
  if (state.chosen) return state.chosen;
  const [l, h] = taskHead(run, run.snapshots.at(-1));
  return [l, h];
}

function renderThumbs(run, snapshot) {
  const [cl, ch] = chosenHead(run);
  const rows = snapshot.maps.map((maps, l) => {
    const row = el("div", { className: "head-thumbs" });
    headThumbnails(row, maps, {
      label: (h) => headName(l, h),
      chosen: l === cl ? ch : -1,
      onPick: (h) => {
        state.chosen = [l, h];
        schedule();
      },
    });
    return el("div", { className: "thumb-layer" }, [el("h3", { text: `Layer ${l}` }), row]);
  });
  $("#train-thumbs").replaceChildren(...rows);
}

async function drawMap(run, snapshot) {
  const [l, h] = chosenHead(run);
  const words = run.started.probe;
  const copy = isCopy(run);
  const what = copy
    ? `induction ${formatNumber(snapshot.induction[l][h], 3)}, previous-token ${formatNumber(snapshot.previous_token[l][h], 3)}`
    : `reverse ${formatNumber(snapshot.task_score[l][h], 3)}`;
  await drawHeatmap($("#train-map"), snapshot.maps[l][h], words, words, {
    title: `Layer ${l} head ${h} at step ${snapshot.step}: ${what}`,
    hoverName: "weight",
    zmin: 0,
    zmax: 1,
    yTitle: "query",
    xTitle: "key",
    height: Math.min(640, Math.max(360, 16 * words.length + 170)),
  });
}

function renderProbe(run) {
  $("#train-probe-maps").hidden = false;
  const words = run.started.probe;
  const half = words.length / 2;
  const [a, b] = isCopy(run) ? ["first copy", "second copy"] : ["first half", "mirrored"];
  const group = (label, part, offset) =>
    el("span", { className: "probe-part" }, [
      el("strong", { text: `${label}: ` }),
      ...part.map((w, i) => el("span", { className: "token", text: w, attrs: { title: `position ${offset + i}` } })),
    ]);
  $("#train-probe").replaceChildren(group(a, words.slice(0, half), 0), group(b, words.slice(half), half));
}

function renderLinks(run) {
  const section = $("#train-next");
  const model = run.end?.model;
  section.hidden = !model;
  if (!model) return;
  const last = run.snapshots.at(-1);
  const text = run.started.probe.join(" ");
  const half = run.started.probe.length / 2;
  const [l, h] = taskHead(run, last);
  const query = isCopy(run) ? half + Math.floor(half / 2) : half + 1;
  const at = (view, extra = {}) => {
    const url = new URL(explorerLink(model, text, l, h), window.location.origin);
    url.searchParams.set("view", view);
    for (const [k, v] of Object.entries(extra)) url.searchParams.set(k, v);
    return url.pathname + url.search;
  };
  const word = `${isCopy(run) ? "the second " : ""}‘${run.started.probe[query]}’`;
  const items = [
    [`Trace why ${headName(l, h)} attends where it does, from ${word} (position ${query})`, at("trace", { q: query })],
    ["The circuit on the probe: which heads feed which", at("circuit", { cin: isCopy(run) ? "k" : "all" })],
  ];
  if (isCopy(run) && run.started.config.layers > 1) {
    const [, ph] = best(last.previous_token.slice(0, 1));
    items.push([
      `Ablate the previous-token head ${headName(0, ph)} and watch ${headName(l, h)}`,
      at("ablation", { off: `0.${ph}` }),
    ]);
    items.push(["Every head's role on the probe", at("heads", { stat: "induction", sort: "-induction" })]);
  }
  items.push(["Every head's map", at("grid")]);
  $("#train-links").replaceChildren(
    ...items.map(([label, href]) => el("li", {}, [el("a", { text: label, attrs: { href } })])),
  );
}

async function drawEmpty() {
  const empty = (name) => ({ type: "scatter", mode: "lines", name, x: [], y: [] });
  const axes = { xaxis: { title: { text: "step" } }, height: 360 };
  await drawChart($("#train-loss"), [empty("first copy"), empty("second copy")], {
    ...axes,
    title: "Loss on the probe batch: press Train",
    yaxis: { title: { text: "nats" } },
  });
  await drawChart($("#train-scores"), [empty("induction")], {
    ...axes,
    title: "Each head's induction and previous-token score",
    yaxis: { title: { text: "score" }, range: [0, 1] },
  });
}

// ---------------------------------------------------------------------------------------------
// Training and replay

function setStatus(text) {
  $("#train-status").textContent = text;
}

function training(on) {
  $("#train-start").disabled = on;
  $("#train-stop").disabled = !on;
}

function onLine(line) {
  const run = state.run;
  if (line.event === "started") {
    run.started = line;
    renderProbe(run);
    setStatus(
      `Training ${line.parameters.toLocaleString("en")} parameters, estimated at ${Math.ceil(line.seconds)} s on this server.`,
    );
    return;
  }
  if (line.event === "snapshot") {
    run.snapshots.push(line);
    if (state.follow && !state.playing) state.at = run.snapshots.length - 1;
    if (!run.end)
      setStatus(`Training: step ${line.step} of ${run.started.config.steps}, ${line.elapsed.toFixed(1)} s.`);
    schedule();
    return;
  }
  run.end = line;
  const done = run.snapshots.at(-1);
  const took = done ? ` in ${done.elapsed.toFixed(1)} s` : "";
  const said = {
    done: `Done: ${line.steps_done} steps${took}. Saved as ${line.model}.`,
    client_gone: `Stopped at step ${line.steps_done}.`,
    stopped: `The server is shutting down: stopped at step ${line.steps_done}.`,
    error: `Training failed: ${line.detail ?? "see the server's log"}.`,
  }[line.reason];
  setStatus(said);
  if (line.reason === "error") showError($("#train-error"), said);
  renderLinks(run);
  schedule();
}

async function start() {
  stopReplay();
  state.controller?.abort();
  const controller = new AbortController();
  state.controller = controller;
  state.run = { started: null, snapshots: [], end: null };
  state.at = 0;
  state.follow = true;
  state.chosen = null;
  $("#train-next").hidden = true;
  $("#train-probe-maps").hidden = true;
  showError($("#train-error"), "");
  training(true);
  setStatus("Starting…");
  try {
    await plotlyReady();
    await api.train(knobs(), onLine, { signal: controller.signal });
  } catch (err) {
    if (err.name === "AbortError") {
      const steps = state.run.snapshots.at(-1)?.step ?? 0;
      if (state.controller === controller) setStatus(`Stopped at step ${steps}.`);
    } else {
      showError($("#train-error"), err.message);
      setStatus("Not trained.");
    }
  } finally {
    if (state.controller === controller) {
      state.controller = null;
      training(false);
    }
  }
}

function stopReplay() {
  clearInterval(state.playing);
  state.playing = null;
  $("#train-play").textContent = "Play";
}

function togglePlay() {
  const run = state.run;
  if (!run || run.snapshots.length < 2) return;
  if (state.playing) {
    stopReplay();
    schedule();
    return;
  }
  if (state.at >= run.snapshots.length - 1) state.at = 0;
  state.follow = false;
  state.playing = setInterval(() => {
    if (state.at >= state.run.snapshots.length - 1) {
      stopReplay();
      state.follow = true;
    } else state.at += 1;
    schedule();
  }, 1000 / REPLAY_PER_SECOND);
  schedule();
  $("#train-play").textContent = "Pause";
}

function describeKnobs() {
  $("#train-look").textContent = lookFor(knobs());
}

keepInputsInUrl(fields);
describeKnobs();
$("#train-form").addEventListener("change", describeKnobs);
$("#train-form").addEventListener("submit", (event) => {
  event.preventDefault();
  start();
});
$("#train-stop").addEventListener("click", () => state.controller?.abort());
$("#train-play").addEventListener("click", togglePlay);
$("#train-at").addEventListener("input", (event) => {
  stopReplay();
  state.at = Number(event.target.value);
  state.follow = state.at === (state.run?.snapshots.length ?? 1) - 1;
  schedule();
});
// A closed or left page stops the run: the server ends it at its next snapshot.
window.addEventListener("pagehide", () => state.controller?.abort());
training(false); // Train works from here on (disabled in the page until this module runs)
plotlyReady().then(schedule);
