#!/usr/bin/env node
// One end of the type-by-type AMQP -> AMQP checks, with rhea.
//
// Run by test/e2e/amqp/typed_matrix.py (which pairs it with
// test/e2e/amqp/proton_typed.py, or with itself). Messages are lists of
// sections in the matrix's neutral notation ({t: type, v: value}, see
// typed_matrix.py); this script encodes them with rhea's codec
// (types.Writer) and sends the bytes as they are, or receives deliveries
// as bytes and decodes every section with rhea's codec (types.Reader), so
// that several body sections and every type survive the comparison.
//
//   rhea_typed.js send --amqp HOST:PORT --topic T --cases FILE [--max-frame N]
//   rhea_typed.js recv --amqp HOST:PORT --topic T --count N [--max-frame N]
//
// T is a topic (attached with the capability "topic") or queue://NAME.
//
// recv prints READY when its link is attached, then one JSON line: the
// list of messages received, in order.
'use strict';

const fs = require('fs');
const rhea = require('rhea');

const types = rhea.types;

// rhea's codec keeps one descriptor per value: a described value whose
// value is described again (00 d1 00 d2 v, part 1 §1.2; every described
// amqp-value body is one, the section being the outer) loses the inner
// one both ways. These two keep the whole chain, outer first, for this
// script's writer and reader only (rhea's frames stay as they are).
function writeConstructor(typecode, descriptor) {
  for (const d of Array.isArray(descriptor) ? descriptor : descriptor ? [descriptor] : []) {
    this.write_typecode(0x00);
    this.write(d);
  }
  this.write_typecode(typecode);
}

function readValue(r) {
  const c = r.read_constructor();
  const type = types.by_code[c.typecode];
  let v;
  if (c.typecode >> 4 === 0xc || c.typecode >> 4 === 0xd) { // list or map: read each item the same way
    const n = r.read_size_count(type.width).count;
    const items = [];
    while (items.length < n) items.push(readValue(r));
    v = type.create(items);
  } else {
    v = r.read_value(type);
  }
  if (c.descriptor) v.descriptor = c.descriptors || [c.descriptor];
  return v;
}

const args = {};
for (let i = 3; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const mode = process.argv[2];

const hex = (b) => Buffer.from(b).toString('hex');
const big = (v, signed) => { // 8 bytes, big-endian, for rhea's long types
  const b = Buffer.alloc(8);
  if (signed) b.writeBigInt64BE(BigInt(v)); else b.writeBigUInt64BE(BigInt(v));
  return b;
};
const uuidBytes = (s) => Buffer.from(s.replace(/-/g, ''), 'hex');
const uuidText = (b) => hex(b).replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, '$1-$2-$3-$4-$5');

// Array element constructors: the rhea type whose typecode an array of
// that AMQP type carries (the wide form, as one code serves every element).
const ARRAY = { int: 'Int', string: 'Str32', symbol: 'Sym32', ulong: 'Ulong', boolean: 'Boolean', double: 'Double', list: 'List32', binary: 'Vbin32' };

function toRhea(n) {
  const v = n.v;
  switch (n.t) {
    case 'null': return types.Null();
    case 'boolean': return types.wrap_boolean(v);
    case 'ubyte': return types.Ubyte(v);
    case 'ushort': return types.Ushort(v);
    case 'uint': return types.wrap_uint(v);
    case 'ulong': return types.wrap_ulong(big(v, false));
    case 'byte': return types.Byte(v);
    case 'short': return types.Short(v);
    case 'int': return types.wrap_int(v);
    case 'long': return types.wrap_long(big(v, true));
    case 'float': return types.Float(v);
    case 'double': return types.Double(v);
    case 'decimal32': return types.Decimal32(Buffer.from(v, 'hex'));
    case 'decimal64': return types.Decimal64(Buffer.from(v, 'hex'));
    case 'decimal128': return types.Decimal128(Buffer.from(v, 'hex'));
    case 'char': return types.CharUTF32(v.codePointAt(0));
    case 'timestamp': return types.Timestamp(Number(v));
    case 'uuid': return types.Uuid(uuidBytes(v));
    case 'binary': return types.wrap_binary(Buffer.from(v, 'hex'));
    case 'string': return types.wrap_string(v);
    case 'symbol': return types.wrap_symbol(v);
    case 'list': return v.length === 0 ? types.List0() : types.List32(v.map(toRhea));
    case 'map': return types.Map32(v.flatMap(([k, x]) => [toRhea(k), toRhea(x)]));
    case 'array': {
      const ctor = types[ARRAY[n.e]];
      // raw element values, written with the array's one constructor
      const els = v.map((x) => { const t = toRhea(x); return n.e === 'list' ? t.value : t.value; });
      return types.Array32(els, ctor.typecode);
    }
    case 'described': {
      const t = toRhea(v);
      t.descriptor = [toRhea(n.d)].concat(t.descriptor || []);
      return t;
    }
    default: throw new Error('unknown type ' + n.t);
  }
}

// The AMQP type of each rhea type (its encodings fold into one).
const NAMES = {
  Null: 'null', Boolean: 'boolean', True: 'boolean', False: 'boolean', Ubyte: 'ubyte', Ushort: 'ushort',
  Uint: 'uint', SmallUint: 'uint', Uint0: 'uint', Ulong: 'ulong', SmallUlong: 'ulong', Ulong0: 'ulong',
  Byte: 'byte', Short: 'short', Int: 'int', SmallInt: 'int', Long: 'long', SmallLong: 'long', Float: 'float',
  Double: 'double', Decimal32: 'decimal32', Decimal64: 'decimal64', Decimal128: 'decimal128', CharUTF32: 'char',
  Timestamp: 'timestamp', Uuid: 'uuid', Vbin8: 'binary', Vbin32: 'binary', Str8: 'string', Str32: 'string',
  Sym8: 'symbol', Sym32: 'symbol', List0: 'list', List8: 'list', List32: 'list', Map8: 'map', Map32: 'map',
  Array8: 'array', Array32: 'array',
};

function longText(v, signed) {
  if (Buffer.isBuffer(v)) return (signed ? v.readBigInt64BE() : v.readBigUInt64BE()).toString();
  return BigInt(v).toString();
}

function scalar(name, value) {
  switch (name) {
    case 'null': return { t: name };
    case 'ulong': return { t: name, v: longText(value, false) };
    case 'long': return { t: name, v: longText(value, true) };
    case 'timestamp': return { t: name, v: String(value.getTime()) };
    case 'decimal32': case 'decimal64': case 'decimal128': case 'binary': return { t: name, v: hex(value) };
    case 'uuid': return { t: name, v: uuidText(value) };
    case 'char': return { t: name, v: String.fromCodePoint(value) };
    default: return { t: name, v: value };
  }
}

function fromRhea(o) {
  let n;
  const name = NAMES[o.type.name];
  if (name === undefined) throw new Error('undecodable ' + o.type.name);
  if (name === 'list') {
    n = { t: name, v: o.value.map(fromRhea) };
  } else if (name === 'map') {
    const v = [];
    for (let i = 0; i < o.value.length; i += 2) v.push([fromRhea(o.value[i]), fromRhea(o.value[i + 1])]);
    n = { t: name, v };
  } else if (name === 'array') {
    const et = types.by_code[o.array_constructor.typecode];
    const e = NAMES[et.name];
    n = { t: name, e, v: o.value.map((x) => (x && x.type ? fromRhea(x) : scalar(e, x))) };
  } else {
    n = scalar(name, o.value);
  }
  for (const d of [].concat(o.descriptor || []).reverse()) n = { t: 'described', d: fromRhea(d), v: n };
  return n;
}

function encode(sections) {
  const w = new types.Writer(Buffer.alloc(1 << 16));
  w.write_constructor = writeConstructor;
  for (const s of sections) w.write(toRhea(s));
  return w.toBuffer();
}

function decode(buf) {
  const r = new types.Reader(buf);
  const out = [];
  while (r.remaining()) out.push(fromRhea(readValue(r)));
  return out;
}

const container = rhea.create_container({ id: 'e2e-rhea-typed-' + process.pid });
const opts = { host: args.amqp.split(':')[0], port: Number(args.amqp.split(':')[1]), reconnect: false };
if (args['max-frame']) opts.max_frame_size = Number(args['max-frame']);
// rhea opens its session's incoming window (2048 transfers by default)
// again only when a delivery completes: one delivery of more transfer
// frames than that (10 MB at 4096-byte frames) would wait forever. Room
// for the largest here (10 MB at 512-byte frames).
opts.session_buffer_size = 1 << 16;
const TOPIC = args.topic.startsWith('queue://') ? { address: args.topic } : { address: args.topic, capabilities: ['topic'] };

function fail(why) {
  console.error('rhea_typed ' + mode + ': ' + why);
  process.exit(1);
}

if (mode === 'send') {
  const cases = JSON.parse(fs.readFileSync(args.cases));
  const conn = container.connect(opts);
  const s = conn.open_sender({ target: TOPIC });
  let next = 0;
  let settled = 0;
  const pump = () => {
    // One at a time: each waits for the one before to be accepted.
    if (next === settled && next < cases.length && s.sendable()) {
      s.send(encode(cases[next]), undefined, 0);
      next++;
    }
  };
  s.on('sendable', pump);
  s.on('accepted', () => { settled++; if (settled === cases.length) conn.close(); else pump(); });
  s.on('rejected', (ctx) => fail('message ' + settled + ' rejected: ' + JSON.stringify(ctx.delivery.remote_state)));
  s.on('released', () => fail('message ' + settled + ' released'));
  conn.on('connection_error', (ctx) => fail('connection error ' + ctx.connection.error));
  conn.on('disconnected', (ctx) => { if (settled < cases.length) fail('disconnected: ' + (ctx.error || '')); });
} else {
  const count = Number(args.count);
  const got = [];
  // Keep the bytes of each delivery: rhea decodes a format-0 message into
  // plain JavaScript values, which lose the AMQP types.
  rhea.message.decode = (buf) => ({ raw: Buffer.from(buf) });
  const conn = container.connect(opts);
  const r = conn.open_receiver({ source: TOPIC, credit_window: 50, autoaccept: true });
  r.on('receiver_open', () => console.log('READY'));
  r.on('message', (ctx) => {
    got.push(decode(ctx.message.raw));
    if (got.length === count) {
      process.stdout.write(JSON.stringify(got) + '\n', () => conn.close());
    }
  });
  conn.on('connection_error', (ctx) => fail('connection error ' + ctx.connection.error));
  conn.on('disconnected', (ctx) => { if (got.length < count) fail('disconnected: ' + (ctx.error || '')); });
}
