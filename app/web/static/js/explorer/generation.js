// The explorer's generation: a causal model continues the typed text, streamed into the text
// box token by token, and the whole text is then explored with its new tokens marked.

import { api } from "../api.js";
import { showError } from "../dom.js";

/**
 * Wires the Continue button. `el` holds the page's controls, `notice(text)` and
 * `setStatus(text, fraction)` say what happened, `waitUntilLoaded(model)` loads the model.
 */
export function wireGeneration({ state, el, notice, setStatus, waitUntilLoaded }) {
  let generation = null; // the running continuation's AbortController: the button stops it

  function showSampling() {
    for (const label of el.generate.querySelectorAll("[data-sample]")) label.hidden = el.genStrategy.value !== "sample";
  }

  /** Streams a continuation of the typed text into the text box, then explores the whole text. */
  async function generate() {
    if (generation) {
      generation.abort();
      return;
    }
    const model = el.model.value;
    const prompt = el.text.value;
    if (!prompt.trim()) {
      showError(el.error, "Type the beginning of a text first.");
      return;
    }
    const count = Number(el.genCount.value);
    const body = { model, text: prompt, max_new_tokens: count, strategy: el.genStrategy.value };
    if (body.strategy === "sample")
      Object.assign(body, { temperature: Number(el.genTemperature.value), seed: Number(el.genSeed.value) });
    generation = new AbortController();
    let last = null; // the latest token line: what a Stop keeps
    // Every view opens the whole text, its tokens from promptTokens on marked as generated.
    const explore = (text, promptTokens) =>
      state.set({ model, text, textPair: "", generated: promptTokens, query: null });
    el.genRun.textContent = "Stop";
    el.run.disabled = true;
    showError(el.error, "");
    notice("");
    try {
      await waitUntilLoaded(model);
      el.progress.setAttribute("aria-label", "Generation progress");
      setStatus(`Generating ${count} tokens…`, 0);
      const done = await api.generate(
        body,
        (line) => {
          if (line.event !== "token") return;
          last = line;
          el.text.value = prompt + line.continuation;
          setStatus(
            `Generating: ${line.index + 1} of ${count} · “${line.token}” at ${(100 * line.probability).toFixed(1)}%`,
            (line.index + 1) / count,
          );
        },
        { signal: generation.signal },
      );
      const why = { end_of_text: "the model ended the text", characters: "the text reached the length limit" }[
        done.stopped
      ];
      notice(
        [
          why ? `Stopped after ${done.generated} tokens: ${why}.` : "",
          done.exact
            ? ""
            : "The continuation tokenises a little differently as text than as it was generated; the views show the text as it tokenises.",
        ]
          .filter(Boolean)
          .join(" "),
      );
      explore(done.text, done.prompt_tokens);
    } catch (err) {
      if (err.name === "AbortError" && last) {
        // Stopped by the user: keep what was generated and explore it, new tokens marked.
        notice(`Stopped after ${last.index + 1} of ${count} tokens; they are kept.`);
        explore(prompt + last.continuation, last.prompt_tokens);
      } else {
        el.text.value = prompt;
        if (err.name === "AbortError") setStatus("Generation stopped before its first token; the text is as it was.");
        else {
          setStatus("");
          showError(el.error, err.message);
        }
      }
    } finally {
      generation = null;
      el.genRun.textContent = "Continue";
      el.run.disabled = false;
      el.progress.setAttribute("aria-label", "Model loading progress");
    }
  }

  el.genStrategy.addEventListener("change", showSampling);
  el.genRun.addEventListener("click", generate);
  showSampling();
}
