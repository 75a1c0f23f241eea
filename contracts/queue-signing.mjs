// The queue message signature as the TypeScript producer makes it (spec: "Message authentication",
// queues-adapter.ts): every field but `signature`, as Object.entries sorted by key, JSON.stringify'd,
// HMAC-SHA256 keyed by ERMIS_QUEUE_SIGNING_SECRET, hex; verification is timingSafeEqual after a
// length check. This is the reference the Python side (lib/queues/signing.py) is tested against.
//
//   node contracts/queue-signing.mjs vectors   writes queue-signing-vectors.json's text to stdout
//   node contracts/queue-signing.mjs lines     reads lines {secret, message: <JSON text>, signature?}
//                                              and answers each with {signingInput, signature, verified}
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createInterface } from 'node:readline';

export function signingInput(message) {
  const entries = Object.entries(message)
    .filter(([key]) => key !== 'signature')
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify(entries);
}

export function sign(message, secret) {
  return createHmac('sha256', secret).update(signingInput(message)).digest('hex');
}

export function verify(message, secret) {
  const expected = Buffer.from(sign(message, secret));
  const presented = Buffer.from(typeof message.signature === 'string' ? message.signature : '');
  return presented.length === expected.length && timingSafeEqual(presented, expected);
}

const VECTOR_SECRET = 'ermis-queue-signing-test-vectors';
const SIGNED_AT = 1764928800000;

// [class, message as JSON text]. The texts spell numbers the way producers do (-3.0, 1E-07, -0):
// each side parses the text with its own JSON parser, signs, and must write the same input.
const SIGNED = [
  ['the rss.ingest message', `{"batchId":"6f1c2d9e-8a41-4c3e-9b7a-2f5d8e0c1a34","sourceId":"all-sources","feedUrl":"","requestedAt":"2026-12-05T10:00:00.000Z","signedAt":${SIGNED_AT}}`],
  ['strings: escapes', String.raw`{"quote":"say \"hi\"","backslash":"C:\\path","short":"\b\f\n\r\t","control":"\u0000\u0001\u001f","del":"\u007f","separators":"\u2028\u2029"}`],
  ['strings: unicode and astral characters', String.raw`{"greek":"Ελληνικά","combining":"e\u0301","emoji":"📰 \ud83d\ude80","cjk":"新聞"}`],
  ['strings: lone surrogates', String.raw`{"high":"\ud800","low":"\udc00","inside":"a\udbffb","reversed":"\udc00\ud800","\udfff":"key"}`],
  ['keys: sorted by UTF-16 code units', String.raw`{"b":1,"a":2,"10":3,"2":4,"":5,"é":6,"\ue000":7,"😀":8,"B":9}`],
  ['nested objects: JavaScript property order', `{"nested":{"b":1,"a":2,"10":3,"2":4,"-1":5,"01":6,"4294967295":7,"4294967294":8,"1.5":9}}`],
  ['integers', `{"zero":0,"negativeZero":-0,"small":42,"negative":-42,"maxSafe":9007199254740991,"minSafe":-9007199254740991}`],
  ['floats: exponent form', `{"tiny":1e-7,"upper":1E-07,"ratio":1.5e-10,"huge":1e21,"max":1.7976931348623157e308,"denormal":5e-324,"big":1e300}`],
  ['floats: plain form', `{"fiveZeros":0.00001,"sixZeros":0.000001,"tenth":0.1,"decimal":123.456,"e20":1e20,"negative":-0.5}`],
  ['floats: integral', `{"negativeThree":-3.0,"two":2.0,"hundred":1.0e2,"large":123456789012.0}`],
  ['floats: negative zero', `{"score":-0.0}`],
  ['floats: shortest round-trip digits', `{"sum":0.30000000000000004,"third":0.3333333333333333,"small":2.5e-8,"pi":3.141592653589793}`],
  ['arrays, null and booleans', `{"empty":[],"mixed":[null,true,false,"x",1,1.5],"object":{},"deep":[[[{"k":[0.1]}]]]}`],
];

// [class, message text, field, reason]: what a producer following the contract refuses to sign,
// because JavaScript cannot hold the value (it would sign another) or JSON cannot carry it. The
// NaN and Infinity texts are not JSON: they are what Python's json module (and lenient parsers) read.
const REFUSED = [
  ['integers beyond ±(2**53-1)', '{"count":9007199254740993}', 'count', 'integer beyond ±(2**53-1)'],
  ['integers beyond ±(2**53-1)', '{"offset":-9007199254740992}', 'offset', 'integer beyond ±(2**53-1)'],
  ['integers beyond ±(2**53-1), nested', '{"stats":{"values":[1,18446744073709551616]}}', 'stats.values[1]', 'integer beyond ±(2**53-1)'],
  ['not finite', '{"score":NaN}', 'score', 'not a finite number'],
  ['not finite', '{"ratio":Infinity}', 'ratio', 'not a finite number'],
  ['not finite', '{"ratio":-Infinity}', 'ratio', 'not a finite number'],
];

function vectors() {
  return {
    description:
      'Queue message signing vectors, made by Node with the TypeScript rule (contracts/queue-signing.mjs). ' +
      'Parse each message with your JSON parser, compute the signing input and the HMAC-SHA256 under ' +
      '`secret`, and compare both. Messages under `refused` must be refused by a producer, naming the field.',
    rule: "JSON.stringify(Object.entries(message).filter(([k]) => k !== 'signature').sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))",
    secret: VECTOR_SECRET,
    vectors: SIGNED.map(([kind, text]) => {
      const message = JSON.parse(text);
      return { class: kind, message: text, signingInput: signingInput(message), signature: sign(message, VECTOR_SECRET) };
    }),
    refused: REFUSED.map(([kind, text, field, reason]) => ({ class: kind, message: text, field, reason })),
  };
}

async function answerLines() {
  for await (const line of createInterface({ input: process.stdin })) {
    const { secret, message: text, signature } = JSON.parse(line);
    const message = JSON.parse(text);
    const verified = signature === undefined ? null : verify({ ...message, signature }, secret);
    process.stdout.write(`${JSON.stringify({ signingInput: signingInput(message), signature: sign(message, secret), verified })}\n`);
  }
}

const mode = process.argv[2];
if (mode === 'vectors') process.stdout.write(`${JSON.stringify(vectors(), null, 2)}\n`);
else if (mode === 'lines') await answerLines();
else if (mode !== undefined) {
  process.stderr.write('usage: node contracts/queue-signing.mjs vectors|lines\n');
  process.exit(2);
}
