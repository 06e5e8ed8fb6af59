#!/usr/bin/env node
// Times an ONNX model's forward pass with ONNX Runtime (onnxruntime-node, installed by
// scripts/setup.sh) on .npy inputs: bench/bench.py's forward table.
//
//   node bench/ort_time.js MODEL.onnx RUNS NAME=INPUT.npy ...
//
// The session: intraOpNumThreads 2, interOpNumThreads 1, graphOptimizationLevel 'all', executionMode
// 'sequential'. One warm-up run, then RUNS timed runs (process.hrtime); prints one JSON line
// {"mean_ms": X, "min_ms": Y, "runs": RUNS}. Exit status 1 with one line on stderr on any failure.
'use strict';

const { loadOrt, readFeeds } = require('../tests/python/ort_run.js');

const THREADS = 2;

async function main(argv) {
  if (argv.length < 2) throw new Error('usage: node ort_time.js MODEL.onnx RUNS NAME=INPUT.npy ...');
  const [model, runsArg, ...specs] = argv;
  const runs = Number(runsArg);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`RUNS must be a positive integer, got '${runsArg}'`);
  const ort = loadOrt();
  const feeds = readFeeds(ort, specs);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: THREADS,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  });
  await session.run(feeds);  // warm-up
  let total = 0;
  let best = Infinity;
  for (let i = 0; i < runs; ++i) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    total += ms;
    best = Math.min(best, ms);
  }
  process.stdout.write(JSON.stringify({ mean_ms: total / runs, min_ms: best, runs }) + '\n');
}

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`ort_time.js: error: ${String(e.message || e).replace(/\n/g, ' ')}\n`);
  process.exit(1);
});
