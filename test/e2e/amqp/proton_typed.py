#!/usr/bin/python3
"""One end of the type-by-type AMQP -> AMQP checks, with Qpid Proton.

Run by test/e2e/amqp/typed_matrix.py (which pairs it with
test/e2e/js/rhea_typed.js, or with itself). Messages are lists of sections,
each a value in the matrix's neutral notation ({"t": type, "v": value},
see typed_matrix.py); this script encodes them with Proton's codec
(proton.Data) and sends the bytes as they are, or receives deliveries and
decodes every section with Proton's codec, so that several body sections
and every field survive the comparison.

    proton_typed.py send --amqp HOST:PORT --topic T --cases FILE [--max-frame N]
    proton_typed.py recv --amqp HOST:PORT --topic T --count N [--max-frame N]

T is a topic (attached with the capability "topic") or queue://NAME.

recv prints READY when its link is attached, then one JSON line: the list
of messages received, in order.
"""

import argparse
import json
import sys
import uuid

from proton import (UNDESCRIBED, Array, Data, Delivery, Described, byte, char, decimal32, decimal64, decimal128,
                    float32, int32, short, symbol, timestamp, ubyte, uint, ulong, ushort)
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption
from proton.utils import BlockingConnection

T = 60  # seconds, per blocking operation (a 10 MB body at 512-byte frames is slow in Python)


class Topic(LinkOption):
    def apply(self, link):
        (link.source if link.is_receiver else link.target).capabilities.put_object(symbol("topic"))


def options(address):
    return None if address.startswith("queue://") else Topic()


SCALARS = {
    "boolean": bool, "ubyte": ubyte, "ushort": ushort, "uint": uint, "byte": byte, "short": short, "int": int32,
    "float": float32, "double": float, "string": str, "symbol": symbol, "char": char,
}
LONGS = {"ulong": ulong, "long": int, "timestamp": timestamp}
ARRAY_CODES = {"int": Data.INT, "string": Data.STRING, "symbol": Data.SYMBOL, "ulong": Data.ULONG,
               "boolean": Data.BOOL, "double": Data.DOUBLE, "list": Data.LIST, "binary": Data.BINARY}


def to_proton(n):
    t, v = n["t"], n.get("v")
    if t == "null":
        return None
    if t in SCALARS:
        return SCALARS[t](v)
    if t in LONGS:
        return LONGS[t](int(v))
    if t == "decimal32":
        return decimal32(int(v, 16))
    if t == "decimal64":
        return decimal64(int(v, 16))
    if t == "decimal128":
        return decimal128(bytes.fromhex(v))
    if t == "uuid":
        return uuid.UUID(v)
    if t == "binary":
        return bytes.fromhex(v)
    if t == "list":
        return [to_proton(x) for x in v]
    if t == "map":
        return {to_proton(k): to_proton(x) for k, x in v}
    if t == "array":
        return Array(UNDESCRIBED, ARRAY_CODES[n["e"]], *[to_proton(x) for x in v])
    if t == "described":
        return Described(to_proton(n["d"]), to_proton(v))
    raise ValueError("unknown type %r" % t)


ARRAY_NAMES = {code: name for name, code in ARRAY_CODES.items()}


def from_proton(o):
    """The neutral notation of a decoded value; the Python class says the AMQP type."""
    if o is None:
        return {"t": "null"}
    for name, cls in (("ulong", ulong), ("timestamp", timestamp)):
        if type(o) is cls:
            return {"t": name, "v": str(int(o))}
    for name, cls in SCALARS.items():
        if type(o) is cls:
            return {"t": name, "v": cls.__base__(o) if cls not in (bool, float, str) else o}
    if type(o) is int:
        return {"t": "long", "v": str(o)}
    if type(o) is decimal32:
        return {"t": "decimal32", "v": "%08x" % int(o)}
    if type(o) is decimal64:
        return {"t": "decimal64", "v": "%016x" % int(o)}
    if type(o) is decimal128:
        return {"t": "decimal128", "v": bytes(o).hex()}
    if isinstance(o, uuid.UUID):
        return {"t": "uuid", "v": str(o)}
    if type(o) is bytes:
        return {"t": "binary", "v": o.hex()}
    if type(o) is list:
        return {"t": "list", "v": [from_proton(x) for x in o]}
    if type(o) is dict:
        return {"t": "map", "v": [[from_proton(k), from_proton(x)] for k, x in o.items()]}
    if isinstance(o, Array):
        return {"t": "array", "e": ARRAY_NAMES.get(o.type, str(o.type)), "v": [from_proton(x) for x in o.elements]}
    if isinstance(o, Described):
        return {"t": "described", "d": from_proton(o.descriptor), "v": from_proton(o.value)}
    raise ValueError("undecodable %r (%s)" % (o, type(o).__name__))


def encode(sections):
    out = b""
    for s in sections:
        d = Data()
        d.put_object(to_proton(s))
        out += d.encode()
    return out


def decode(raw):
    sections = []
    while raw:
        d = Data()
        n = d.decode(raw)
        d.rewind()
        d.next()
        sections.append(from_proton(d.get_object()))
        raw = raw[n:]
    return sections


class Raw:
    """Bytes that BlockingSender.send sends as one delivery (Message.send's way)."""

    def __init__(self, data):
        self.data = data

    def send(self, sender, tag=None):
        dlv = sender.delivery(tag or sender.delivery_tag())
        sender.stream(self.data)
        sender.advance()
        return dlv


def url(a):
    return "amqp://" + a.amqp


def send(a):
    kw = {"max_frame_size": a.max_frame} if a.max_frame else {}
    c = BlockingConnection(url(a), timeout=T, allowed_mechs="ANONYMOUS", **kw)
    try:
        s = c.create_sender(a.topic, options=options(a.topic))
        for i, msg in enumerate(json.load(open(a.cases))):
            d = s.send(Raw(encode(msg)))
            if d.remote_state != Delivery.ACCEPTED:
                sys.exit("message %d: outcome %s, want accepted" % (i, d.remote_state))
    finally:
        c.close()


class Receive(MessagingHandler):
    def __init__(self, a):
        super().__init__(prefetch=50, auto_accept=False)
        self.a, self.got = a, []

    def on_start(self, event):
        kw = {"max_frame_size": self.a.max_frame} if self.a.max_frame else {}
        conn = event.container.connect(url(self.a), allowed_mechs="ANONYMOUS", **kw)
        event.container.create_receiver(conn, self.a.topic, options=options(self.a.topic))

    def on_link_opened(self, event):
        print("READY", flush=True)

    def on_delivery(self, event):
        dlv = event.delivery
        if dlv.partial:
            return
        self.got.append(decode(dlv.link.recv(dlv.pending)))
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        if len(self.got) == self.a.count:
            print(json.dumps(self.got), flush=True)
            event.connection.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["send", "recv"])
    p.add_argument("--amqp", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--cases")
    p.add_argument("--count", type=int)
    p.add_argument("--max-frame", type=int, default=0)
    a = p.parse_args()
    if a.mode == "send":
        send(a)
    else:
        Container(Receive(a)).run()


if __name__ == "__main__":
    main()
