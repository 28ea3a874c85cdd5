// plotly.js's core (scatter, every component, Plotly's whole API) and the two other trace types
// the pages draw. The npm "cartesian" bundle also carries box, contour, histograms, image, pie,
// ternary, violin and world calendars, whose set-up ran in the page's first task on every load.
'use strict';

var Plotly = require('plotly.js/lib/core');

Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/heatmap')]);

module.exports = Plotly;
