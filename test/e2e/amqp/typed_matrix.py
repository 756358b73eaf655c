#!/usr/bin/python3
"""Type-by-type AMQP -> AMQP checks through the gateway, Proton and rhea on
both ends (docs/jms.md; docs/mapping.md, "AMQP -> AMQP").

Run by test/e2e/amqp_clients.sh against running gateways. For every pair
(proton->rhea, rhea->proton, proton->proton, rhea->rhea) a receiver
(proton_typed.py or js/rhea_typed.js) attaches to a topic, a sender sends
a list of messages, and the messages the receiver decoded are compared
with the ones sent, section by section and field by field:

- every amqp-value type (the 22 primitive types, described values, lists,
  maps, arrays), amqp-sequence, one or several data sections;
- every header field, delivery and message annotations, every properties
  field (message-id and correlation-id of each id type), application
  properties of every simple type, footer;
- large bodies (1 MB, 10 MB data; long lists and maps), over several
  receiver max-frame-sizes and on a gateway whose own max-frame-size is
  512 (so the senders split too);
- the same through a queue (on that gateway, with queues.autoCreate): the
  message is stored (core/codec) and read back before it goes out.

Values travel in a neutral notation both scripts read and write:
{"t": type, "v": value}, 64-bit integers and timestamps (ms) as decimal
text, binary and decimals as hex, maps as lists of [key, value], arrays
{"t": "array", "e": element type, "v": [...]}, described values
{"t": "described", "d": descriptor, "v": value}. A section is a described
value (descriptor ulong 0x70 header ... 0x78 footer).

    typed_matrix.py --amqp HOST:PORT --amqp512 HOST:PORT [--only NAME]

Prints one PASS/FAIL line per run, exits 1 if any failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
CLIENTS = {
    "proton": [PY, os.path.join(HERE, "proton_typed.py")],
    "rhea": ["node", os.path.join(HERE, "..", "js", "rhea_typed.js")],
}
RUN = uuid.uuid4().hex[:8]
LIMIT = int(os.environ.get("TYPED_DIFFS", "20"))  # differences printed per run


# --- the neutral notation --------------------------------------------------

def v(t, x=None):
    return {"t": t} if t == "null" else {"t": t, "v": x}


def s(x):
    return v("string", x)


def sym(x):
    return v("symbol", x)


def ul(x):
    return v("ulong", str(x))


def lng(x):
    return v("long", str(x))


def ts(ms):
    return v("timestamp", str(ms))


def b(x):
    return v("binary", x.hex())


def lst(*xs):
    return v("list", list(xs))


def mp(*pairs):
    return v("map", [list(p) for p in pairs])


def described(d, x):
    return {"t": "described", "d": d, "v": x}


def section(code, x):
    return described(ul(code), x)


HEADER, DANN, MANN, PROPS, APROPS, DATA, SEQ, VALUE, FOOTER = range(0x70, 0x79)
# A message with no message-id whose body and fields the neutral core
# message holds (a data section or an amqp-value string, string application
# properties, no priority, subject, ...) is rendered for AMQP receivers
# rather than kept (docs/mapping.md, "AMQP -> AMQP"): its properties gain a
# message-id, to (the topic, which a wildcard receiver needs), creation-time
# and absolute-expiry-time (from a ttl) where it had none. Properties
# fields by index (part 3 section 3.2.4).
RENDERED = (0, 2, 8, 9)
NULL = v("null")

# One value of every AMQP type, the short and long encodings of those that
# have two, described values, lists, maps and arrays.
VALUES = [
    NULL, v("boolean", True), v("boolean", False), v("ubyte", 200), v("ushort", 60000), v("uint", 0),
    v("uint", 7), v("uint", 4000000000), ul(0), ul(9), ul(2 ** 63 + 5), v("byte", -100), v("short", -30000),
    v("int", 5), v("int", -2000000000), lng(-3), lng(-(2 ** 62)), v("float", 1.5), v("double", -2.25),
    v("decimal32", "2200000c"), v("decimal64", "2238000000000001"), v("decimal128", "2208" + "00" * 13 + "1e"),
    v("char", "é"), v("char", "😀"), ts(1714564800500), ts(-1000), v("uuid", "0f8fad5b-d9cb-469f-a165-70867728950e"),
    b(b"\x00\xff"), b(bytes(range(256)) * 2), s(""), s("text é"), s("x" * 300), sym("sym"), sym("s" * 300),
    lst(), lst(v("int", 1), s("two"), NULL, v("boolean", True), lst(ul(3))),
    mp([s("k"), s("v")], [sym("s"), v("int", 1)], [v("int", 7), lst(v("double", 1.5))], [NULL, mp()]),
    v("array", []) | {"e": "int"},
    {"t": "array", "e": "int", "v": [v("int", 1), v("int", -2), v("int", 300)]},
    {"t": "array", "e": "string", "v": [s("a"), s("b" * 300)]},
    {"t": "array", "e": "symbol", "v": [sym("x"), sym("y")]},
    {"t": "array", "e": "ulong", "v": [ul(1), ul(2 ** 64 - 1)]},
    {"t": "array", "e": "boolean", "v": [v("boolean", True), v("boolean", False)]},
    {"t": "array", "e": "double", "v": [v("double", 0.5)]},
    {"t": "array", "e": "binary", "v": [b(b"\x01"), b(b"")]},
    {"t": "array", "e": "list", "v": [lst(s("in"), v("int", 1)), lst()]},
    described(sym("com.example:thing"), lst(s("a"), v("int", 1))),
    described(ul(0x1234), mp()),
    described(sym("outer"), described(sym("inner"), s("x"))),
]

FUTURE = int(time.time() * 1000) + 3600 * 1000


def props(mid=NULL, corr=NULL):
    # message-id user-id to subject reply-to correlation-id content-type
    # content-encoding absolute-expiry-time creation-time group-id
    # group-sequence reply-to-group-id (part 3 §3.2.4)
    return section(PROPS, lst(mid, b(b"anonymous"), NULL, s("order.created"), s("replies/x"), corr,
                              sym("application/x-test"), sym("gzip"), ts(FUTURE), ts(1714564800500), s("g"),
                              v("uint", 9), s("rg")))


def small_cases():
    cases = [[section(VALUE, x)] for x in VALUES]
    cases += [
        [section(SEQ, lst(v("int", 1), s("a")))],
        [section(SEQ, lst(v("int", 1))), section(SEQ, lst()), section(SEQ, lst(mp([s("k"), ul(2)])))],
        [section(DATA, b(b""))],
        [section(DATA, b(b"one"))],
        [section(DATA, b(b"one")), section(DATA, b(b"")), section(DATA, b(bytes(range(256))))],
    ]
    every_prop = mp(*[[s("p%02d" % i), x] for i, x in enumerate(
        [NULL, v("boolean", True), v("ubyte", 1), v("ushort", 2), v("uint", 3), ul(4), v("byte", -5),
         v("short", -6), v("int", -7), lng(-8), v("float", 0.25), v("double", 9.5), v("decimal32", "00000001"),
         v("decimal64", "0000000000000002"), v("decimal128", "00" * 15 + "03"), v("char", "c"), ts(1000),
         v("uuid", "00000000-0000-0000-0000-000000000005"), b(b"\x06"), s("seven"), sym("eight")])])
    ids = [ul(42), v("uuid", "0f8fad5b-d9cb-469f-a165-70867728950e"), b(b"\x01\x02id"), s("ID:req-42")]
    for i, mid in enumerate(ids):
        corr = ids[(i + 1) % len(ids)]
        cases.append([
            section(HEADER, lst(v("boolean", True), v("ubyte", 7), v("uint", 3600000), v("boolean", True),
                                v("uint", 3))),
            section(DANN, mp([sym("x-opt-hop"), s("dropped")])),
            section(MANN, mp([sym("x-custom"), v("int", 5)], [sym("x-opt-jms-msg-type"), v("byte", 2)],
                             [ul(77), lst(s("numeric key"))])),
            props(mid, corr),
            section(APROPS, every_prop),
            section(VALUE, mp([s("k"), v("short", 3)])),
            section(FOOTER, mp([sym("x-digest"), b(b"\x01\x02\x03")], [sym("x-n"), ul(1)])),
        ])
    # A header with nothing but defaults, and none at all.
    cases.append([section(HEADER, lst()), section(VALUE, s("defaults"))])
    cases.append([props(s("only-props"), NULL), section(DATA, b(b"x"))])
    return cases


def large_cases():
    mb = os.urandom(1 << 20)
    return [
        [section(DATA, b(mb))],
        [section(DATA, b(os.urandom(10 << 20)))],
        [section(DATA, b(mb[:1 << 19])), section(DATA, b(mb[1 << 19:]))],
        # Proton's codec (pn_data_t) holds at most 65535 values per message
        [section(VALUE, lst(*[v("int", i) for i in range(60000)]))],
        [section(VALUE, mp(*[[s("k%d" % i), ul(i)] for i in range(30000)]))],
        [section(SEQ, lst(*[s("e%d" % i) for i in range(20000)]))],
    ]


# --- comparison ------------------------------------------------------------

def code_of(sec):
    d = sec.get("d", {})
    return int(d["v"]) if sec.get("t") == "described" and d.get("t") == "ulong" else None


def fields(sec, n):
    xs = list(sec["v"]["v"]) if sec["v"]["t"] == "list" else []
    return xs + [NULL] * (n - len(xs))


def short(x, n=200):
    t = json.dumps(x)
    return t if len(t) <= n else t[:n] + "... (%d chars)" % len(t)


def compare(sent, got, topic):
    """The differences between a sent message and the one received on topic
    (its address)."""
    diff = []
    want = {code_of(x): x for x in sent}
    have = [code_of(x) for x in got]
    # Header (part 3 §3.2.1; docs/mapping.md): durable and priority as
    # sent, ttl the time left, first-acquirer and delivery-count this
    # delivery's (a topic's: first, never delivered before).
    if HEADER in want or HEADER in have:
        if HEADER not in have:
            if any(x != NULL and x != d for x, d in zip(fields(want[HEADER], 5),
                                                          [v("boolean", False), v("ubyte", 4)])):
                diff.append("header missing")
        else:
            h = fields(got[have.index(HEADER)], 5)
            w = fields(want.get(HEADER, section(HEADER, lst())), 5)
            norm = lambda x, d: d if x == NULL else x  # noqa: E731
            if norm(h[0], v("boolean", False)) != norm(w[0], v("boolean", False)):
                diff.append("header durable %s, sent %s" % (short(h[0]), short(w[0])))
            if norm(h[1], v("ubyte", 4)) != norm(w[1], v("ubyte", 4)):
                diff.append("header priority %s, sent %s" % (short(h[1]), short(w[1])))
            if w[2] == NULL and h[2] != NULL:
                diff.append("header ttl %s, sent none" % short(h[2]))
            if w[2] != NULL and not (h[2].get("t") == "uint" and 0 < h[2]["v"] <= w[2]["v"]):
                diff.append("header ttl %s, sent %s" % (short(h[2]), short(w[2])))
            if h[4] not in (NULL, v("uint", 0)):
                diff.append("header delivery-count %s on a topic's first delivery" % short(h[4]))
    if DANN in have:
        diff.append("delivery-annotations passed on (they are for one hop): %s" % short(got[have.index(DANN)]))
    w_props = fields(want[PROPS], 13) if PROPS in want else [NULL] * 13
    rendered = w_props[0] == NULL  # no message-id: see RENDERED
    if MANN in have or MANN in want:
        g = got[have.index(MANN)]["v"]["v"] if MANN in have else []
        w = want[MANN]["v"]["v"] if MANN in want else []
        # the gateway's own: x-opt-jms-dest always, x-opt-jms-msg-type
        # (JMS message type) on a rendered message
        g = [kv for kv in g if kv[0] != sym("x-opt-jms-dest") and not (
            rendered and kv[0] == sym("x-opt-jms-msg-type") and all(k != kv[0] for k, _ in w))]
        if g != w:
            diff.append("message-annotations %s, sent %s" % (short(g), short(w)))
    # The rest is the bare message (part 3 §3.2): exactly as sent, in order,
    # but for what RENDERED says.
    bare = lambda ms: [x for x in ms if code_of(x) not in (HEADER, DANN, MANN)]  # noqa: E731
    gb, wb = bare(got), bare(sent)
    # A kept message whose sender left `to` out gets its topic there (the
    # properties gain a section of their own when there was none), as a
    # rendered one does: docs/mapping.md, "AMQP -> AMQP".
    if gb and code_of(gb[0]) == PROPS:
        g_props = fields(gb[0], 13)
        if w_props[2] == NULL:
            if g_props[2] != s(topic):
                diff.append("properties to %s, want the topic %s" % (short(g_props[2]), topic))
            g_props[2] = NULL
        for i in (RENDERED if rendered else ()):
            if w_props[i] == NULL and g_props[i] != NULL:
                g_props[i] = NULL
        if PROPS in want:
            gb[0] = section(PROPS, v("list", g_props[:len(fields(want[PROPS], 0))]))
        elif g_props == [NULL] * 13:
            gb = gb[1:]
    if len(gb) != len(wb):
        diff.append("bare message has %d sections, sent %d: %s" % (len(gb), len(wb), [code_of(x) for x in gb]))
    for x, y in zip(gb, wb):
        if x != y:
            name = {PROPS: "properties", APROPS: "application-properties", DATA: "data", SEQ: "amqp-sequence",
                    VALUE: "amqp-value", FOOTER: "footer"}.get(code_of(y), "section")
            if code_of(y) == PROPS:
                for i, (fx, fy) in enumerate(zip(fields(x, 13), fields(y, 13))):
                    if fx != fy:
                        diff.append("properties field %d: %s, sent %s" % (i, short(fx), short(fy)))
            else:
                diff.append("%s: %s, sent %s" % (name, short(x), short(y)))
    return diff


# --- runs ------------------------------------------------------------------

def run(name, snd, rcv, addr, cases, max_frame, tmp):
    topic = "e2e/typed/%s/%s" % (RUN, name)
    if "queue" in name:
        topic = "queue://e2e-typed-%s-%s" % (RUN, name)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(cases, f)
    mf = ["--max-frame", str(max_frame)] if max_frame else []
    deadline = 60 + 20 * sum(len(json.dumps(c)) for c in cases) // (10 << 20)
    r = subprocess.Popen(CLIENTS[rcv] + ["recv", "--amqp", addr, "--topic", topic, "--count", str(len(cases))] + mf,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = r.stdout.readline().strip()
        if line != "READY":
            r.kill()
            return ["receiver did not attach: %r %s" % (line, r.stderr.read()[-500:])]
        try:
            subprocess.run(CLIENTS[snd] + ["send", "--amqp", addr, "--topic", topic, "--cases", path] + mf,
                           check=True, timeout=deadline, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            return ["sender failed: %s" % (e.stderr or e.stdout)[-1000:]]
        except subprocess.TimeoutExpired:
            return ["sender took more than %d s" % deadline]
        out, err = r.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        r.kill()
        return ["receiver got nothing more within %d s" % deadline]
    finally:
        if r.poll() is None:
            r.kill()
            r.wait()
    if r.returncode != 0:
        return ["receiver failed (%d): %s" % (r.returncode, err[-1000:])]
    got = json.loads(out)
    diff = []
    for i, (sent, recv) in enumerate(zip(cases, got)):
        for d in compare(sent, recv, topic):
            diff.append("message %d (%s): %s" % (i, short(sent, 120), d))
    if len(got) != len(cases):
        diff.append("received %d messages, sent %d" % (len(got), len(cases)))
    return diff


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--amqp", required=True, help="a gateway with the default amqp.maxFrameSize")
    p.add_argument("--amqp512", required=True, help="a gateway with amqp.maxFrameSize 512 and queues.autoCreate")
    p.add_argument("--only", help="run only the runs whose name contains this")
    a = p.parse_args()
    pairs = [("proton", "rhea"), ("rhea", "proton"), ("proton", "proton"), ("rhea", "rhea")]
    small, large = small_cases(), large_cases()
    runs = []
    for snd, rcv in pairs:
        runs.append(("%s-%s-types" % (snd, rcv), snd, rcv, a.amqp, small, 0))
    # Large bodies: each pair at every receiver max-frame-size (the
    # gateway splits its deliveries to fit), 0 being the client's default.
    for i, mf in enumerate((512, 4096, 65536, 0)):
        for snd, rcv in pairs[i % 2 * 2:i % 2 * 2 + 2]:
            runs.append(("%s-%s-large-frame%d" % (snd, rcv, mf), snd, rcv, a.amqp, large, mf))
    # The gateway's own max-frame-size 512: the senders split too.
    for snd, rcv in pairs:
        runs.append(("%s-%s-gw512" % (snd, rcv), snd, rcv, a.amqp512, small + large[:1] + large[3:4], 512))
    # Through a queue: stored, read back, sent on.
    for snd, rcv in pairs:
        runs.append(("%s-%s-queue" % (snd, rcv), snd, rcv, a.amqp512, small + large, 0))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, snd, rcv, addr, cases, mf in runs:
            if a.only and a.only not in name:
                continue
            start = time.time()
            diff = run(name, snd, rcv, addr, cases, mf, tmp)
            took = time.time() - start
            if diff:
                failed += 1
                print("FAIL typed %s (%d messages, %.1f s)" % (name, len(cases), took))
                for d in diff[:LIMIT]:
                    print("    " + d)
                if len(diff) > LIMIT:
                    print("    ... %d more" % (len(diff) - LIMIT))
            else:
                print("PASS typed %s (%d messages, %.1f s)" % (name, len(cases), took))
            sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
