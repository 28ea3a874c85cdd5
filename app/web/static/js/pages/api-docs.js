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
            sys.specSelectors.specJson().hasIn(path)
              ? original(path)
              : { type: "atlas/absent-part", payload: path },
        },
      },
    },
  };
};

/**
 * Swagger UI draws its operations in a <main> of its own (so the page's box for it is a plain
 * div), its title and description outside it, and its title as an h1 straight over h3 tag
 * headings (axe: content outside any landmark, a heading level skipped). Whenever it draws
 * them, the description becomes a named region and the title a level-2 heading under the
 * page's own h1.
 */
function fitLandmarksAndHeadings() {
  for (const info of root.querySelectorAll(".information-container:not([role])")) {
    info.setAttribute("role", "region");
    info.setAttribute("aria-label", "About this API");
  }
  for (const title of root.querySelectorAll("h1:not([aria-level])")) title.setAttribute("aria-level", "2");
}

if (root) {
  new MutationObserver(fitLandmarksAndHeadings).observe(root, { childList: true, subtree: true });
  window.SwaggerUIBundle({
    url: root.dataset.specUrl,
    domNode: root,
    deepLinking: false, // its anchors sit inside buttons (nested interactive controls)
    tryItOutEnabled: false,
    displayRequestDuration: true,
    defaultModelsExpandDepth: 0,
    presets: [window.SwaggerUIBundle.presets.apis],
    plugins: [resolveOnlyWhatIsShown],
    layout: "BaseLayout",
    validatorUrl: null, // the public validator badge would call an outside server
  });
}
