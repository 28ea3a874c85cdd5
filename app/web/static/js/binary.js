// Decoder for the compact binary attention maps (format f32, f16 or u8 of POST /api/attention).
// Layout: "ATLS", u8 version, u8 dtype (1 f16, 2 u8, 3 f32), u16 reserved, u32 meta_len,
// meta_len bytes of UTF-8 JSON, zero padding to a multiple of 8, then the weights in C order
// [layer][head][query][key], little-endian.

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >> 10) & 0x1f;
  const fraction = h & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

export function decodeMaps(buffer) {
  const view = new DataView(buffer);
  const magic = String.fromCharCode(...new Uint8Array(buffer, 0, 4));
  if (magic !== "ATLS") throw new Error("The server sent something that is not an attention map.");
  const version = view.getUint8(4);
  if (version !== 1) throw new Error(`Unsupported map version ${version}.`);
  const dtype = view.getUint8(5);
  const metaLength = view.getUint32(8, true);
  const meta = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 12, metaLength)));
  let start = 12 + metaLength;
  start += (8 - (start % 8)) % 8;
  const count = meta.shape.reduce((a, b) => a * b, 1);
  let values;
  if (dtype === 3) {
    values = new Float32Array(buffer.slice(start, start + 4 * count));
  } else if (dtype === 2) {
    const bytes = new Uint8Array(buffer, start, count);
    values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = bytes[i] / 255;
  } else if (dtype === 1) {
    const halves = new Uint16Array(buffer.slice(start, start + 2 * count));
    values = new Float32Array(count);
    for (let i = 0; i < count; i++) values[i] = halfToFloat(halves[i]);
  } else {
    throw new Error(`Unknown map dtype ${dtype}.`);
  }
  const [, heads, rows, cols] = meta.shape;
  return {
    meta,
    values,
    /** The (rows x cols) map of the i-th returned layer and j-th returned head, as a view. */
    map(i, j) {
      const offset = (i * heads + j) * rows * cols;
      return values.subarray(offset, offset + rows * cols);
    },
  };
}

/** A flat row-major map as nested arrays (what Plotly wants). */
export function toMatrix(flat, rows, cols) {
  const out = new Array(rows);
  for (let r = 0; r < rows; r++) out[r] = Array.from(flat.subarray(r * cols, (r + 1) * cols));
  return out;
}
