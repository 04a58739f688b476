'use strict'
/*
 * KafkaJS against kafkalog serve: tests/test_broker_kafkajs.py runs this script once with a list of steps.
 *
 * Input (stdin, JSON): {"brokers": ["host:port"], "steps": [step, ...]}
 * Output (stdout, JSON): {"codecs": {codec: null | "why it is unavailable"}, "results": [result, ...]}
 * Bytes travel as base64 strings (null stays null), offsets and timestamps as decimal strings, so nothing is
 * lost to JSON numbers. KafkaJS's own log goes to stderr. A failing step fails the whole run (exit code 1,
 * the error on stderr): the test reports it rather than guessing.
 *
 * Steps:
 *   {"op": "produce", "topic", "codec", "acks", "idempotent", "sends": [[message, ...], ...]}
 *       one producer; each inner list is one producer.send() (one batch per partition);
 *       message = {"key", "value", "headers": [[name, value], ...], "timestamp"?, "partition"?}
 *       -> {"sends": [[{"partition", "baseOffset", "errorCode", "logAppendTime"}, ...], ...]}
 *       with "expectError": true the first failing send ends the step -> {"error": {"name", "type"}}, and
 *       KafkaJS's log lines meanwhile are marked "(expected)"
 *   {"op": "consume", "topic", "partition", "from": "earliest" | "latest" | "offset", "offset"?, "count",
 *    "group", "timeoutMs"?, "produceAfterFirstFetch"?: produce-step}
 *       a group consumer; "offset" seeks with consumer.seek(); "latest" starts at the log end and, once the
 *       first fetch has answered (the position is resolved), runs the given produce step
 *       -> {"records": [{"offset", "key", "value", "headers", "timestamp"}], "produced"?: produce-result}
 *       "maxBytes" caps both the request's and each partition's max bytes; "commit": true commits every
 *       processed offset (autoCommit) and pauses the partition once "count" records were processed
 *   {"op": "createTopic", "topic", "partitions"?, "configs"?: {name: value}}   -> {"created": true}
 *   {"op": "offsets", "topic", "timestamp"?}
 *       admin.fetchTopicOffsets and, with a timestamp, admin.fetchTopicOffsetsByTimestamp
 *       -> {"offsets": [{"partition", "low", "high"}], "byTimestamp"?: [{"partition", "offset"}]}
 */

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')

const CODEC_TYPES = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
}

/** Install the codec plugins that loaded; report why the others are unavailable. */
function installCodecs() {
  const unavailable = { none: null, gzip: null }
  const plugins = {
    snappy: ['kafkajs-snappy', m => m],
    lz4: ['kafkajs-lz4', M => new M().codec],
    zstd: ['@kafkajs/zstd', m => m()],
  }
  for (const [codec, [pkg, make]] of Object.entries(plugins)) {
    try {
      CompressionCodecs[CODEC_TYPES[codec]] = make(require(pkg))
      unavailable[codec] = null
    } catch (e) {
      unavailable[codec] = `${pkg} did not load: ${String(e.message).split('\n')[0]}`
    }
  }
  return unavailable
}

const toBuffer = b64 => (b64 === null || b64 === undefined ? null : Buffer.from(b64, 'base64'))
const toBase64 = buf => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))

function kafkaMessage(m) {
  const headers = {}
  for (const [name, value] of m.headers || []) {
    const v = toBuffer(value)
    if (name in headers) headers[name] = [].concat(headers[name], v)
    else headers[name] = v
  }
  const out = { key: toBuffer(m.key), value: toBuffer(m.value), headers }
  if (m.timestamp !== undefined) out.timestamp = String(m.timestamp)
  if (m.partition !== undefined) out.partition = m.partition
  return out
}

function recordOf(message) {
  const headers = []
  for (const [name, value] of Object.entries(message.headers || {})) {
    for (const v of Array.isArray(value) ? value : [value]) headers.push([name, toBase64(v)])
  }
  return {
    offset: message.offset,
    key: toBase64(message.key),
    value: toBase64(message.value),
    headers,
    timestamp: message.timestamp,
  }
}

let expectingErrors = false // a produce step that expects the broker to refuse it is running

async function produce(kafka, step) {
  const producer = kafka.producer({
    idempotent: !!step.idempotent,
    maxInFlightRequests: step.idempotent ? 1 : undefined,
    allowAutoTopicCreation: true,
  })
  await producer.connect()
  expectingErrors = !!step.expectError
  try {
    const sends = []
    for (const messages of step.sends) {
      let metadata
      try {
        metadata = await producer.send({
          topic: step.topic,
          acks: step.acks,
          compression: CODEC_TYPES[step.codec],
          messages: messages.map(kafkaMessage),
        })
      } catch (e) {
        if (!step.expectError) throw e
        return { sends, error: { name: e.name, type: e.type || null } }
      }
      sends.push(
        metadata.map(m => ({
          partition: m.partition,
          baseOffset: m.baseOffset,
          errorCode: m.errorCode,
          logAppendTime: m.logAppendTime,
        }))
      )
    }
    return { sends }
  } finally {
    expectingErrors = false
    await producer.disconnect()
  }
}

async function consume(kafka, step) {
  const consumer = kafka.consumer({
    groupId: step.group,
    maxWaitTimeInMs: 200,
    maxBytes: step.maxBytes,
    maxBytesPerPartition: step.maxBytes,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    retry: { retries: 3 },
  })
  const records = []
  let produced
  let resolveDone
  let rejectDone
  const done = new Promise((resolve, reject) => {
    resolveDone = resolve
    rejectDone = reject
  })
  const timer = setTimeout(
    () => rejectDone(new Error(`consume ${step.topic} from ${step.from}: ${records.length} of ${step.count} records`)),
    step.timeoutMs || 20000
  )
  let firstFetch = true
  consumer.on(consumer.events.FETCH, () => {
    if (!firstFetch) return
    firstFetch = false
    if (step.produceAfterFirstFetch) {
      produce(kafka, step.produceAfterFirstFetch).then(r => {
        produced = r
      }, rejectDone)
    }
  })
  consumer.on(consumer.events.CRASH, e => rejectDone(e.payload.error))
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [step.topic], fromBeginning: step.from !== 'latest' })
    await consumer.run({
      autoCommit: !!step.commit,
      autoCommitThreshold: step.commit ? 1 : undefined,
      eachMessage: async ({ topic, partition, message }) => {
        if (partition !== step.partition) return
        records.push(recordOf(message))
        if (records.length === step.count) {
          if (step.commit) consumer.pause([{ topic, partitions: [partition] }])
          resolveDone()
        }
      },
    })
    if (step.from === 'offset') consumer.seek({ topic: step.topic, partition: step.partition, offset: step.offset })
    await done
    // a record past the expected count would be a bug (a duplicate or a record that should not be there)
    await new Promise(resolve => setTimeout(resolve, 300))
  } finally {
    clearTimeout(timer)
    await consumer.disconnect()
  }
  const result = { records }
  if (produced) result.produced = produced
  return result
}

async function offsets(kafka, step) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const result = { offsets: await admin.fetchTopicOffsets(step.topic) }
    result.offsets = result.offsets.map(o => ({ partition: o.partition, low: o.low, high: o.high }))
    if (step.timestamp !== undefined) {
      result.byTimestamp = await admin.fetchTopicOffsetsByTimestamp(step.topic, Number(step.timestamp))
    }
    return result
  } finally {
    await admin.disconnect()
  }
}

async function createTopic(kafka, step) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const configEntries = Object.entries(step.configs || {}).map(([name, value]) => ({ name, value }))
    const created = await admin.createTopics({
      topics: [{ topic: step.topic, numPartitions: step.partitions || 1, configEntries }],
    })
    return { created }
  } finally {
    await admin.disconnect()
  }
}

const STEPS = { produce, consume, offsets, createTopic }

function stderrLogger() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    const mark = expectingErrors ? ' (expected)' : ''
    process.stderr.write(`[kafkajs ${label}${mark} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

async function main() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const input = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const codecs = installCodecs()
  const kafka = new Kafka({
    clientId: 'kafkalog-kafkajs-test',
    brokers: input.brokers,
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    retry: { retries: 5, initialRetryTime: 100 },
  })
  const results = []
  for (const step of input.steps) {
    const run = STEPS[step.op]
    if (!run) throw new Error(`unknown step ${step.op}`)
    if (step.codec && codecs[step.codec]) {
      results.push({ skipped: codecs[step.codec] })
      continue
    }
    results.push(await run(kafka, step))
  }
  process.stdout.write(JSON.stringify({ codecs, results }) + '\n')
}

main().catch(e => {
  process.stderr.write(`kafkajs driver failed: ${e && e.stack ? e.stack : e}\n`)
  process.exit(1)
})
