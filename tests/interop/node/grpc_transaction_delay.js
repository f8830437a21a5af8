'use strict';
// rocketmq-client-nodejs Producer: two transactions (one committed, one rolled back) and two timed messages (one
// recalled before its time) over gRPC: the transactions to --topic, the timed messages to --timed-topic (default
// --topic; a 5.x topic takes one message type). Reports ids, transaction ids, the recall answer and send times.
const { Producer } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, logger } = require('./grpc_common');

run({ endpoints: '', topic: '', timedTopic: '', delayMs: 1500, timeoutMs: 20000 }, async (args, result) => {
  result.phase = 'startup';
  const timedTopic = args.timedTopic || args.topic;
  const topics = timedTopic === args.topic ? [args.topic] : [args.topic, timedTopic];
  const producer = new Producer({ endpoints: args.endpoints, namespace: '', topics, logger,
    requestTimeout: 3000, checker: { async check() { return 'ROLLBACK'; } } });
  const message = (body, extra = {}, topic = args.topic) => ({ topic, tag: 'TagT', body: Buffer.from(body), ...extra });
  try {
    await startupWithin(producer, 'Producer', 10000);
    result.phase = 'transactions';
    result.transactions = {};
    for (const [body, decide] of [['committed', 'commit'], ['rolled back', 'rollback']]) {
      const transaction = producer.beginTransaction();
      const receipt = await producer.send(message(body), transaction);
      await transaction[decide]();
      result.transactions[body] = { messageId: receipt.messageId, transactionId: receipt.transactionId };
    }
    result.phase = 'timed';
    const dueMs = Date.now() + Number(args.delayMs);
    const kept = await producer.send(message('timed', { deliveryTimestamp: new Date(dueMs) }, timedTopic));
    const recalled = await producer.send(message('recalled', { deliveryTimestamp: new Date(dueMs) }, timedTopic));
    const recall = await producer.recallMessage(timedTopic, recalled.recallHandle);
    result.timed = { dueMs, kept: kept.messageId, keptHandle: Boolean(kept.recallHandle),
      recalled: recalled.messageId, recallAnswer: recall.messageId };
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(producer);
  }
});
