// The chosen token (state.query), shared by the views that look at one token.

/** The state's token, or the middle one when none is chosen, within the text. */
export function chosenToken(state, tokens) {
  const middle = Math.floor(tokens.length / 2);
  return Math.min(state.query ?? middle, tokens.length - 1);
}

/** Every token position that spans [{first, last}] cover, in order, each once. */
export function spanPositions(spans) {
  const positions = new Set();
  for (const { first, last } of spans) for (let i = first; i <= last; i++) positions.add(i);
  return [...positions].sort((a, b) => a - b);
}

/** Fills a <select> with "i: token" options (once per text) and selects `chosen`. */
export function fillTokenPicker(select, tokens, chosen) {
  const key = tokens.join("\u0000");
  if (select._tokens !== key) {
    select.replaceChildren(...tokens.map((t, i) => new Option(`${i}: ${t}`, String(i))));
    select._tokens = key;
  }
  select.value = String(chosen);
}
