// Deep zoom's search: where a word or phrase sits in a long text, as token positions. The
// tokens' labels are joined into one string (whitespace left out on both sides, so a phrase
// matches whether the tokenizer marks word starts with a space, as byte-level BPE does, or not,
// as WordPiece does); each match names the first and last token it touches. The map marks them
// and a click on one zooms to it.

const VISIBLE = { "␣": " ", "↵": "\n", "⇥": "\t", "␍": "\r" }; // atlas_engine/inference/tokens.py's marks
const MARK = { color: "#f97316", width: 1 };
export const MARKED = 200; // matches marked on the map at most (two shapes each)

/** A token's label as the text it stands for: whitespace marks back to whitespace, a
 * WordPiece continuation's "##" dropped. */
function labelText(label) {
  const text = label.startsWith("##") ? label.slice(2) : label;
  return text.replace(/[␣↵⇥␍]/g, (mark) => VISIBLE[mark]);
}

/**
 * Every place `query` occurs in the text the tokens spell, ignoring case and whitespace, in
 * order and not overlapping: [{first, last}] token positions (a match within one token has
 * first === last). An empty query (or only whitespace) finds nothing.
 */
export function findTokens(tokens, query) {
  const needle = String(query || "")
    .replace(/\s+/g, "")
    .toLowerCase();
  if (!needle) return [];
  const chars = [];
  const owner = []; // the token each character of `chars` came from
  tokens.forEach((label, position) => {
    for (const char of labelText(label).replace(/\s+/g, "").toLowerCase()) {
      chars.push(char);
      owner.push(position);
    }
  });
  const haystack = chars.join("");
  const needleChars = [...needle].length;
  const found = [];
  // Code units: `owner` is indexed by code points, so map a unit offset through the prefix.
  const unitToChar = [];
  chars.forEach((char, i) => {
    for (let k = 0; k < char.length; k++) unitToChar.push(i);
  });
  let from = 0;
  for (;;) {
    const at = haystack.indexOf(needle, from);
    if (at < 0) break;
    const start = unitToChar[at];
    found.push({ first: owner[start], last: owner[start + needleChars - 1] });
    from = at + needle.length;
  }
  return found;
}

/** Plotly shapes outlining each match's keys (a column band) and queries (a row band), for
 * the first MARKED matches: each band spans the map (its axes' domain, narrower than the chart
 * where square cells leave room beside it). */
export function matchShapes(matches) {
  return matches.slice(0, MARKED).flatMap(({ first, last }) => [
    { type: "rect", xref: "x", yref: "y domain", x0: first - 0.5, x1: last + 0.5, y0: 0, y1: 1, line: MARK },
    { type: "rect", xref: "x domain", yref: "y", x0: 0, x1: 1, y0: first - 0.5, y1: last + 0.5, line: MARK },
  ]);
}

/** The window [r0, r1, c0, c1] around a match: `size` tokens a side centred on its last token
 * (the one whose row reads what came before), inside the n × n map. */
export function aroundMatch({ last }, n, size = 64) {
  const start = Math.max(0, Math.min(n - size, last - Math.floor(size / 2)));
  const stop = Math.min(n, start + size);
  return [start, stop, start, stop];
}
