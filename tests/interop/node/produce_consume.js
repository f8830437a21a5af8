#!/usr/bin/env node
'use strict';

/*
 * Interop scenario run by tests/interop/test_node_client.py against the real broker, using ali-ons,
 * a pure-JavaScript RocketMQ remoting client written independently of this project.
 *
 *   node produce_consume.js --namesrv 127.0.0.1:9876 --topic T --group G --count 10 [--timeout-ms 90000]
 *                           [--access-key AK --secret-key SK]   (plain ACL: ali-ons signs every request)
 *
 * 1. A producer sends the first half of `count` messages (even index -> TagA, odd -> TagB, key "key-<i>").
 * 2. A clustering push consumer subscribes to TagA (CONSUME_FROM_FIRST_OFFSET) and must receive those.
 * 3. The producer sends the second half while the consumer is long-polling; they must arrive too.
 * 4. The consumer is closed (which commits its offsets and unregisters), then the producer.
 *
 * stdout carries exactly one JSON summary; all diagnostics go to stderr. Exit 0 = every TagA message
 * arrived once and nothing else did; 1 = wrong result; 2 = a step timed out or crashed.
 */

const { Producer, Consumer, Message } = require('ali-ons');

const TOPIC_NOT_EXIST = 17;

function parseArgs(argv) {
  const args = { namesrv: '127.0.0.1:9876', topic: null, group: null, count: 10, timeoutMs: 90000, stepTimeoutMs: 30000, accessKey: null, secretKey: null };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`missing value for ${key}`);
    switch (key) {
      case '--namesrv': args.namesrv = value; break;
      case '--topic': args.topic = value; break;
      case '--group': args.group = value; break;
      case '--count': args.count = parseInt(value, 10); break;
      case '--timeout-ms': args.timeoutMs = parseInt(value, 10); break;
      case '--step-timeout-ms': args.stepTimeoutMs = parseInt(value, 10); break;
      case '--access-key': args.accessKey = value; break;
      case '--secret-key': args.secretKey = value; break;
      default: throw new Error(`unknown argument ${key}`);
    }
  }
  if (!args.topic || !args.group) throw new Error('--topic and --group are required');
  if (!(args.count >= 2)) throw new Error('--count must be >= 2');
  return args;
}

const args = parseArgs(process.argv.slice(2));
const started = Date.now();
const summary = {
  client: 'ali-ons@' + require('ali-ons/package.json').version,
  namesrv: args.namesrv,
  topic: args.topic,
  group: args.group,
  steps: [],            // [{step, ms}] in completion order
  routeFallbackToDefaultTopic: false,
  sent: [],             // one entry per message sent, in send order
  received: [],         // one entry per message the TagA handler saw, in arrival order
  pulled: [],           // every message the broker returned to a pull, before ali-ons' own tag check
  clientErrors: [],     // errors the client library emitted (some are expected, e.g. QUERY_NOT_FOUND)
  ok: false,
  failure: null,
};

function log(...parts) {
  process.stderr.write(`[interop +${Date.now() - started}ms] ${parts.join(' ')}\n`);
}

let finished = false;
function finish(exitCode, failure) {
  if (finished) return;
  finished = true;
  summary.failure = failure || null;
  summary.ok = exitCode === 0;
  summary.totalMs = Date.now() - started;
  process.stdout.write(JSON.stringify(summary) + '\n', () => process.exit(exitCode));
}

function step(name) {
  summary.steps.push({ step: name, ms: Date.now() - started });
  log('step done:', name);
}

/** Reject after `ms` with a message naming the step, so a hang says where it hung. */
function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([ promise, timeout ]).finally(() => clearTimeout(timer));
}

function recordClientError(source, err) {
  const entry = { source, name: err && err.name, code: err && err.code, message: String(err && err.message).slice(0, 500) };
  summary.clientErrors.push(entry);
  log('client error from', source + ':', JSON.stringify(entry));
}

// ali-ons insists on an HTTP client for the Aliyun address server; with nameSrv set it is never used.
const noHttp = { request: async () => { throw new Error('no HTTP name-server lookup in interop tests'); } };

const commonOptions = {
  httpclient: noHttp,
  nameSrv: args.namesrv,
  clientIP: '127.0.0.1',
  // without accessKey/secretKey: plain open-source RocketMQ, no request signing
};
if (args.accessKey && args.secretKey) {
  Object.assign(commonOptions, { accessKey: args.accessKey, secretKey: args.secretKey });
}

function messageFor(index) {
  const tag = index % 2 === 0 ? 'TagA' : 'TagB';
  const body = `interop-body-${index}-${tag}-` + 'x'.repeat(index % 7);
  const msg = new Message(args.topic, tag, body);
  msg.keys = [ `key-${index}` ];
  return { msg, tag, key: `key-${index}`, body };
}

/**
 * ali-ons throws on TOPIC_NOT_EXIST from the name server instead of falling back to the auto-create
 * route of TBW102 as Java clients do. Prime that Java-style fallback once, through its own route refresh.
 */
async function primeRouteIfMissing(producer) {
  try {
    await producer._mqClient.updateTopicRouteInfoFromNameServer(args.topic);
  } catch (err) {
    if (err && err.code === TOPIC_NOT_EXIST) {
      log('topic has no route yet; using the TBW102 default route (broker auto-creates the topic)');
      summary.routeFallbackToDefaultTopic = true;
      await producer._mqClient.updateTopicRouteInfoFromNameServer(args.topic, true, producer);
      return;
    }
    throw err;
  }
}

async function sendRange(producer, from, to) {
  for (let i = from; i < to; i++) {
    const { msg, tag, key, body } = messageFor(i);
    const result = await withTimeout(producer.send(msg), args.stepTimeoutMs, `send message ${i}`);
    summary.sent.push({
      index: i, tag, key, body,
      msgId: result.msgId,
      status: result.sendStatus,
      queueId: Number(result.messageQueue && result.messageQueue.queueId),
      queueOffset: result.queueOffset,
    });
  }
}

/**
 * ali-ons re-checks tags on the client, so the handler alone cannot show whether the broker filtered.
 * Record what each pull returned, to check the broker's own tag filtering.
 */
function observePulls(consumer) {
  const client = consumer._mqClient;
  const original = client.pullMessage;
  client.pullMessage = async function(brokerAddr, requestHeader, timeoutMillis) {
    const result = await original.call(this, brokerAddr, requestHeader, timeoutMillis);
    for (const msg of result.msgFoundList || []) {
      summary.pulled.push({ topic: msg.topic, queueId: msg.queueId, queueOffset: msg.queueOffset, tags: msg.tags, msgId: msg.msgId });
    }
    return result;
  };
}

function expectedTagAIds() {
  return new Set(summary.sent.filter(s => s.tag === 'TagA').map(s => s.msgId));
}

/** Resolve when every TagA message sent so far has been received (polling is fine: tiny volumes). */
function waitForAllTagA(what) {
  return withTimeout(new Promise(resolve => {
    const check = () => {
      const got = new Set(summary.received.map(r => r.msgId));
      for (const id of expectedTagAIds()) {
        if (!got.has(id)) return setTimeout(check, 50);
      }
      resolve();
    };
    check();
  }), args.stepTimeoutMs, what);
}

async function main() {
  const watchdog = setTimeout(() => {
    finish(2, `overall timeout of ${args.timeoutMs} ms exceeded; last step: ` +
      JSON.stringify(summary.steps[summary.steps.length - 1] || null));
  }, args.timeoutMs);
  watchdog.unref();

  const producer = new Producer(Object.assign({}, commonOptions, {
    producerGroup: `${args.group}_PRODUCER`,
    instanceName: 'interop-producer',
    retryTimesWhenSendFailed: 1,
  }));
  producer.on('error', err => recordClientError('producer', err));
  await withTimeout(producer.ready(), args.stepTimeoutMs, 'producer start');
  step('producer started');

  await withTimeout(primeRouteIfMissing(producer), args.stepTimeoutMs, 'topic route lookup');
  const firstHalf = Math.floor(args.count / 2);
  await sendRange(producer, 0, firstHalf);
  step(`sent ${firstHalf} messages before the consumer started`);

  const consumer = new Consumer(Object.assign({}, commonOptions, {
    consumerGroup: args.group,
    instanceName: 'interop-consumer',
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    persistConsumerOffsetInterval: 2000,
  }));
  consumer.on('error', err => recordClientError('consumer', err));
  observePulls(consumer);
  await withTimeout(consumer.ready(), args.stepTimeoutMs, 'consumer start');
  consumer.subscribe(args.topic, 'TagA', async msg => {
    summary.received.push({
      msgId: msg.msgId,
      topic: msg.topic,
      tags: msg.tags,
      keys: msg.keys,
      body: msg.body ? msg.body.toString('utf8') : null,
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      commitLogOffset: msg.commitLogOffset,
      reconsumeTimes: msg.reconsumeTimes,
      bornHost: msg.bornHost,
      storeHost: msg.storeHost,
      receivedMs: Date.now() - started,
    });
  });
  step('consumer subscribed to TagA');

  await waitForAllTagA('receive the TagA messages sent before the consumer started');
  step('received the first TagA messages');

  await sendRange(producer, firstHalf, args.count);
  step(`sent ${args.count - firstHalf} messages while the consumer was running`);
  await waitForAllTagA('receive the TagA messages sent while the consumer was running (long polling)');
  step('received all TagA messages');

  // A short grace period shows duplicates or TagB deliveries that would otherwise race the close.
  await new Promise(resolve => setTimeout(resolve, 500));
  await withTimeout(consumer.close(), args.stepTimeoutMs, 'consumer close (commits offsets, unregisters)');
  step('consumer closed');
  await withTimeout(producer.close(), args.stepTimeoutMs, 'producer close');
  step('producer closed');

  const expected = expectedTagAIds();
  const receivedIds = summary.received.map(r => r.msgId);
  const problems = [];
  if (receivedIds.length !== new Set(receivedIds).size) problems.push('duplicate deliveries');
  const unexpected = summary.received.filter(r => !expected.has(r.msgId) || r.tags !== 'TagA');
  if (unexpected.length) problems.push(`unexpected deliveries: ${JSON.stringify(unexpected)}`);
  if (summary.sent.some(s => s.status !== 'SEND_OK')) problems.push('a send did not return SEND_OK');
  finish(problems.length ? 1 : 0, problems.join('; ') || null);
}

process.on('unhandledRejection', err => recordClientError('unhandledRejection', err));
main().catch(err => {
  log('FAILED:', err && err.stack);
  finish(2, String(err && err.message));
});
