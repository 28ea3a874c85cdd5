// `npm ci && npm run build` here writes app/web/vendor/swagger-ui-atlas-<version>.min.js and
// swagger-ui-<version>.css: Swagger UI from npm's `swagger-ui` package (its ES build, with its
// dependencies from the locked tree, React 18 only), bundled for the browsers of the last years
// rather than swagger-ui-dist's ES5 build. The same inputs give the same bytes: the files'
// SHA-256 are pinned in app/web/assets.py.
import { copyFileSync, readFileSync } from 'node:fs';

import esbuild from 'esbuild';

const { version } = JSON.parse(readFileSync('node_modules/swagger-ui/package.json', 'utf8'));
const vendor = '../../app/web/vendor';

await esbuild.build({
  entryPoints: ['entry.js'],
  outfile: `${vendor}/swagger-ui-atlas-${version}.min.js`,
  banner: { js: `/*! Swagger UI ${version} (atlas: esbuild, es2020) - Apache-2.0 */` },
  format: 'iife',
  bundle: true,
  minify: true,
  target: 'es2020',
  platform: 'browser',
  define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
  loader: { '.css': 'empty' }, // the stylesheet is its own file, below
  legalComments: 'eof',
  logLevel: 'info',
});
copyFileSync('node_modules/swagger-ui/dist/swagger-ui.css', `${vendor}/swagger-ui-${version}.css`);
copyFileSync('node_modules/swagger-ui/LICENSE', `${vendor}/LICENSE-swagger-ui.txt`);
