'use strict';
// rocketmq-client-nodejs Producer: sends --count messages (tag, keys, user properties) to --topic over gRPC.
const { Producer } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, logger } = require('./grpc_common');

run({ endpoints: '', topic: '', count: 10, prefix: 'node', timeoutMs: 20000 }, async (args, result) => {
  result.phase = 'startup';
  const producer = new Producer({ endpoints: args.endpoints, namespace: '', topics: [args.topic], logger,
    requestTimeout: 3000 });
  try {
    await startupWithin(producer, 'Producer', 10000);
    result.phase = 'send';
    result.sent = [];
    for (let i = 0; i < args.count; i += 1) {
      const message = {
        topic: args.topic,
        tag: i % 2 === 0 ? 'TagA' : 'TagB',
        keys: [`${args.prefix}-key-${i}`, `${args.prefix}-alt-${i}`],
        properties: new Map([['seq', String(i)], ['origin', 'nodejs']]),
        body: Buffer.from(`${args.prefix} body ${i}`),
      };
      const receipt = await producer.send(message);
      result.sent.push({ messageId: receipt.messageId, offset: Number(receipt.offset), tag: message.tag,
        keys: message.keys, body: message.body.toString() });
    }
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(producer);
  }
});
