'use strict';
// rocketmq-client-nodejs against what the reference answers (issue 32). Mode --mode:
//  types:   a Producer of --fifo-topic, --plain-topic and --tx-topic sends a plain message and a grouped one to each
//           of the first two (the SDK checks the route's acceptMessageTypes), commits a transaction on --tx-topic and
//           sends to --unknown-topic; a SimpleConsumer of --group then receives the FIFO and the committed message.
//           Reports receipts (messageId, transactionId), each refusal's text, and what the consumer saw.
//  signed:  a Producer signing with --access-key / --secret-key starts and sends once; reports the refusal's text.
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, view, logger } = require('./grpc_common');

run({ endpoints: '', mode: 'types', fifoTopic: '', plainTopic: '', txTopic: '', unknownTopic: '', group: '',
  accessKey: '', secretKey: '', timeoutMs: 30000 }, async (args, result) => {
  const message = (topic, body, extra = {}) => ({ topic, body: Buffer.from(body),
    properties: new Map([['app', 'fidelity']]), ...extra });
  const attempt = async (what) => {
    try {
      const receipt = await what();
      return { messageId: receipt.messageId, transactionId: receipt.transactionId };
    } catch (e) {
      let text = String(e && e.message ? e.message : e);
      for (let cause = e && e.cause; cause; cause = cause.cause) text += ` | cause: ${cause.message || cause}`;
      return { error: text };
    }
  };
  if (args.mode === 'signed') {
    result.phase = 'signed';
    const producer = new Producer({ endpoints: args.endpoints, namespace: '', topics: [args.plainTopic], logger,
      requestTimeout: 3000, sessionCredentials: { accessKey: args.accessKey, accessSecret: args.secretKey } });
    try {
      result.signed = await attempt(async () => {
        await startupWithin(producer, 'Producer', 10000);
        return producer.send(message(args.plainTopic, 'signed'));
      });
    } finally {
      await shutdownQuietly(producer);
    }
    return;
  }
  result.phase = 'startup';
  const producer = new Producer({ endpoints: args.endpoints, namespace: '', logger, requestTimeout: 3000,
    // one topic at startup (the others' routes are fetched at their first send): with several, this SDK may get
    // the Settings answer before it starts waiting for it, and its startup never ends
    topics: [args.fifoTopic], checker: { async check() { return 'COMMIT'; } } });
  const consumer = new SimpleConsumer({ endpoints: args.endpoints, namespace: '', consumerGroup: args.group, logger,
    requestTimeout: 3000, awaitDuration: 2000,
    subscriptions: new Map([[args.fifoTopic, '*'], [args.txTopic, '*']]) });
  try {
    await startupWithin(producer, 'Producer', 10000);
    result.phase = 'send';
    result.sends = {
      plainToFifo: await attempt(() => producer.send(message(args.fifoTopic, 'plain'))),
      fifoToFifo: await attempt(() => producer.send(message(args.fifoTopic, 'grouped', { messageGroup: 'g-9' }))),
      fifoToPlain: await attempt(() => producer.send(message(args.plainTopic, 'grouped', { messageGroup: 'g-9' }))),
      plainToPlain: await attempt(() => producer.send(message(args.plainTopic, 'plain'))),
      unknown: await attempt(() => producer.send(message(args.unknownTopic, 'nowhere'))),
    };
    const transaction = producer.beginTransaction();
    const receipt = await producer.send(message(args.txTopic, 'committed'), transaction);
    await transaction.commit();
    result.transaction = { messageId: receipt.messageId, transactionId: receipt.transactionId };
    result.phase = 'receive';
    await startupWithin(consumer, 'SimpleConsumer', 10000);
    result.received = [];
    const deadline = Date.now() + 15000;
    while (result.received.length < 2 && Date.now() < deadline) {
      for (const m of await consumer.receive(16, 30000)) {
        result.received.push(view(m));
        await consumer.ack(m);
      }
    }
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(consumer);
    await shutdownQuietly(producer);
  }
});
