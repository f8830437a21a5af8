'use strict';
// rocketmq-client-nodejs SimpleConsumer: receive + ack over gRPC (the broker's POP).
//
//  1. receive until --expect distinct messages arrived (receive(--batch, --invisible-ms)); messages whose tag is
//     --hold-tag are not acked, every other message is acked at once;
//  2. held messages: every --change-every-th one (in arrival order, from the first) gets
//     changeInvisibleDuration(--change-ms) when --change-ms >= 0 (the old and new receipt handles are reported); the
//     others are left to expire after --invisible-ms;
//  3. receive until every held message came back (or --redeliver-wait-ms passed), ack each redelivery;
//  4. keep receiving until --quiet-until-ms after the first receive: whatever arrives then is reported as `late`
//     (an acked message coming back, or a redelivery delivered twice).
// The subscription is --filter (a tag expression, `*` by default). Times in the summary are milliseconds since the
// first receive call.
const { SimpleConsumer } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, view, logger } = require('./grpc_common');

run({
  endpoints: '', topic: '', group: '', filter: '*', expect: 0, batch: 16, awaitMs: 5000, invisibleMs: 10000, holdTag: '',
  changeMs: -1, changeEvery: 1, redeliverWaitMs: 10000, quietUntilMs: 0, receiveWaitMs: 10000, timeoutMs: 30000,
}, async (args, result) => {
  result.phase = 'startup';
  const consumer = new SimpleConsumer({
    endpoints: args.endpoints, namespace: '', consumerGroup: args.group, logger, requestTimeout: 3000,
    subscriptions: new Map([[args.topic, args.filter]]), awaitDuration: args.awaitMs,
  });
  result.first = [];
  result.acks = [];
  result.changes = [];
  result.redelivered = [];
  result.late = [];
  result.receiveCalls = 0;
  let t0;
  const now = () => Date.now() - t0;
  const receive = async () => {
    result.receiveCalls += 1;
    return consumer.receive(args.batch, args.invisibleMs);
  };
  const ack = async (m) => {
    await consumer.ack(m);
    result.acks.push({ messageId: m.messageId, attempt: m.deliveryAttempt, atMs: now() });
  };
  try {
    await startupWithin(consumer, 'SimpleConsumer', 10000);

    result.phase = 'receive';
    t0 = Date.now();
    const seen = new Map();
    const held = [];
    while (seen.size < args.expect && now() < args.receiveWaitMs) {
      const batch = await receive();
      const atMs = now();
      for (const m of batch) {
        const v = { ...view(m), atMs };
        if (seen.has(m.messageId)) {
          result.late.push(v); // delivered twice before anything could expire
          continue;
        }
        seen.set(m.messageId, m);
        result.first.push(v);
        if (args.holdTag && m.tag === args.holdTag) held.push(m);
        else await ack(m);
      }
    }
    if (seen.size < args.expect) throw new Error(`received ${seen.size} of ${args.expect} messages`);

    result.phase = 'change';
    if (args.changeMs >= 0) {
      for (const [i, m] of held.entries()) {
        if (i % args.changeEvery !== 0) continue;
        const oldHandle = m.receiptHandle;
        const startMs = now();
        await consumer.changeInvisibleDuration(m, args.changeMs);
        result.changes.push({ messageId: m.messageId, oldHandle, newHandle: m.receiptHandle, startMs, atMs: now() });
      }
    }

    result.phase = 'redeliver';
    const waiting = new Set(held.map((m) => m.messageId));
    const redeliverDeadline = now() + args.redeliverWaitMs;
    while (waiting.size > 0 && now() < redeliverDeadline) {
      const batch = await receive();
      const atMs = now();
      for (const m of batch) {
        const v = { ...view(m), atMs };
        if (waiting.has(m.messageId)) {
          waiting.delete(m.messageId);
          result.redelivered.push(v);
          await ack(m);
        } else {
          result.late.push(v);
        }
      }
    }

    result.phase = 'quiet';
    while (now() < args.quietUntilMs) {
      for (const m of await receive()) {
        result.late.push({ ...view(m), atMs: now() });
        await ack(m);
      }
    }
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(consumer);
  }
});
