// Find heads: by a weight between two tokens, by role, ranked by a statistic, or ranked by
// their share of attention on a span of tokens (POST /heads' `marked`). The query lives in the
// state as one string (state.find), so a search is a link.

import { linearBar, viridis } from "../colors.js";
import { el as make } from "../dom.js";
import { headLabels } from "./heads.js";
import { drawHeatmap, onCellClick } from "./plot.js";
import { chosenToken, fillTokenPicker, spanPositions } from "./tokens.js";

const DEFAULT_FIND = "role:previous-token";

/** state.find -> a query of POST /api/attention/search (null if it is not one). */
export function parseFind(find, tokens, roles, statistics) {
  const [kind, ...rest] = String(find || "").split(":");
  if (kind === "role" && roles.includes(rest.join(":"))) return { kind, role: rest.join(":") };
  if (
    kind === "rank" &&
    statistics.includes(rest[0]) &&
    ["descending", "ascending"].includes(rest[1] ?? "descending")
  ) {
    return { kind, statistic: rest[0], order: rest[1] ?? "descending" };
  }
  if (kind === "marked" && rest.length === 3 && ["later", "last"].includes(rest[2])) {
    const [first, last] = rest.slice(0, 2).map((v) => (/^\d+$/.test(v) ? Number(v) : -1));
    if (first >= 0 && first <= last && last < tokens.length) return { kind, first, last, from: rest[2] };
  }
  if (kind === "pair" && rest.length === 3) {
    const [source, target] = rest.slice(0, 2).map((v) => (/^\d+$/.test(v) ? Number(v) : -1));
    const above = Number(rest[2]);
    if (
      source >= 0 &&
      source < tokens.length &&
      target >= 0 &&
      target < tokens.length &&
      rest[2] !== "" &&
      above >= 0 &&
      above <= 1
    ) {
      return { kind, source, target, above };
    }
  }
  return null;
}

/** A query as state.find writes it. */
export function encodeFind(query) {
  if (query.kind === "role") return `role:${query.role}`;
  if (query.kind === "rank") return `rank:${query.statistic}:${query.order}`;
  if (query.kind === "marked") return `marked:${query.first}:${query.last}:${query.from}`;
  return `pair:${query.source}:${query.target}:${query.above}`;
}

/** The form shows only the fields of the chosen kind of search. */
function showKind(parts) {
  for (const label of parts.form.querySelectorAll("[data-kind]"))
    label.hidden = label.dataset.kind !== parts.kind.value;
}

export function bind(parts, set) {
  parts.kind.addEventListener("change", () => showKind(parts));
  parts.form.addEventListener("submit", (event) => {
    event.preventDefault();
    const kind = parts.kind.value;
    const above = Math.min(1, Math.max(0, Number(parts.above.value) || 0));
    const [first, last] = [Number(parts.markedFirst.value), Number(parts.markedLast.value)].sort((a, b) => a - b);
    const query =
      kind === "role"
        ? { kind, role: parts.role.value }
        : kind === "rank"
          ? { kind, statistic: parts.statistic.value, order: parts.order.value }
          : kind === "marked"
            ? { kind, first, last, from: parts.readFrom.value }
            : { kind, source: Number(parts.source.value), target: Number(parts.target.value), above };
    set({ find: encodeFind(query) });
  });
}

/** The rows a marked search averages, in words: a decoder's rows read only earlier tokens. */
function readers(query, causal) {
  if (query.from === "last") return "the last token";
  return causal ? "every later token" : "every other token";
}

function describe(query, tokens, causal) {
  if (query.kind === "role") return `heads with the role “${query.role}”, strongest first`;
  if (query.kind === "marked") {
    const span = tokens.slice(query.first, query.last + 1).join(" ");
    const where = query.first === query.last ? `token ${query.first}` : `tokens ${query.first}–${query.last}`;
    return `every head ranked by its share of attention on ${where} “${span}”, read from ${readers(query, causal)}`;
  }
  if (query.kind === "rank")
    return `every head ranked by ${query.statistic.replace("_", " ")}, ${query.order === "descending" ? "highest" : "lowest"} first`;
  return `heads where token ${query.source} “${tokens[query.source]}” gives token ${query.target} “${tokens[query.target]}” more than ${query.above}`;
}

export async function render({ session, state, parts, info, open, isStale }) {
  const heads = await session.heads();
  if (isStale()) return null;
  const tokens = info.tokens;
  const roles = Object.keys(heads.rules);
  const statistics = Object.keys(heads.statistics);
  if (parts.role.options.length !== roles.length) parts.role.replaceChildren(...roles.map((r) => new Option(r, r)));
  if (parts.statistic.options.length !== statistics.length) {
    parts.statistic.replaceChildren(...statistics.map((s) => new Option(s.replace("_", " "), s)));
  }
  const query = parseFind(state.find, tokens, roles, statistics) ?? parseFind(DEFAULT_FIND, tokens, roles, statistics);
  // The form shows the query that ran.
  parts.kind.value = query.kind;
  fillTokenPicker(parts.source, tokens, query.source ?? chosenToken(state, tokens));
  fillTokenPicker(parts.target, tokens, query.target ?? 0);
  fillTokenPicker(parts.markedFirst, tokens, query.first ?? chosenToken(state, tokens));
  fillTokenPicker(parts.markedLast, tokens, query.last ?? chosenToken(state, tokens));
  if (query.kind === "marked") parts.readFrom.value = query.from;
  if (query.kind === "pair") parts.above.value = String(query.above);
  if (query.kind === "role") parts.role.value = query.role;
  if (query.kind === "rank") {
    parts.statistic.value = query.statistic;
    parts.order.value = query.order;
  }
  showKind(parts);

  const found =
    query.kind === "marked" ? await markedHeads(session, query, tokens.length) : await session.search(query);
  if (isStale()) return null;
  const labels = headLabels(info);
  const grid = labels.layers.map(() => labels.heads.map(() => null));
  for (const f of found.heads) grid[f.layer][f.head] = f.value;
  const values = found.heads.map((f) => f.value);
  const ranked = query.kind === "marked" || (query.kind === "rank" && query.statistic === "distance");
  const top = Math.max(1e-9, ...values, ranked ? 0 : 1); // a share's colours reach the largest one
  const what = describe(query, tokens, info.causal);
  parts.summary.textContent = `${found.matches} head${found.matches === 1 ? "" : "s"} found: ${what}.`;
  await drawHeatmap(parts.map, grid, labels.layers, labels.heads, {
    title: `${found.matches} found · blank: ${query.kind === "marked" ? "no row reads the span" : "not found"} · click a cell to open it`,
    zmin: 0,
    zmax: top,
    numbered: false,
    hoverName: valueName(query),
    height: Math.min(820, Math.max(300, 22 * info.num_layers + 150)),
  });
  onCellClick(parts.map, (layer, head) => open(layer, head));
  showResults(parts.results, found.heads, heads.roles, query, open);
  return {
    kind: "head",
    element: parts.map,
    where: `search-${encodeFind(query).replace(/[^a-z0-9]+/gi, "-")}`,
    tokens: labels.heads,
    rowTokens: labels.layers,
    matrix: grid,
    matrixName: "found",
    blank: "",
    corner: "layer \\ head",
    title: what,
    colour: (v) => viridis(v / top),
    colourBar: linearBar(top, valueName(query)),
    payload: { what, query, matches: found.matches, heads: found.heads },
  };
}

/** Every head's share of attention on the query's span, as a search's answer ({matches, heads}
 * strongest first); a head with no row to average (null) is left out. */
async function markedHeads(session, query, length) {
  const marked = spanPositions([query]);
  const answer = await session.heads(query.from === "last" ? { marked, read_from: [length - 1] } : { marked });
  const heads = answer.layers.flatMap((layer, i) =>
    answer.statistics.marked[i].map((value, head) => ({ layer, head, value })).filter((found) => found.value !== null),
  );
  heads.sort((a, b) => b.value - a.value || a.layer - b.layer || a.head - b.head);
  return { matches: heads.length, heads };
}

function valueName(query) {
  if (query.kind === "pair") return "weight";
  if (query.kind === "role") return "score";
  return query.kind === "marked" ? "share" : query.statistic.replace("_", " ");
}

function showResults(table, found, roles, query, open) {
  const header = make(
    "tr",
    {},
    ["head", valueName(query), "roles"].map((text) => make("th", { text, attrs: { scope: "col" } })),
  );
  const body = make("tbody");
  for (const f of found) {
    const opener = make("button", {
      text: `L${f.layer} H${f.head}`,
      className: "link",
      attrs: { type: "button", title: `open layer ${f.layer} head ${f.head}` },
    });
    opener.addEventListener("click", () => open(f.layer, f.head, { focusView: true }));
    const theirs = roles[f.layer][f.head].map((r) => `${r.role} ${r.score.toFixed(2)}`).join(", ") || "–";
    body.append(
      make("tr", {}, [
        make("th", { attrs: { scope: "row" } }, [opener]),
        make("td", { text: f.value.toFixed(query.kind === "rank" && query.statistic === "distance" ? 1 : 3) }),
        make("td", { text: theirs, className: "roles" }),
      ]),
    );
  }
  if (!found.length) body.append(make("tr", {}, [make("td", { text: "No head matches.", attrs: { colspan: "3" } })]));
  table.replaceChildren(make("thead", {}, [header]), body);
}
