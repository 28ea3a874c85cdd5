// Where a model's corpus run stands, for the pages that read it (a head's page, the scatter):
// the run to show, and while the server's background job is still describing the model, a line
// saying how far it is and how long is left. The page is handed the run again as more texts are
// done, so it shows the heads described so far and fills in as the job goes on.

import { api } from "./api.js";

const POLL_MS = 5000;
const REDRAW_SHARE = 0.1; // the page is redrawn when the texts done grow by this share

/** '40 s', '3 min', '1 h 5 min' (as the server's log says it). */
export function duration(seconds) {
  if (seconds < 60) return `${Math.max(1, Math.round(seconds))} s`;
  const minutes = Math.round(seconds / 60);
  return minutes < 60 ? `${minutes} min` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** The run a page shows: the one the URL names, else the model's with the most texts done,
 * runs described here before runs imported from a HeadVis tree. */
function chooseRun(runs, model, asked) {
  const imported = (r) => (r.source === "headvis" ? 1 : 0);
  const mine = runs
    .filter((r) => r.model === model && r.done > 0)
    .sort((a, b) => imported(a) - imported(b) || b.done - a.done);
  return mine.find((r) => r.id === asked) ?? mine[0] ?? null;
}

/** A sentence on the background job's row for this model, or "" once there is nothing to say. */
export function jobSentence(job, run, background = []) {
  if (!job || job.state === "done") return "";
  const name = job.model.split("/").pop();
  switch (job.state) {
    case "running": {
      const left = job.seconds_left === null ? "" : `, about ${duration(job.seconds_left)} left`;
      const shown = run
        ? ` Shown: the ${run.done.toLocaleString("en")} texts described so far; the page fills in as more are done.`
        : "";
      return `The server is describing every head of ${name} over the corpus, behind your requests: ${job.done.toLocaleString("en")} of ${job.planned.toLocaleString("en")} texts${left}.${shown}`;
    }
    case "waiting":
      return `The corpus job is waiting for its corpus: ${job.detail}. It starts by itself once the corpus is there.`;
    case "queued": {
      const before = background.find((row) => !["queued", "done", "failed", "stopped"].includes(row.state));
      const after = before
        ? ` after ${before.model.split("/").pop()}'s${before.planned ? ` (${before.done} of ${before.planned} texts done)` : ""}`
        : "";
      return `The server describes ${name}'s heads over the corpus next${after ? `,${after}` : ""}.`;
    }
    case "loading":
    case "planning":
      return `The server is about to describe ${name}'s heads over the corpus (${job.detail}).`;
    case "failed":
      return `The corpus job failed on ${name}: ${job.detail}`;
    case "stopped":
      return `The corpus job stopped with ${job.done} of ${job.planned} texts of ${name} done; the server's next start goes on.`;
    default:
      return "";
  }
}

/**
 * Follow a model's corpus run. `status` (an element) gets the job's sentence while it runs;
 * `onRun(run)` is called with the run to show once it has a text done, then again each time the
 * texts done have grown by REDRAW_SHARE or the job has finished. `missing()` is called while
 * there is neither a run nor a job to wait for, `onError(err)` if a later poll fails. Returns a
 * promise of the first run (or null).
 */
export function followCorpus(model, asked, status, { onRun, missing, onError }) {
  let shown = null;
  let first = true;
  return new Promise((resolve, reject) => {
    const poll = async () => {
      const { runs, background, problem } = await api.corpusRuns();
      const run = chooseRun(runs, model, asked);
      const job = background.find((row) => row.model === model) ?? null;
      const active = job && !["done", "failed", "stopped"].includes(job.state);
      // A store that could not be read was moved aside: say so, and where it went.
      status.textContent = [
        problem ? `${problem.charAt(0).toUpperCase()}${problem.slice(1)}.` : "",
        jobSentence(job, run, background),
      ]
        .filter(Boolean)
        .join(" ");
      status.hidden = !status.textContent;
      const grown =
        run && (!shown || run.done >= shown.done * (1 + REDRAW_SHARE) || (!active && run.done !== shown.done));
      if (grown && (!shown || run.id === shown.id)) {
        shown = run;
        await onRun(run);
      }
      if (!run && !active) missing();
      if (first) {
        first = false;
        resolve(run);
      }
      if (active) setTimeout(() => poll().catch(onError), POLL_MS);
    };
    poll().catch(reject);
  });
}
