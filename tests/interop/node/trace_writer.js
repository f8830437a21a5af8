#!/usr/bin/env node
'use strict';

/*
 * Interop scenario run by tests/interop/test_node_trace.py: message traces written by an independent client.
 *
 *   node trace_writer.js --namesrv 127.0.0.1:9876 --topic T --group G [--trace-topic RMQ_SYS_TRACE_TOPIC]
 *
 * ali-ons (a pure-JavaScript RocketMQ remoting client) has no message-trace support of its own, so this script does
 * what a reference (Java) client's trace hooks do, with ali-ons as the transport:
 * 1. a producer (group <G>_PRODUCER) sends one message (key "node-trace-key") and times the send;
 * 2. a push consumer (group <G>) consumes it and times the listener;
 * 3. the records are written in the reference clients' trace format, built here from that format's description
 *    (fields joined by char 1, each record ended by char 2): Pub (14 fields), SubBefore (8), SubAfter (9);
 * 4. one trace message with those records goes to the trace topic, its KEYS set to the traced msgId and the
 *    message's keys, as the reference's AsyncTraceDispatcher does (so QUERY_MESSAGE by key finds it).
 *
 * stdout carries exactly one JSON summary; diagnostics go to stderr. Exit 0 = done; 2 = a step failed.
 */

const { Producer, Consumer, Message } = require('ali-ons');

const CONTENT = String.fromCharCode(1);
const FIELD = String.fromCharCode(2);

function parseArgs(argv) {
  const args = { namesrv: '127.0.0.1:9876', topic: null, group: null, traceTopic: 'RMQ_SYS_TRACE_TOPIC', stepTimeoutMs: 30000 };
  for (let i = 0; i < argv.length; i += 2) {
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`missing value for ${argv[i]}`);
    switch (argv[i]) {
      case '--namesrv': args.namesrv = value; break;
      case '--topic': args.topic = value; break;
      case '--group': args.group = value; break;
      case '--trace-topic': args.traceTopic = value; break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!args.topic || !args.group) throw new Error('--topic and --group are required');
  return args;
}

const args = parseArgs(process.argv.slice(2));
const log = (...parts) => process.stderr.write(`[trace-writer] ${parts.join(' ')}\n`);
const noHttp = { request: async () => { throw new Error('no HTTP name-server lookup in interop tests'); } };
const common = { httpclient: noHttp, nameSrv: args.namesrv, clientIP: '127.0.0.1' };

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms); });
  return Promise.race([ promise, timeout ]).finally(() => clearTimeout(timer));
}

// One record per the reference format: the fields in order, each followed by char 1, the last by char 2.
const record = fields => fields.map(String).join(CONTENT) + FIELD;

async function main() {
  const producerGroup = `${args.group}_PRODUCER`;
  const producer = new Producer(Object.assign({}, common, { producerGroup, instanceName: 'trace-writer-producer' }));
  producer.on('error', err => log('producer error', err && err.message));
  await withTimeout(producer.ready(), args.stepTimeoutMs, 'producer start');

  const msg = new Message(args.topic, 'TagT', 'traced by an independent client');
  msg.keys = [ 'node-trace-key' ];
  const sendBegan = Date.now();
  const sent = await withTimeout(producer.send(msg), args.stepTimeoutMs, 'send');
  const sendCost = Date.now() - sendBegan;
  log('sent', sent.msgId, 'to', sent.messageQueue.brokerName, 'status', sent.sendStatus);

  const consumed = {};
  const consumer = new Consumer(Object.assign({}, common, {
    consumerGroup: args.group, instanceName: 'trace-writer-consumer', consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  }));
  consumer.on('error', err => log('consumer error', err && err.message));
  await withTimeout(consumer.ready(), args.stepTimeoutMs, 'consumer start');
  const done = new Promise(resolve => {
    consumer.subscribe(args.topic, '*', async m => {
      if (m.msgId !== sent.msgId) return;
      consumed.began = Date.now();
      consumed.storeHost = m.storeHost;
      consumed.retry = m.reconsumeTimes;
      await new Promise(r => setTimeout(r, 20));  // the "work"
      consumed.ended = Date.now();
      resolve();
    });
  });
  await withTimeout(done, args.stepTimeoutMs, 'consume the message');
  await withTimeout(consumer.close(), args.stepTimeoutMs, 'consumer close');

  const requestId = 'NODE' + Date.now().toString(16).toUpperCase() + 'REQ';
  const body =
    record([ 'Pub', sendBegan, 'DefaultRegion', producerGroup, args.topic, sent.msgId, 'TagT', 'node-trace-key',
      consumed.storeHost || 'null', Buffer.byteLength('traced by an independent client'), sendCost,
      0, sent.msgId, sent.sendStatus === 'SEND_OK' ]) +
    record([ 'SubBefore', consumed.began, 'DefaultRegion', args.group, requestId, sent.msgId, consumed.retry,
      'node-trace-key' ]) +
    record([ 'SubAfter', requestId, sent.msgId, consumed.ended - consumed.began, true, 'node-trace-key', 0,
      consumed.ended, args.group ]);
  const traceMsg = new Message(args.traceTopic, body);
  traceMsg.keys = [ sent.msgId, 'node-trace-key' ];
  const traceSent = await withTimeout(producer.send(traceMsg), args.stepTimeoutMs, 'send the trace message');
  await withTimeout(producer.close(), args.stepTimeoutMs, 'producer close');

  process.stdout.write(JSON.stringify({
    ok: true, client: 'ali-ons@' + require('ali-ons/package.json').version, msgId: sent.msgId, producerGroup,
    consumerGroup: args.group, sendCost, consumeCost: consumed.ended - consumed.began, storeHost: consumed.storeHost,
    traceStatus: traceSent.sendStatus, traceBody: body,
  }) + '\n', () => process.exit(0));
}

main().catch(err => {
  log('FAILED:', err && err.stack);
  process.stdout.write(JSON.stringify({ ok: false, failure: String(err && err.message) }) + '\n', () => process.exit(2));
});
