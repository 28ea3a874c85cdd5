// Terms the pages use, glossed where they appear: the first mention of each term in a block of
// text becomes a link to its entry on /glossary, with its one-line gloss on hover and on focus.
// The terms (app/web/glossary.py) reach every page in base.html's #glossary-data.

const TERMS = JSON.parse(document.getElementById("glossary-data")?.textContent || "{}");
// Text in these is left alone: controls, links, code, charts, and tables of numbers.
const SKIP =
  "a, button, label, select, option, textarea, input, script, style, svg, table, code, pre, .term, .tokens, [data-no-gloss]";
const WORD = "\\p{L}\\p{N}_";
const ENTRIES = Object.entries(TERMS);
const FIND = ENTRIES.length
  ? new RegExp(ENTRIES.map(([, [, , pattern]]) => `(?<![${WORD}])(${pattern})(?![${WORD}])`).join("|"), "gu")
  : null;

let tip = null; // the one tooltip element, placed beside the term shown

function showTip(term) {
  if (!tip) {
    tip = document.createElement("div");
    tip.className = "gloss-tip";
    tip.setAttribute("role", "tooltip");
    tip.id = "gloss-tip";
    document.body.append(tip);
  }
  tip.textContent = term.dataset.gloss;
  tip.hidden = false;
  const box = term.getBoundingClientRect();
  const width = Math.min(320, window.innerWidth - 16);
  tip.style.maxWidth = `${width}px`;
  const left = Math.max(
    8,
    Math.min(box.left + window.scrollX, window.scrollX + window.innerWidth - 8 - tip.offsetWidth),
  );
  tip.style.left = `${left}px`;
  tip.style.top = `${box.bottom + window.scrollY + 4}px`;
}

function hideTip() {
  if (tip) tip.hidden = true;
}

export const hasTerm = (id) => id in TERMS;

/** One term's element: a link to its glossary entry that shows the gloss on hover and focus. */
export function termElement(id, text = TERMS[id]?.[0] ?? id) {
  const [, gloss] = TERMS[id] || ["", ""];
  const link = document.createElement("a");
  link.className = "term";
  link.href = `/glossary#${id}`;
  link.textContent = text;
  link.dataset.gloss = gloss;
  link.setAttribute("aria-description", gloss);
  return link;
}

function termOf(match) {
  // The alternation's groups are in ENTRIES' order: the first that matched names the term.
  const index = match.slice(1).findIndex((group) => group !== undefined);
  return ENTRIES[index][0];
}

/** Glosses the first mention of each term in root's text (each call's root its own scope). */
export function glossify(root) {
  if (!FIND || !root) return;
  const seen = new Set([...root.querySelectorAll(".term")].map((node) => node.href.split("#")[1]));
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) =>
      node.parentElement?.closest(SKIP) || !node.data.trim() ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT,
  });
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  for (let node of nodes) {
    FIND.lastIndex = 0;
    let match;
    while ((match = FIND.exec(node.data))) {
      const id = termOf(match);
      if (seen.has(id)) continue; // a later mention: the search goes on after it
      seen.add(id);
      const word = node.splitText(match.index);
      node = word.splitText(match[0].length);
      word.replaceWith(termElement(id, match[0]));
      FIND.lastIndex = 0;
    }
  }
}

document.addEventListener("mouseover", (event) => {
  const term = event.target.closest?.(".term");
  if (term) showTip(term);
});
document.addEventListener("mouseout", (event) => {
  if (event.target.closest?.(".term")) hideTip();
});
document.addEventListener("focusin", (event) => (event.target.matches?.(".term") ? showTip(event.target) : hideTip()));
document.addEventListener("focusout", hideTip);
document.addEventListener("keydown", (event) => event.key === "Escape" && hideTip());

glossify(document.querySelector("main")); // what the page says before any script adds to it
