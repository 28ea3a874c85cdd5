// The explorer's wait line under the tabs: shown when a view takes longer than BUSY_AFTER_MS,
// in a view's own words with a progress bar where the view knows how far it has come (the
// circuit from the weights), and back to its default words when the view is drawn.

const BUSY_AFTER_MS = 300; // a view that takes longer says so
const DEFAULT_TEXT = "Computing this view…";

/**
 * Follows one render: el {busy, busyText, busyProgress, views}; isStale() says a newer render
 * began. Returns {progress(text, fraction = null), done()}: progress shows the view's words
 * (and the share done, 0 to 1) at once; done hides the line unless a newer render owns it.
 */
export function busyLine(el, isStale) {
  const show = () => {
    el.busy.hidden = false;
    el.views.setAttribute("aria-busy", "true");
  };
  const timer = setTimeout(show, BUSY_AFTER_MS);
  return {
    progress(text, fraction = null) {
      if (isStale()) return;
      el.busyText.textContent = text;
      el.busyProgress.hidden = fraction === null;
      if (fraction !== null) el.busyProgress.value = fraction;
      show();
    },
    done() {
      clearTimeout(timer);
      if (isStale()) return;
      el.busy.hidden = true;
      el.busyText.textContent = DEFAULT_TEXT;
      el.busyProgress.hidden = true;
      el.views.removeAttribute("aria-busy");
    },
  };
}
