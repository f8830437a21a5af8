#!/usr/bin/env node
'use strict';

/*
 * Retry/DLQ interop scenario run by tests/interop/test_node_retry.py, using ali-ons (an independently
 * written pure-JavaScript RocketMQ client).
 *
 *   node consume_retry.js --namesrv 127.0.0.1:9876 --topic T --group G --plan 0,1,2,always
 *        [--max-reconsume 2] [--timeout-ms 25000] [--grace-ms 2000]
 *
 * One TagA message per --plan entry (index i, body "retry-body-<i>", key "rkey-<i>"). The push
 * consumer's handler throws for message i the first plan[i] times it sees it ("always": every time).
 * ali-ons reacts to a thrown handler by calling CONSUMER_SEND_MSG_BACK (delayLevel 0, its own
 * maxReconsumeTimes); only if that request fails does it resend the message itself, through its inner
 * producer, to %RETRY%<group>. Both paths are recorded so the test can assert which one happened.
 *
 * The scenario is done when every message was delivered as often as the plan says (plan[i] + 1 times,
 * or max-reconsume + 1 times for "always") and every send-back has been answered; a grace period then
 * catches redeliveries that should not happen. stdout carries exactly one JSON summary; diagnostics go
 * to stderr. Exit 0 = the plan was met exactly; 1 = wrong result; 2 = a step timed out or crashed.
 */

const { Producer, Consumer, Message } = require('ali-ons');
const MQProducer = require('ali-ons/lib/producer/mq_producer');

const TOPIC_NOT_EXIST = 17;
const CONSUMER_SEND_MSG_BACK = 36;

function parseArgs(argv) {
  const args = { namesrv: '127.0.0.1:9876', topic: null, group: null, plan: null, maxReconsume: 2,
    timeoutMs: 25000, stepTimeoutMs: 10000, graceMs: 2000 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`missing value for ${key}`);
    switch (key) {
      case '--namesrv': args.namesrv = value; break;
      case '--topic': args.topic = value; break;
      case '--group': args.group = value; break;
      case '--plan': args.plan = value.split(',').map(v => (v === 'always' ? 'always' : parseInt(v, 10))); break;
      case '--max-reconsume': args.maxReconsume = parseInt(value, 10); break;
      case '--timeout-ms': args.timeoutMs = parseInt(value, 10); break;
      case '--step-timeout-ms': args.stepTimeoutMs = parseInt(value, 10); break;
      case '--grace-ms': args.graceMs = parseInt(value, 10); break;
      default: throw new Error(`unknown argument ${key}`);
    }
  }
  if (!args.topic || !args.group || !args.plan) throw new Error('--topic, --group and --plan are required');
  for (const p of args.plan) {
    if (p !== 'always' && !(p >= 0 && p <= args.maxReconsume)) throw new Error(`bad plan entry ${p}`);
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
const started = Date.now();
const summary = {
  client: 'ali-ons@' + require('ali-ons/package.json').version,
  topic: args.topic,
  group: args.group,
  plan: args.plan,
  maxReconsume: args.maxReconsume,
  steps: [],
  sent: [],             // one per message, in send order
  deliveries: [],       // every handler invocation, in arrival order, with its outcome
  sendBacks: [],        // every CONSUMER_SEND_MSG_BACK request ali-ons put on the wire, with the response
  fallbackResends: [],  // messages ali-ons resent itself through its inner producer (send-back failed)
  clientErrors: [],
  ok: false,
  failure: null,
};

function log(...parts) {
  process.stderr.write(`[retry +${Date.now() - started}ms] ${parts.join(' ')}\n`);
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

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([ promise, timeout ]).finally(() => clearTimeout(timer));
}

const INJECTED = 'interop-injected-failure';

function recordClientError(source, err) {
  const message = String(err && err.message);
  // The handler's own injected failures come back as 'error' events; count them, don't log them as noise.
  const entry = { source, name: err && err.name, code: err && err.code, injected: message.includes(INJECTED),
    message: message.slice(0, 500) };
  summary.clientErrors.push(entry);
  if (!entry.injected) log('client error from', source + ':', JSON.stringify(entry));
}

const noHttp = { request: async () => { throw new Error('no HTTP name-server lookup in interop tests'); } };
const commonOptions = { httpclient: noHttp, nameSrv: args.namesrv, clientIP: '127.0.0.1' };

async function primeRouteIfMissing(producer) {
  try {
    await producer._mqClient.updateTopicRouteInfoFromNameServer(args.topic);
  } catch (err) {
    if (err && err.code === TOPIC_NOT_EXIST) {
      await producer._mqClient.updateTopicRouteInfoFromNameServer(args.topic, true, producer);
      return;
    }
    throw err;
  }
}

/** Record every CONSUMER_SEND_MSG_BACK exactly as ali-ons sends it, and the broker's answer. */
function observeSendBacks(consumer) {
  const client = consumer._mqClient;
  const original = client.invoke;
  client.invoke = async function(addr, request, timeoutMillis) {
    if (request.code !== CONSUMER_SEND_MSG_BACK) return original.call(this, addr, request, timeoutMillis);
    const entry = { addr, header: Object.assign({}, request.customHeader), sentMs: Date.now() - started,
      responseCode: null, responseRemark: null, error: null, done: false };
    summary.sendBacks.push(entry);
    try {
      const response = await original.call(this, addr, request, timeoutMillis);
      entry.responseCode = response.code;
      entry.responseRemark = response.remark || null;
      return response;
    } catch (err) {
      entry.error = String(err && err.message).slice(0, 300);
      throw err;
    } finally {
      entry.done = true;
    }
  };
}

/** If a send-back fails ali-ons resends through its inner default producer: record that path too. */
function observeFallbackResends() {
  const inner = MQProducer.defaultProducer;
  if (!inner) return;
  const original = inner.send;
  inner.send = async function(msg, ...rest) {
    summary.fallbackResends.push({ topic: msg.topic, properties: Object.assign({}, msg.properties),
      body: msg.body ? Buffer.from(msg.body).toString('utf8') : null });
    return original.call(this, msg, ...rest);
  };
}

function indexOfBody(body) {
  const m = /^retry-body-(\d+)$/.exec(body || '');
  return m ? parseInt(m[1], 10) : -1;
}

function expectedDeliveries(i) {
  return args.plan[i] === 'always' ? args.maxReconsume + 1 : args.plan[i] + 1;
}

function planMet() {
  const counts = new Map();
  for (const d of summary.deliveries) counts.set(d.index, (counts.get(d.index) || 0) + 1);
  for (let i = 0; i < args.plan.length; i++) {
    if ((counts.get(i) || 0) < expectedDeliveries(i)) return false;
  }
  const failures = summary.deliveries.filter(d => d.outcome === 'thrown').length;
  const answered = summary.sendBacks.filter(s => s.done).length + summary.fallbackResends.length;
  return answered >= failures;
}

function waitFor(predicate, what) {
  return withTimeout(new Promise(resolve => {
    const check = () => (predicate() ? resolve() : setTimeout(check, 50));
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
    producerGroup: `${args.group}_PRODUCER`, instanceName: 'interop-retry-producer', retryTimesWhenSendFailed: 1,
  }));
  producer.on('error', err => recordClientError('producer', err));
  await withTimeout(producer.ready(), args.stepTimeoutMs, 'producer start');
  await withTimeout(primeRouteIfMissing(producer), args.stepTimeoutMs, 'topic route lookup');
  for (let i = 0; i < args.plan.length; i++) {
    const body = `retry-body-${i}`;
    const msg = new Message(args.topic, 'TagA', body);
    msg.keys = [ `rkey-${i}` ];
    const result = await withTimeout(producer.send(msg), args.stepTimeoutMs, `send message ${i}`);
    summary.sent.push({ index: i, body, key: `rkey-${i}`, plan: args.plan[i], msgId: result.msgId,
      status: result.sendStatus, queueId: Number(result.messageQueue && result.messageQueue.queueId),
      queueOffset: result.queueOffset });
  }
  step(`sent ${args.plan.length} messages`);

  const consumer = new Consumer(Object.assign({}, commonOptions, {
    consumerGroup: args.group,
    instanceName: 'interop-retry-consumer',
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    persistConsumerOffsetInterval: 1000,
    maxReconsumeTimes: args.maxReconsume,
    // ali-ons looks up %RETRY%<group> before its first heartbeat (which makes the broker create it), so
    // the first lookup fails; refresh routes and rebalance every second instead of every 30 s / 10 s.
    pollNameServerInteval: 1000,  // sic: ali-ons' spelling
    rebalanceInterval: 1000,
  }));
  consumer.on('error', err => recordClientError('consumer', err));
  observeSendBacks(consumer);
  await withTimeout(consumer.ready(), args.stepTimeoutMs, 'consumer start');
  observeFallbackResends();

  const seen = new Map();  // index -> handler invocations so far
  consumer.subscribe(args.topic, 'TagA', async msg => {
    const body = msg.body ? msg.body.toString('utf8') : null;
    const index = indexOfBody(body);
    const n = (seen.get(index) || 0) + 1;
    seen.set(index, n);
    const plan = args.plan[index];
    const fail = plan === 'always' || (typeof plan === 'number' && n <= plan);
    summary.deliveries.push({
      index, attempt: n, outcome: fail ? 'thrown' : 'consumed', body,
      msgId: msg.msgId, originMessageId: msg.originMessageId || null,
      topic: msg.topic,  // ali-ons resets %RETRY% deliveries to the RETRY_TOPIC property before the handler
      retryTopicProperty: msg.retryTopic || null,
      tags: msg.tags, keys: msg.keys, reconsumeTimes: msg.reconsumeTimes,
      queueId: msg.queueId, queueOffset: msg.queueOffset, commitLogOffset: msg.commitLogOffset,
      properties: Object.assign({}, msg.properties), receivedMs: Date.now() - started,
    });
    if (fail) throw new Error(`${INJECTED} #${n} for message ${index}`);
  });
  step('consumer subscribed to TagA');

  await waitFor(planMet, 'every message delivered as often as the plan says and every send-back answered');
  step('plan met');
  await new Promise(resolve => setTimeout(resolve, args.graceMs));  // redeliveries that must not happen
  step('grace period over');
  await withTimeout(consumer.close(), args.stepTimeoutMs, 'consumer close');
  await withTimeout(producer.close(), args.stepTimeoutMs, 'producer close');
  step('closed');

  const problems = [];
  for (let i = 0; i < args.plan.length; i++) {
    const got = summary.deliveries.filter(d => d.index === i).length;
    if (got !== expectedDeliveries(i)) problems.push(`message ${i} (plan ${args.plan[i]}) delivered ${got} times, expected ${expectedDeliveries(i)}`);
  }
  if (summary.deliveries.some(d => d.index < 0)) problems.push('a delivery with an unknown body');
  if (summary.sent.some(s => s.status !== 'SEND_OK')) problems.push('a send did not return SEND_OK');
  finish(problems.length ? 1 : 0, problems.join('; ') || null);
}

process.on('unhandledRejection', err => recordClientError('unhandledRejection', err));
main().catch(err => {
  log('FAILED:', err && err.stack);
  finish(2, String(err && err.message));
});
