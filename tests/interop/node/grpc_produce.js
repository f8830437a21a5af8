'use strict';
// rocketmq-client-nodejs Producer: sends --count messages (tag, keys, user properties; message i in message group
// i mod n of --message-groups g1,g2,... when given) to --topic over gRPC, one after the other; with --access-key and
// --secret-key it signs every call (the broker's ACL).
const { Producer } = require('rocketmq-client-nodejs');
const { run, shutdownQuietly, startupWithin, logger } = require('./grpc_common');

run({ endpoints: '', topic: '', count: 10, prefix: 'node', messageGroups: '', accessKey: '', secretKey: '',
  timeoutMs: 20000 }, async (args, result) => {
  result.phase = 'startup';
  const sessionCredentials = args.accessKey ? { accessKey: args.accessKey, accessSecret: args.secretKey } : undefined;
  const producer = new Producer({ endpoints: args.endpoints, namespace: '', topics: [args.topic], logger,
    requestTimeout: 3000, sessionCredentials });
  try {
    await startupWithin(producer, 'Producer', 10000);
    result.phase = 'send';
    result.sent = [];
    const groups = args.messageGroups ? args.messageGroups.split(',') : [];
    for (let i = 0; i < args.count; i += 1) {
      const message = {
        topic: args.topic,
        tag: i % 2 === 0 ? 'TagA' : 'TagB',
        keys: [`${args.prefix}-key-${i}`, `${args.prefix}-alt-${i}`],
        properties: new Map([['seq', String(i)], ['origin', 'nodejs']]),
        body: Buffer.from(`${args.prefix} body ${i}`),
      };
      if (groups.length > 0) message.messageGroup = groups[i % groups.length];
      const receipt = await producer.send(message);
      result.sent.push({ messageId: receipt.messageId, offset: Number(receipt.offset), seq: String(i),
        tag: message.tag, keys: message.keys, body: message.body.toString(),
        messageGroup: message.messageGroup || null });
    }
    result.phase = 'shutdown';
  } finally {
    await shutdownQuietly(producer);
  }
});
