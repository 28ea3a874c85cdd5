// `npm ci && npm run build` here writes app/web/vendor/plotly-atlas-<version>.min.js, with the
// settings of plotly.js's own esbuild-config.js (its dist bundles), minified. The same inputs
// give the same bytes: its SHA-256 is pinned in app/web/assets.py.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import esbuild from 'esbuild';
import { environmentPlugin } from 'esbuild-plugin-environment';

const require = createRequire(import.meta.url);
const InlineCSSPlugin = require('esbuild-plugin-inline-css');
const { version } = JSON.parse(readFileSync('node_modules/plotly.js/package.json', 'utf8'));

await esbuild.build({
  entryPoints: ['entry.js'],
  outfile: `../../app/web/vendor/plotly-atlas-${version}.min.js`,
  banner: {
    js: `/**\n* plotly.js (atlas: scatter, bar, heatmap - minified) v${version}\n` +
      '* Copyright 2012-2026, Plotly, Inc. All rights reserved.\n* Licensed under the MIT license\n*/',
  },
  format: 'iife',
  globalName: 'Plotly',
  bundle: true,
  minify: true,
  target: 'es2016',
  plugins: [InlineCSSPlugin(), environmentPlugin({ NODE_DEBUG: false })],
  alias: { stream: 'stream-browserify' },
  define: { global: 'window', 'define.amd': 'false' },
  logLevel: 'info',
});
