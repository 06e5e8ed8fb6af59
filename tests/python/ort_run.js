#!/usr/bin/env node
// Runs an ONNX model with ONNX Runtime (onnxruntime-node, installed by scripts/setup.sh) on .npy
// inputs and writes each output as .npy: the independent check of Kiln's inference exports
// (tests/python/test_inference_export.py).
//
//   node tests/python/ort_run.js MODEL.onnx OUT_DIR NAME=INPUT.npy ...
//
// Writes OUT_DIR/out_{j}.npy for the j-th output of the session (in the model's output order) and
// prints {"outputs": [names]} as one JSON line. Arrays: little-endian, C order, float32, float64,
// int64, int32, uint8, int8 and bool. Exit status 1 with one line on stderr on any failure.
'use strict';

const fs = require('fs');
const path = require('path');

// descr -> [typed array constructor, ORT tensor type]
const DTYPES = {
  '<f4': [Float32Array, 'float32'],
  '<f8': [Float64Array, 'float64'],
  '<i8': [BigInt64Array, 'int64'],
  '<i4': [Int32Array, 'int32'],
  '|b1': [Uint8Array, 'bool'],
  '|u1': [Uint8Array, 'uint8'],
  '|i1': [Int8Array, 'int8'],
};
const DESCR_OF = Object.fromEntries(Object.entries(DTYPES).map(([descr, [, type]]) => [type, descr]));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLen;
  const header = buf.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`${file}: malformed header ${header}`);
  if (fortran[1] === 'True') throw new Error(`${file}: Fortran order is not supported`);
  const entry = DTYPES[descr[1]];
  if (!entry) throw new Error(`${file}: dtype ${descr[1]} is not supported (${Object.keys(DTYPES).join(', ')})`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const count = dims.reduce((a, b) => a * b, 1);
  const [Ctor, type] = entry;
  const bytes = count * Ctor.BYTES_PER_ELEMENT;
  if (start + bytes > buf.length) throw new Error(`${file}: ${buf.length - start} data bytes, ${bytes} expected`);
  // Copy into an aligned buffer: a typed array over the file's buffer may be misaligned.
  const data = new Ctor(count);
  Buffer.from(data.buffer).set(buf.subarray(start, start + bytes));
  return { type, dims, data: type === 'bool' ? Uint8Array.from(data, (v) => (v ? 1 : 0)) : data };
}

function writeNpy(file, tensor) {
  const descr = DESCR_OF[tensor.type];
  if (!descr) throw new Error(`output type ${tensor.type} cannot be written as .npy`);
  const dims = tensor.dims.map(Number);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const prefix = Buffer.alloc(10);
  prefix.write('\x93NUMPY', 0, 'latin1');
  prefix[6] = 1;
  prefix[7] = 0;
  prefix.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([prefix, Buffer.from(header, 'latin1'), body]));
}

function loadOrt() {
  try {
    return require('onnxruntime-node');
  } catch (e) {
    throw new Error(`onnxruntime-node is not installed (run scripts/setup.sh): ${e.message}`);
  }
}

// {name: ort.Tensor} from NAME=INPUT.npy arguments.
function readFeeds(ort, specs) {
  const feeds = {};
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    if (eq <= 0) throw new Error(`expected NAME=INPUT.npy, got '${spec}'`);
    const { type, dims, data } = readNpy(spec.slice(eq + 1));
    feeds[spec.slice(0, eq)] = new ort.Tensor(type, data, dims);
  }
  return feeds;
}

async function main(argv) {
  if (argv.length < 2) throw new Error('usage: node ort_run.js MODEL.onnx OUT_DIR NAME=INPUT.npy ...');
  const [model, outDir, ...specs] = argv;
  const ort = loadOrt();
  const feeds = readFeeds(ort, specs);
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, graphOptimizationLevel: 'all' });
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  session.outputNames.forEach((name, j) => writeNpy(path.join(outDir, `out_${j}.npy`), results[name]));
  process.stdout.write(JSON.stringify({ outputs: session.outputNames }) + '\n');
}

module.exports = { loadOrt, readFeeds };  // bench/ort_time.js loads ORT and its inputs with them

if (require.main === module) {
  main(process.argv.slice(2)).catch((e) => {
    process.stderr.write(`ort_run.js: error: ${String(e.message || e).replace(/\n/g, ' ')}\n`);
    process.exit(1);
  });
}
