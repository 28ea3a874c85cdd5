// Sliders fire an event per pixel moved: act once they come to rest.

const SETTLE_MS = 120;
let timer = null;

/** Runs fn SETTLE_MS after the last call (one pending action page-wide: one slider moves at a time). */
export function settle(fn) {
  clearTimeout(timer);
  timer = setTimeout(fn, SETTLE_MS);
}
