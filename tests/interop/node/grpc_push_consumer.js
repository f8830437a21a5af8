'use strict';
// rocketmq-client-nodejs PushConsumer over gRPC (QueryAssignment, auto-renewed ReceiveMessage, AckMessage,
// ChangeInvisibleDuration as a negative acknowledgement; ordered consumption when the server's Settings say fifo).
//
// The listener returns FAILURE for the first --fail-times deliveries of each message tagged --fail-tag or whose id is
// in --fail-ids id1,id2,..., SUCCESS otherwise (after --work-ms of "work"). The script runs until --expect distinct messages were consumed
// successfully (at most --receive-wait-ms), then lingers --linger-ms to catch duplicate deliveries.
// Every AckMessage / ChangeInvisibleDuration answer the SDK gets is recorded (the SDK swallows their errors).
// Times in the summary are milliseconds since startup() returned.
const { PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, sleep, view, logger } = require('./grpc_common');

run({
  endpoints: '', topic: '', group: '', expect: 0, failTag: '', failIds: '', failTimes: 1, workMs: 0, receiveWaitMs: 15000,
  lingerMs: 1000, timeoutMs: 30000,
}, async (args, result) => {
  result.phase = 'startup';
  result.deliveries = [];
  result.acks = [];
  result.nacks = [];
  result.forwards = [];
  let t0 = Date.now();
  const now = () => Date.now() - t0;
  const succeeded = new Set();
  const failIds = new Set(args.failIds ? args.failIds.split(',') : []);
  const shouldFail = (m) => (args.failTag && m.tag === args.failTag) || failIds.has(m.messageId);
  const failures = new Map();
  let consuming = 0;
  result.maxConcurrent = 0;
  const consumer = new PushConsumer({
    endpoints: args.endpoints, namespace: '', consumerGroup: args.group, logger, requestTimeout: 3000,
    subscriptions: new Map([[args.topic, '*']]),
    messageListener: {
      async consume(m) {
        consuming += 1;
        result.maxConcurrent = Math.max(result.maxConcurrent, consuming);
        const d = { ...view(m), atMs: now() };
        result.deliveries.push(d);
        try {
          if (args.workMs > 0) await sleep(args.workMs);
          const failed = failures.get(m.messageId) || 0;
          if (shouldFail(m) && failed < args.failTimes) {
            failures.set(m.messageId, failed + 1);
            d.outcome = 'FAILURE';
            return ConsumeResult.FAILURE;
          }
          succeeded.add(m.messageId);
          d.outcome = 'SUCCESS';
          return ConsumeResult.SUCCESS;
        } finally {
          consuming -= 1;
        }
      },
    },
  });
  // Record the server's answers (the SDK retries or drops failed acks silently); the calls themselves go out as usual.
  const record = (name, into, idOf) => {
    const original = consumer[name].bind(consumer);
    consumer[name] = async (endpoints, request, timeout) => {
      const entry = { messageId: idOf(request), atMs: now() };
      into.push(entry);
      try {
        const response = await original(endpoints, request, timeout);
        const status = response.getStatus();
        entry.code = status ? status.getCode() : null;
        entry.message = status ? status.getMessage() : null;
        return response;
      } catch (e) {
        entry.error = String(e);
        throw e;
      }
    };
  };
  record('ackMessageViaRpc', result.acks, (r) => r.getEntriesList().map((e) => e.getMessageId()).join(','));
  record('changeInvisibleDurationViaRpc', result.nacks, (r) => r.getMessageId());
  record('forwardMessageToDeadLetterQueueViaRpc', result.forwards, (r) => r.getMessageId());
  try {
    await startupWithin(consumer, 'PushConsumer', 10000);
    t0 = Date.now();
    const settings = consumer.getPushConsumerSettings();
    result.fifo = settings.isFifo();
    result.longPollingTimeoutMs = settings.getLongPollingTimeout();
    const policy = consumer.getRetryPolicy();
    result.maxAttempts = policy ? policy.getMaxAttempts() : null;

    result.phase = 'consume';
    // --expect counts messages consumed successfully, or forwarded to the dead-letter queue with an OK answer
    const done = () => succeeded.size + result.forwards.filter((f) => f.code === 20000 /* Code.OK */).length;
    while (done() < args.expect && now() < args.receiveWaitMs) await sleep(50);
    if (done() < args.expect) throw new Error(`consumed ${done()} of ${args.expect} messages`);
    result.phase = 'linger';
    const until = now() + args.lingerMs;
    while (now() < until) await sleep(50);
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(consumer);
  }
});
