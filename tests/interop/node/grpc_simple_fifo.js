'use strict';
// rocketmq-client-nodejs SimpleConsumer on an orderly group: what the broker hands out while a batch is un-acked.
// A fixed plan of receive(--batch, --invisible-ms) and ack calls; every step's answer is reported, the Python test
// judges it:
//   r1 receive (repeated until something arrives)      r2 receive           ack r1[0], r3 receive
//   ack r1[1..], r4 receive                            r5 receive until something arrives (r4 is left to expire)
//   ack r4[0] with its expired handle (expiredAck)     ack r5, r6 receive   ack r6, r7 receive
// Times are milliseconds since the first receive call.
const { SimpleConsumer } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, view, logger } = require('./grpc_common');

run({
  endpoints: '', topic: '', group: '', batch: 2, awaitMs: 1000, invisibleMs: 2000, firstWaitMs: 8000,
  expireWaitMs: 8000, timeoutMs: 30000,
}, async (args, result) => {
  result.phase = 'startup';
  const consumer = new SimpleConsumer({
    endpoints: args.endpoints, namespace: '', consumerGroup: args.group, logger, requestTimeout: 3000,
    subscriptions: new Map([[args.topic, '*']]), awaitDuration: args.awaitMs,
  });
  result.steps = {};
  let t0;
  const now = () => Date.now() - t0;
  const receive = async (name, untilMs = 0) => {
    result.phase = name;
    const startMs = now();
    let got = [];
    do {
      got = await consumer.receive(args.batch, args.invisibleMs);
    } while (got.length === 0 && now() < untilMs);
    result.steps[name] = { startMs, atMs: now(), messages: got.map(view) };
    return got;
  };
  const ack = async (messages) => {
    for (const m of messages) await consumer.ack(m);
  };
  try {
    await startupWithin(consumer, 'SimpleConsumer', 10000);
    t0 = Date.now();
    const r1 = await receive('r1', args.firstWaitMs);
    await receive('r2');
    await ack(r1.slice(0, 1));
    await receive('r3');
    await ack(r1.slice(1));
    const r4 = await receive('r4');
    const r5 = await receive('r5', now() + args.expireWaitMs);
    result.phase = 'expired ack';
    try { // r4's handles expired when r5 got the messages again: the broker must refuse them
      await consumer.ack(r4[0]);
      result.expiredAck = { ok: true };
    } catch (e) {
      result.expiredAck = { ok: false, code: e.code, error: String(e.message || e) };
    }
    await ack(r5);
    const r6 = await receive('r6');
    await ack(r6);
    await receive('r7');
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(consumer);
  }
});
