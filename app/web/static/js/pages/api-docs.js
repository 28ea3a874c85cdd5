// Starts Swagger UI on /docs. A static file rather than an inline script, so the page keeps the
// app's Content-Security-Policy (script-src 'self'); Swagger UI itself is served from this server.
//
// Swagger UI resolves a part of an OpenAPI 3.1 document (an operation opened, the schemas) by
// normalising and resolving the whole document first: 260-300 ms of one task here for every
// operation opened, and once on load for components.securitySchemes, which ours does not have.
// resolveOnlyWhatIsShown hands its resolver the part asked for and the components it refers to,
// already normal (FastAPI writes no path-level parameters, security or servers for the
// normaliser to move, and no parameter or header examples for it to rewrite): 7-25 ms an
// operation. tests/e2e/test_api_docs.py checks every operation's resolution against Swagger UI's
// own.

import { nextTask } from "../views/plot.js";

const root = document.getElementById("swagger-ui");
const LONG_DESCRIPTION = 600; // characters: longer operation descriptions fold after their lead

/** The document cut to the part at `path` and the components it refers to, transitively. */
export function partWithReferences(doc, path) {
  const kept = {};
  const visit = (node) => {
    if (node === null || typeof node !== "object") return;
    for (const [key, value] of Object.entries(node)) {
      if (key === "$ref" && typeof value === "string" && value.startsWith("#/components/")) {
        const [, , group, name] = value.split("/");
        kept[group] ??= {};
        if (!(name in kept[group]) && doc.components?.[group]?.[name] !== undefined) {
          kept[group][name] = doc.components[group][name];
          visit(kept[group][name]);
        }
      } else {
        visit(value); // arrays too: Object.entries gives their items
      }
    }
  };
  visit(path.reduce((node, key) => node?.[key], doc));
  const part = { ...doc, paths: {}, components: kept, $$normalized: true };
  if (path[0] === "paths") part.paths[path[1]] = doc.paths[path[1]];
  if (path[0] === "components" && path.length > 1) {
    part.components = { ...kept, [path[1]]: doc.components[path[1]] };
  }
  return part;
}

const resolveOnlyWhatIsShown = (system) => {
  const swagger = window.SwaggerUIBundle.plugins.SwaggerClient({
    configs: {},
    getConfigs: () => system.getConfigs(),
  });
  return {
    fn: {
      resolveSubtree: async (doc, path, options) => {
        const resolved = await swagger.fn.resolveSubtree(partWithReferences(doc, path), path, options);
        await nextTask(); // Swagger UI draws what was resolved in a task of its own
        return resolved;
      },
    },
    statePlugins: {
      spec: {
        wrapActions: {
          // Asked for after every load (components.securitySchemes), present or not.
          requestResolvedSubtree: (original, sys) => (path) =>
            sys.specSelectors.specJson().hasIn(path) ? original(path) : { type: "atlas/absent-part", payload: path },
        },
      },
    },
  };
};

/**
 * An opened operation fits a screen or two at 1280 x 800 (POST /api/attention was 4,139 px, five
 * screens) and still shows every status it answers:
 * - an error answer (4xx, 5xx) is one row: its code, its description, the headers it sets and
 *   its example body folded in a <details>, drawn once unfolded. Swagger UI draws each with a
 *   media-type menu, Example Value / Schema tabs and the example open (nine statuses were
 *   2,967 px of that operation); the success answer keeps that drawing, and the errors' schema,
 *   ErrorDetail, is in the Schemas section.
 * - an answer's headers are a line each, not a table under a heading.
 * - a long operation description shows its first paragraph, the rest under "More".
 */
const compactOperations = ({ React }) => {
  const h = React.createElement;
  const OperationDescription = React.createContext(null);

  function FoldedExample({ response, fn, getComponent }) {
    const [open, setOpen] = React.useState(false);
    const [mediaType, media] = response.get("content").entrySeq().first();
    const HighlightCode = getComponent("HighlightCode", true);
    const body = () => {
      const example = media.get("example") ?? media.get("examples")?.first()?.get("value");
      const schema = media.get("schema")?.toJS();
      return fn.getSampleSchema(schema, mediaType, { includeReadOnly: true }, example);
    };
    const language = /json/.test(mediaType) ? "json" : null;
    return h(
      "details",
      { className: "response-example", onToggle: (event) => setOpen(event.currentTarget.open) },
      h("summary", null, "Example ", h("code", null, mediaType)),
      open && h(HighlightCode, { className: "example", language }, body()),
    );
  }

  function ErrorRow({ code, response, className = "", fn, getComponent, specSelectors }) {
    const Markdown = getComponent("Markdown", true);
    const Headers = getComponent("headers");
    const OperationLink = getComponent("operationLink");
    const headers = response.get("headers");
    const links = response.get("links");
    return h(
      "tr",
      { className: `response response--compact ${className}`, "data-code": code },
      h("td", { className: "response-col_status" }, code),
      h(
        "td",
        { className: "response-col_description" },
        h(
          "div",
          { className: "response-compact" },
          h(Markdown, { source: response.get("description") }),
          headers?.size ? h(Headers, { headers, getComponent }) : null,
          response.get("content")?.size ? h(FoldedExample, { response, fn, getComponent }) : null,
        ),
      ),
      specSelectors.isOAS3()
        ? h(
            "td",
            { className: "response-col_links" },
            links
              ? links
                  .entrySeq()
                  .map(([name, link]) => h(OperationLink, { key: name, name, link, getComponent }))
                  .toArray()
              : h("i", null, "No links"),
          )
        : null,
    );
  }

  function HeaderLines({ headers, getComponent }) {
    const Markdown = getComponent("Markdown", true);
    const line = ([name, header]) => {
      const type = header.getIn(["schema", "type"]) ?? header.get("type");
      const description = header.get("description");
      return h(
        "li",
        { key: name },
        h("code", null, name),
        " header",
        type ? `, ${type}` : "",
        description ? [": ", h(Markdown, { key: "description", source: description })] : "",
      );
    };
    return h("ul", { className: "response-headers" }, headers.entrySeq().map(line).toArray());
  }

  /** An operation description's first paragraph and the rest, where the rest is worth folding. */
  const leadAndRest = (source) => {
    const [lead, rest] = source.split(/\n\s*\n(.*)/s);
    return source.length > LONG_DESCRIPTION && rest && !lead.includes("```") ? { lead, rest } : null;
  };

  function FoldedDescription({ Original, ...props }) {
    const description = React.useContext(OperationDescription);
    const parts = description && props.source === description ? leadAndRest(description) : null;
    if (!parts) return h(Original, props);
    return h(
      React.Fragment,
      null,
      h(Original, { ...props, source: parts.lead }),
      h(
        "details",
        { className: "description-more" },
        h("summary", null, "More"),
        h(Original, { ...props, source: parts.rest }),
      ),
    );
  }

  return {
    components: { headers: HeaderLines },
    wrapComponents: {
      response: (Original) => (props) => h(/^[45]/.test(props.code) ? ErrorRow : Original, props),
      operation: (Original) => (props) => {
        const description = props.operation?.getIn(["op", "description"]) ?? null;
        return h(OperationDescription.Provider, { value: description }, h(Original, props));
      },
      Markdown: (Original) => (props) => h(FoldedDescription, { Original, ...props }),
    },
  };
};

/**
 * Swagger UI draws its operations in a <main> of its own (so the page's box for it is a plain
 * div), its title and description outside it, and its title as an h1 straight over h3 tag
 * headings (axe: content outside any landmark, a heading level skipped). Whenever it draws
 * them, the description becomes a named region and the title a level-2 heading under the
 * page's own h1. A code block taller than its box (api-docs.css) scrolls, so each takes the
 * keyboard's focus (axe: a scrollable region must be reachable by keyboard).
 */
function fitToAxe() {
  for (const info of root.querySelectorAll(".information-container:not([role])")) {
    info.setAttribute("role", "region");
    info.setAttribute("aria-label", "About this API");
  }
  for (const title of root.querySelectorAll("h1:not([aria-level])")) title.setAttribute("aria-level", "2");
  for (const code of root.querySelectorAll(".highlight-code > .microlight:not([tabindex])")) code.tabIndex = 0;
}

if (root) {
  new MutationObserver(fitToAxe).observe(root, { childList: true, subtree: true });
  window.SwaggerUIBundle({
    url: root.dataset.specUrl,
    domNode: root,
    deepLinking: false, // its anchors sit inside buttons (nested interactive controls)
    tryItOutEnabled: false,
    displayRequestDuration: true,
    defaultModelsExpandDepth: 0,
    presets: [window.SwaggerUIBundle.presets.apis],
    plugins: [resolveOnlyWhatIsShown, compactOperations],
    layout: "BaseLayout",
    validatorUrl: null, // the public validator badge would call an outside server
  });
}
