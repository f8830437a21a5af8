'use strict';
// Shared plumbing for the rocketmq-client-nodejs (gRPC, RocketMQ 5.x) interop scripts driven by
// tests/interop/test_node_grpc.py: argument parsing, a logger on stderr (the SDK's default logger writes
// to ~/logs/rocketmq), a hard deadline for the whole process, and exactly one JSON summary line on stdout.

const util = require('node:util');

const LOG_PREFIX = '[rocketmq-client-nodejs]';

function parseArgs(argv, defaults) {
  const args = { ...defaults };
  for (let i = 2; i < argv.length; i += 1) {
    const key = argv[i];
    if (!key.startsWith('--')) throw new Error(`unexpected argument ${key}`);
    const name = key.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`missing value for ${key}`);
    args[name] = typeof defaults[name] === 'number' ? Number(value) : value;
    i += 1;
  }
  if (!args.endpoints) throw new Error('--endpoints host:port is required');
  return args;
}

const line = (level, a) => process.stderr.write(`${LOG_PREFIX} ${new Date().toISOString()} ${level} ${util.format(...a)}\n`);
const stderrLogger = {
  info: (...a) => line('INFO', a),
  warn: (...a) => line('WARN', a),
  error: (...a) => line('ERROR', a),
  debug: () => {},
  close: () => {},
};

let finished = false;

function emit(summary, code) {
  if (finished) return;
  finished = true;
  process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(code));
}

// Runs `scenario(args, result)`; `result` collects what the scenario observed and is printed even on failure
// or when the deadline passes (with ok = false and the reason), so the Python side sees how far it got.
function run(defaults, scenario) {
  let args;
  try {
    args = parseArgs(process.argv, defaults);
  } catch (e) {
    emit({ ok: false, failure: `bad arguments: ${e.message}` }, 2);
    return;
  }
  const result = { ok: false };
  const timer = setTimeout(() => {
    emit({ ...result, ok: false, failure: `deadline of ${args.timeoutMs} ms passed in phase ${result.phase}` }, 3);
  }, args.timeoutMs);
  process.on('unhandledRejection', (e) => {
    console.error(LOG_PREFIX, 'unhandled rejection', e);
  });
  Promise.resolve()
    .then(() => scenario(args, result))
    .then(() => {
      clearTimeout(timer);
      emit({ ...result, ok: true }, 0);
    }, (e) => {
      clearTimeout(timer);
      console.error(e);
      emit({ ...result, ok: false, failure: String(e && e.stack ? e.stack : e) }, 1);
    });
}

// Shuts a client down without letting a slow or failing shutdown hide the scenario's own outcome.
async function shutdownQuietly(client, ms = 3000) {
  if (!client) return;
  try {
    await Promise.race([client.shutdown(), new Promise((resolve) => setTimeout(resolve, ms))]);
  } catch (e) {
    console.error(LOG_PREFIX, 'shutdown failed', e);
  }
}

// Resolves with startup(), or rejects after `ms` (the SDK waits for the Settings answer without a limit).
function startupWithin(client, what, ms) {
  let timer;
  return Promise.race([
    client.startup().finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}.startup() did not finish in ${ms} ms`)), ms);
    }),
  ]);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function view(m) {
  return {
    messageId: m.messageId,
    topic: m.topic,
    tag: m.tag === undefined ? null : m.tag,
    keys: m.keys,
    body: m.body.toString('utf8'),
    properties: Object.fromEntries(m.properties),
    messageGroup: m.messageGroup === undefined ? null : m.messageGroup,
    deliveryAttempt: m.deliveryAttempt === undefined ? null : m.deliveryAttempt,
    offset: m.offset === undefined ? null : m.offset,
    corrupted: m.corrupted === true, // the SDK only sets it when the digest does not match
    receiptHandle: m.receiptHandle,
  };
}

module.exports = { run, shutdownQuietly, startupWithin, sleep, view, logger: stderrLogger };
