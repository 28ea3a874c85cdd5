// `npm ci && npm run build` here writes app/web/vendor/swagger-ui-atlas-<version>.part{1,2}.min.js
// and swagger-ui-<version>.css: Swagger UI from npm's `swagger-ui` package (its ES build, with
// its dependencies from the locked tree, React 18 only), bundled for the browsers of the last
// years rather than swagger-ui-dist's ES5 build. The same inputs give the same bytes: the files'
// SHA-256 are pinned in app/web/assets.py.
//
// The script comes in two parts, loaded one after the other by /docs, because a browser runs
// each script in a task of its own: in one piece, running it on load was one task of 166-208 ms
// on the 2-core test machine, most of it swagger-client's OpenAPI 3.1 resolver (ApiDOM) setting
// itself up. Part 1 is swagger-client: what Swagger UI imports from it and everything under
// that. Part 2 is Swagger UI and the rest. Each module is in one part only, the first that
// reaches it: part 1 hands the modules of its own that part 2's modules import to
// globalThis.__atlasSwaggerModules (each as `require` gives it, so an `import` of it in part 2
// reads the same bindings it would in one bundle), and part 2 reads them from there. The build
// fails if a module would be in both parts, or in neither's place in Swagger UI's own bundle.
import { copyFileSync, readFileSync } from 'node:fs';

import esbuild from 'esbuild';

const { version } = JSON.parse(readFileSync('node_modules/swagger-ui/package.json', 'utf8'));
const vendor = '../../app/web/vendor';
const REGISTRY = 'globalThis.__atlasSwaggerModules';
const HERE = process.cwd();

const options = {
  bundle: true,
  minify: true,
  target: 'es2020',
  platform: 'browser',
  format: 'iife',
  metafile: true,
  define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
  loader: { '.css': 'empty' }, // the stylesheet is its own file, below
  legalComments: 'eof',
  logLevel: 'warning',
};
const banner = (part) => ({
  js: `/*! Swagger UI ${version} (atlas: esbuild, es2020; part ${part} of 2) - Apache-2.0 */`,
});

/** An entry that puts each module (a path from here) in the registry, under its path. */
const registering = (paths) => ({
  contents: [
    `const modules = (${REGISTRY} ??= {});`,
    ...paths.map((path) => `modules[${JSON.stringify(path)}] = require(${JSON.stringify(`./${path}`)});`),
  ].join('\n'),
  resolveDir: HERE,
  sourcefile: 'part1.js',
});

/** Reads the modules in `registered` from the registry instead of bundling them. */
const borrowing = (registered) => ({
  name: 'borrow-from-part-1',
  setup(build) {
    const resolveAs = async (args, kind) => {
      const { path, errors } = await build.resolve(args.path, {
        importer: args.importer, resolveDir: args.resolveDir, kind, pluginData: { resolving: true },
      });
      return errors.length ? null : path.slice(HERE.length + 1);
    };
    build.onResolve({ filter: /.*/ }, async (args) => {
      if (args.pluginData?.resolving || args.kind === 'entry-point') return undefined;
      // esbuild takes a package that is both imported and required by its `main` file alone
      // (one copy); resolving here, an import can find its `module` file: both ways are tried.
      let path = await resolveAs(args, args.kind);
      if (!registered.has(path) && args.kind !== 'require-call') path = await resolveAs(args, 'require-call');
      if (!registered.has(path)) return undefined;
      return { path: `${path}.cjs`, namespace: 'part-1' }; // read as CommonJS, whatever it is
    });
    build.onLoad({ filter: /.*/, namespace: 'part-1' }, (args) => ({
      contents: `module.exports = ${REGISTRY}[${JSON.stringify(args.path.slice(0, -'.cjs'.length))}];`,
      loader: 'js',
    }));
  },
});

const modulesOf = (meta) => Object.keys(meta.inputs).filter((path) => path.startsWith('node_modules/'));

// Swagger UI in one bundle, and swagger-client as far as Swagger UI imports it.
const whole = (await esbuild.build({ ...options, entryPoints: ['entry.js'], write: false })).metafile;
const core = Object.keys(whole.inputs).find((path) => path.includes('swagger-ui-es-bundle-core'));
const clientImports = whole.inputs[core].imports
  .filter((i) => i.original?.startsWith('swagger-client/'))
  .map((i) => i.path);
const client = (await esbuild.build({ ...options, stdin: registering(clientImports), write: false })).metafile;

// Part 1 registers each module of its own that a module of part 2 imports.
const inPart1 = new Set(modulesOf(client));
const registered = new Set();
for (const path of modulesOf(whole).filter((path) => !inPart1.has(path))) {
  for (const { path: imported } of whole.inputs[path].imports) {
    if (inPart1.has(imported)) registered.add(imported);
  }
}
const outfile = (part) => `${vendor}/swagger-ui-atlas-${version}.part${part}.min.js`;
const part1 = await esbuild.build({
  ...options, stdin: registering([...registered].sort()), outfile: outfile(1), banner: banner(1),
});
const part2 = await esbuild.build({
  ...options, entryPoints: ['entry.js'], outfile: outfile(2), banner: banner(2),
  plugins: [borrowing(registered)],
});

const [modules1, modules2] = [part1, part2].map((result) => modulesOf(result.metafile));
const twice = modules1.filter((path) => modules2.includes(path));
if (twice.length) throw new Error(`in both parts: ${twice.join(', ')}`);
const foreign = [...modules1, ...modules2].filter((path) => !(path in whole.inputs));
if (foreign.length) throw new Error(`not in Swagger UI's own bundle: ${foreign.join(', ')}`);
const missing = modulesOf(whole).filter((path) => !modules1.includes(path) && !modules2.includes(path));
if (missing.length) throw new Error(`in neither part: ${missing.join(', ')}`);

copyFileSync('node_modules/swagger-ui/dist/swagger-ui.css', `${vendor}/swagger-ui-${version}.css`);
copyFileSync('node_modules/swagger-ui/LICENSE', `${vendor}/LICENSE-swagger-ui.txt`);
