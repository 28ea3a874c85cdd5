// One row of a vision transformer's weights drawn over the image it read: each patch darkened by
// how little weight it gets, the patch grid over it. The images page and the notebook's image
// widget both draw with it.

const DARKEST = 0.85; // how dark a patch given no weight is drawn

/**
 * Paints `picture` (an ImageBitmap or image of the image as the model saw it) on `canvas`, `scale`
 * canvas pixels a pixel, with each patch darkened by how little `values` (T weights: `prefix`
 * tokens, then rows x cols patches row by row) gives it, relative to the patches' largest.
 * grid: {width, height, patch, rows, cols, prefix (a count)}; outlined: [[row, col, colour]].
 */
export function paintPatches(canvas, picture, grid, values, { outlined = [], scale = 1 } = {}) {
  canvas.width = grid.width * scale;
  canvas.height = grid.height * scale;
  const context = canvas.getContext("2d");
  context.drawImage(picture, 0, 0, canvas.width, canvas.height);
  const patches = Array.from(values).slice(grid.prefix);
  const top = Math.max(...patches, 1e-12);
  const side = grid.patch * scale;
  patches.forEach((v, i) => {
    const r = Math.floor(i / grid.cols);
    const c = i % grid.cols;
    context.fillStyle = `rgba(0, 0, 0, ${DARKEST * (1 - Math.max(0, v) / top)})`;
    context.fillRect(c * side, r * side, side, side);
  });
  context.strokeStyle = "rgba(255, 255, 255, 0.18)"; // the patch grid: the model's tokens
  context.lineWidth = 1;
  context.beginPath();
  for (let r = 1; r < grid.rows; r++) {
    context.moveTo(0, r * side + 0.5);
    context.lineTo(grid.cols * side, r * side + 0.5);
  }
  for (let c = 1; c < grid.cols; c++) {
    context.moveTo(c * side + 0.5, 0);
    context.lineTo(c * side + 0.5, grid.rows * side);
  }
  context.stroke();
  context.lineWidth = Math.max(1, scale);
  for (const [r, c, colour] of outlined) {
    context.strokeStyle = colour;
    context.strokeRect(c * side + 1, r * side + 1, side - 2, side - 2);
  }
}

/** The patch [row, col] under a pointer event on a canvas painted by paintPatches. */
export function patchUnder(event, canvas, grid) {
  const box = canvas.getBoundingClientRect();
  const x = ((event.clientX - box.left) / box.width) * grid.width;
  const y = ((event.clientY - box.top) / box.height) * grid.height;
  const row = Math.min(grid.rows - 1, Math.max(0, Math.floor(y / grid.patch)));
  const col = Math.min(grid.cols - 1, Math.max(0, Math.floor(x / grid.patch)));
  return [row, col];
}
