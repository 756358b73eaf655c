#!/usr/bin/python3
"""Reference-client checks of the gateway's AMQP 1.0 port with Qpid Proton.

Run by test/e2e/amqp_clients.sh against a running gateway (README, "Test
it"). Uses Debian's python3-qpid-proton (proton.utils
BlockingConnection, plus SyncRequestResponse) and python3-paho-mqtt for the
cross-protocol checks. Prints one PASS/FAIL/SKIP line per check and exits 1
if any check failed.

    /usr/bin/python3 proton_checks.py --amqp 127.0.0.1:5672 --mqtt 127.0.0.1:1883 \
        --user alice --password secret

--target=broker runs only the pure-AMQP checks that Qpid Proton's example
broker (broker.py, queues only, no SASL PLAIN, no MQTT) can pass; it is how
these checks were validated before the gateway served AMQP.
"""

import argparse
import hashlib
import os
import queue
import signal
import sys
import threading
import time
import traceback
import uuid

from proton import ConnectionException, Data, Delivery, Message, Timeout, symbol
from proton.reactor import LinkOption
from proton.utils import BlockingConnection, LinkDetached, SyncRequestResponse

CLIENT = "python"
CHECK_TIMEOUT = 20  # seconds, per check (watchdog)
T = 5  # seconds, per blocking operation
QUIET = 1.0  # seconds to wait for a message that must not come
RUN = uuid.uuid4().hex[:8]
BASE = "e2e/py/" + RUN

args = None
results = []
checks = []


class CheckFailed(Exception):
    pass


class Skip(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def check(name, gateway_only=False, mqtt=False):
    def register(fn):
        checks.append((name, fn, gateway_only, mqtt))
        return fn
    return register


# --- helpers ---------------------------------------------------------------


class Caps(LinkOption):
    """Sets terminus capabilities: the source's on a receiver, the target's on a sender."""

    def __init__(self, *caps):
        self.caps = caps

    def apply(self, link):
        t = link.source if link.is_receiver else link.target
        d = t.capabilities
        d.put_array(False, Data.SYMBOL)
        d.enter()
        for c in self.caps:
            d.put_symbol(symbol(c))
        d.exit()


TOPIC = Caps("topic")
QUEUE = Caps("queue")


class Conns:
    """Opens BlockingConnections and closes them all at the end of a check."""

    def __init__(self):
        self.open = []
        self.cleanups = []  # callables run after the connections are closed

    def connect(self, user=None, password=None, mechs="ANONYMOUS", **kw):
        host, port = args.amqp.rsplit(":", 1)
        url = "amqp://%s:%s" % (host, port)
        if user is not None:
            kw["user"] = user
            kw["password"] = password
            kw["allow_insecure_mechs"] = True  # PLAIN over plain TCP (test only)
        if mechs:
            kw["allowed_mechs"] = mechs
        c = BlockingConnection(url, timeout=T, container_id="e2e-py-" + uuid.uuid4().hex[:6], **kw)
        self.open.append(c)
        return c

    def connect_unowned(self, **kw):
        """A connection the caller closes (used from another thread)."""
        c = self.connect(**kw)
        self.open.remove(c)
        return c

    def close(self):
        for c in reversed(self.open):
            try:
                c.close()
            except Exception:
                pass
        self.open = []
        for fn in self.cleanups:
            fn()
        self.cleanups = []


def body_bytes(msg):
    """The payload of a received message as bytes, whatever section carried it.

    docs/mapping.md: payload <-> one data section; a text payload (text content
    type / UTF-8 format indicator) may arrive as an amqp-value string (Qpid JMS
    TextMessage)."""
    b = msg.body
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b)
    if isinstance(b, str):
        return b.encode("utf-8")
    raise CheckFailed("unexpected body type %s: %r" % (type(b).__name__, b))


def retain_flag(msg):
    ann = msg.annotations or {}
    return ann.get(symbol("x-opt-retain"), ann.get("x-opt-retain"))


def desc(msg):
    b = msg.body
    if isinstance(b, (bytes, bytearray)) and len(b) > 64:
        b = "<%d bytes>" % len(b)
    return ("Message(to=%r reply_to=%r content_type=%r correlation_id=%r durable=%r ttl=%r "
            "properties=%r annotations=%r body=%r)" % (
                msg.address, msg.reply_to, msg.content_type, msg.correlation_id, msg.durable,
                msg.ttl, msg.properties, msg.annotations, b))


def receive(rcv, what, timeout=T):
    try:
        m = rcv.receive(timeout=timeout)
    except Timeout:
        raise CheckFailed("no message within %gs: %s" % (timeout, what))
    settle(rcv)
    return m


def settle(rcv):
    # a pre-settled delivery (at-most-once) has nothing to accept
    if rcv.fetcher.unsettled:
        rcv.accept()


def expect_nothing(rcv, what, timeout=QUIET):
    try:
        m = rcv.receive(timeout=timeout)
    except Timeout:
        return
    settle(rcv)
    raise CheckFailed("unexpected message (%s): %s" % (what, desc(m)))


def state_name(s):
    return {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
            Delivery.RELEASED: "released", Delivery.MODIFIED: "modified",
            Delivery.RECEIVED: "received", None: "none", 0: "none"}.get(s, str(s))


def send(snd, msg, want=Delivery.ACCEPTED):
    """Sends unsettled and returns the delivery; fails unless the outcome is want."""
    try:
        d = snd.send(msg, timeout=T, error_states=[])
    except Timeout:
        raise CheckFailed("no outcome within %gs for a send to %s" % (T, snd.target.address))
    if d.remote_state != want:
        cond = d.remote.condition
        raise CheckFailed("send to %r: outcome %s%s, want %s" % (
            snd.target.address or msg.address, state_name(d.remote_state),
            " (%s: %s)" % (cond.name, cond.description) if cond else "", state_name(want)))
    return d


def expect_attach_refused(create, what, condition="amqp:not-found"):
    try:
        link = create()
    except LinkDetached as e:
        expect(e.condition == condition,
               "%s: link refused with %r, want %s (%s)" % (what, e.condition, condition, e))
        return str(e)
    except Exception as e:
        raise CheckFailed("%s: want refusal with %s, got %s: %s" % (what, condition, type(e).__name__, e))
    raise CheckFailed("%s: attach succeeded (remote terminus %r), want refusal with %s" % (
        what, (link.remote_target if link.is_sender else link.remote_source).address, condition))


class MQTT:
    """A paho MQTT 5 client on a background thread, messages on a queue."""

    def __init__(self, name):
        import paho.mqtt.client as paho
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        self.paho, self.PacketTypes, self.Properties = paho, PacketTypes, Properties
        host, port = args.mqtt.rsplit(":", 1)
        self.c = paho.Client(client_id="e2e-py-%s-%s" % (name, RUN), protocol=paho.MQTTv5)
        self.msgs = queue.Queue()
        self.acks = {}
        self.connected = threading.Event()
        self.c.on_connect = lambda c, u, f, rc, p=None: self.connected.set()
        self.c.on_message = lambda c, u, m: self.msgs.put(m)
        self.c.on_subscribe = lambda c, u, mid, rc, p=None: self._ack(mid, rc)
        self.c.on_publish = lambda c, u, mid: self._ack(mid, None)
        self.c.connect(host, int(port))
        self.c.loop_start()
        if not self.connected.wait(T):
            raise CheckFailed("MQTT connect to %s timed out" % args.mqtt)

    def _ack(self, mid, rc):
        self.acks.setdefault(mid, threading.Event())
        self.acks[mid].rc = rc
        self.acks[mid].set()

    def _wait(self, mid, what):
        ev = self.acks.setdefault(mid, threading.Event())
        if not ev.wait(T):
            raise CheckFailed("MQTT %s not acknowledged within %gs" % (what, T))
        return ev.rc

    def subscribe(self, topic, qos=1):
        r, mid = self.c.subscribe(topic, qos)
        rc = self._wait(mid, "SUBSCRIBE " + topic)
        expect(rc and all(x.value < 0x80 for x in rc), "MQTT SUBACK for %s: %r" % (topic, rc))

    def props(self, **kw):
        p = self.Properties(self.PacketTypes.PUBLISH)
        for k, v in kw.items():
            setattr(p, k, v)
        return p

    def publish(self, topic, payload, qos=1, retain=False, **props):
        info = self.c.publish(topic, payload, qos=qos, retain=retain,
                              properties=self.props(**props) if props else None)
        if qos > 0:
            self._wait(info.mid, "PUBLISH " + topic)
        return info

    def get(self, what, timeout=T):
        try:
            return self.msgs.get(timeout=timeout)
        except queue.Empty:
            raise CheckFailed("MQTT subscriber got nothing within %gs: %s" % (timeout, what))

    def close(self):
        try:
            self.c.disconnect()
            self.c.loop_stop()
        except Exception:
            pass


def mqtt_props(m):
    p = getattr(m, "properties", None)
    out = {}
    for k in ("ContentType", "CorrelationData", "ResponseTopic", "UserProperty",
              "MessageExpiryInterval", "PayloadFormatIndicator"):
        if p is not None and hasattr(p, k):
            out[k] = getattr(p, k)
    return out


# --- checks ----------------------------------------------------------------


@check("SASL ANONYMOUS connects and sends")
def c_anonymous(cs):
    c = cs.connect(mechs="ANONYMOUS")
    s = c.create_sender(BASE + "/anon", options=TOPIC)
    send(s, Message(body="hello"))


@check("SASL PLAIN with good credentials connects and sends", gateway_only=True)
def c_plain_good(cs):
    c = cs.connect(user=args.user, password=args.password, mechs="PLAIN")
    s = c.create_sender(BASE + "/plain", options=TOPIC)
    send(s, Message(body="hello"))


@check("SASL PLAIN with bad credentials is refused", gateway_only=True)
def c_plain_bad(cs):
    for user, pw in ((args.user, args.password + "-wrong"), ("nobody-" + RUN, args.password)):
        try:
            c = cs.connect(user=user, password=pw, mechs="PLAIN")
        except (ConnectionException, Timeout) as e:
            text = str(e)
            expect("amqp:unauthorized-access" in text,
                   "%s/<bad>: connection failed, but not as an authentication failure: %s" % (user, text))
            continue
        raise CheckFailed("%s with a bad password: connection opened (remote container %r)" % (
            user, c.conn.remote_container))


@check("send/receive on a topic with terminus capability 'topic'; properties survive AMQP->AMQP")
def c_topic_caps(cs):
    t = BASE + "/caps/room1/temp"
    c = cs.connect()
    r = c.create_receiver(t, credit=10, options=TOPIC)
    s = c.create_sender(t, options=TOPIC)
    payload = os.urandom(32) + b"\x00\xff"
    corr = b"\x01corr-" + RUN.encode()
    props = {"unit": "C", "run": RUN}
    send(s, Message(body=payload, inferred=True, content_type="application/octet-stream",
                    correlation_id=corr, properties=props, reply_to=BASE + "/caps/reply"))
    m = receive(r, "message sent on " + t)
    d = desc(m)
    expect(isinstance(m.body, bytes) and m.body == payload, "body differs: " + d)
    expect(m.content_type == "application/octet-stream", "content_type lost: " + d)
    expect(m.correlation_id == corr, "binary correlation_id lost: " + d)
    expect(m.properties == props, "application-properties differ: " + d)
    expect(m.reply_to in (BASE + "/caps/reply", "topic://" + BASE + "/caps/reply"), "reply_to lost: " + d)
    expect(retain_flag(m) is not True, "live message carries x-opt-retain: " + d)

    # a text message (amqp-value string, text content type)
    send(s, Message(body="21.5 °C", content_type="text/plain; charset=utf-8", properties={"unit": "C"}))
    m = receive(r, "text message sent on " + t)
    d = desc(m)
    expect(body_bytes(m) == "21.5 °C".encode(), "text body differs: " + d)
    expect(m.content_type == "text/plain; charset=utf-8", "content_type lost: " + d)
    expect(m.properties == {"unit": "C"}, "application-properties differ: " + d)


@check("string correlation-id survives AMQP->AMQP", gateway_only=True)
def c_corr_string(cs):
    t = BASE + "/corr"
    c = cs.connect()
    r = c.create_receiver(t, credit=10, options=TOPIC)
    s = c.create_sender(t, options=TOPIC)
    send(s, Message(body="x", correlation_id="req-42"))
    m = receive(r, "message sent on " + t)
    expect(m.correlation_id == "req-42", "sent correlation_id 'req-42' (string), received %r (%s)" % (
        m.correlation_id, type(m.correlation_id).__name__))


@check("every AMQP type, header, annotation and property passes AMQP->AMQP unchanged (Proton both ends)",
       gateway_only=True)
def c_typed_unchanged(cs):
    from proton import (UNDESCRIBED, Array, Described, byte, char, decimal32, decimal64, decimal128, float32, int32,
                        short, timestamp, ubyte, uint, ulong, ushort)
    t = BASE + "/typed"
    c = cs.connect()
    r = c.create_receiver(t, credit=100, options=TOPIC)
    s = c.create_sender(t, options=TOPIC)
    values = [
        True, ubyte(200), ushort(60000), uint(4000000000), ulong(2 ** 63), byte(-100), short(-30000),
        int32(-2000000000), -(2 ** 62), float32(1.5), 2.25, decimal32(1), decimal64(2), decimal128(b"\x03" * 16),
        char("é"), timestamp(1714564800500), uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"), symbol("sym"),
        b"\x00\xff", "text", [int32(1), "two", None, True], {"k": "v", symbol("s"): int32(1), 7: [1.5]},
        Array(UNDESCRIBED, Data.INT, 1, 2, 3), Described(symbol("com.example:thing"), ["a", int32(1)]),
        Described(ulong(0x1234), {}),
    ]
    for v in values:
        send(s, Message(body=v))
        m = receive(r, "amqp-value %r on %s" % (v, t))
        expect(m.body == v and type(m.body) is type(v),
               "sent amqp-value %r (%s), received %r (%s)" % (v, type(v).__name__, m.body, type(m.body).__name__))
    msg = Message(body={"k": short(3)}, durable=True, priority=7, id=uuid.UUID(int=5), user_id=b"anonymous",
                  subject="order.created", correlation_id=ulong(42), content_type="application/x-map",
                  content_encoding="gzip", creation_time=1714564800.0, group_id="g", group_sequence=9,
                  reply_to_group_id="rg", annotations={symbol("x-custom"): 5, symbol("x-opt-jms-msg-type"): byte(2)},
                  properties={"i": int32(7), "l": 2 ** 40, "b": True, "f": float32(0.5), "s": "str"})
    send(s, msg)
    m = receive(r, "message with every section on " + t)
    d = desc(m)
    expect(m.body == {"k": short(3)} and type(m.body["k"]) is short, "map body differs: " + d)
    expect(m.durable and m.priority == 7, "header differs: durable=%r priority=%r" % (m.durable, m.priority))
    expect(m.id == uuid.UUID(int=5) and m.user_id == b"anonymous" and m.subject == "order.created"
           and m.correlation_id == 42 and m.content_encoding == "gzip"
           and m.creation_time == 1714564800.0 and m.group_id == "g" and m.group_sequence == 9
           and m.reply_to_group_id == "rg", "properties differ: id=%r user_id=%r subject=%r correlation_id=%r "
           "content_encoding=%r creation_time=%r group_id=%r group_sequence=%r reply_to_group_id=%r" % (
               m.id, m.user_id, m.subject, m.correlation_id, m.content_encoding, m.creation_time, m.group_id,
               m.group_sequence, m.reply_to_group_id))
    expect(m.annotations.get(symbol("x-custom")) == 5 and m.annotations.get(symbol("x-opt-jms-msg-type")) == 2,
           "message annotations differ: %r" % (m.annotations,))
    expect(m.properties == msg.properties and all(type(m.properties[k]) is type(v) for k, v in msg.properties.items()),
           "application-properties differ: %r" % (m.properties,))


@check("send/receive with the topic:// prefix; same topic as capability 'topic'")
def c_topic_prefix(cs):
    t = BASE + "/prefix/a"
    c = cs.connect()
    rp = c.create_receiver("topic://" + t, credit=10)
    rc = None if args.target == "broker" else c.create_receiver(t, credit=10, options=TOPIC)
    sp = c.create_sender("topic://" + t)
    send(sp, Message(body="via-prefix"))
    m = receive(rp, "topic://%s receiver, sent to topic://%s" % (t, t))
    expect(body_bytes(m) == b"via-prefix", "body differs: " + desc(m))
    if rc is None:
        return
    m = receive(rc, "capability-topic receiver on %s, sent to topic://%s" % (t, t))
    expect(body_bytes(m) == b"via-prefix", "body differs: " + desc(m))
    sc = c.create_sender(t, options=TOPIC)
    send(sc, Message(body="via-capability"))
    for r, what in ((rp, "topic:// receiver"), (rc, "capability receiver")):
        m = receive(r, what + ", sent with capability topic")
        expect(body_bytes(m) == b"via-capability", "body differs: " + desc(m))


@check("receiver on wildcard sensors/+/temp", gateway_only=True)
def c_wildcard(cs):
    c = cs.connect()
    r = c.create_receiver("sensors/+/temp", credit=20, options=TOPIC)
    sent = []
    for topic, match in (("sensors/py-%s-a/temp" % RUN, True),
                         ("sensors/py-%s-a/humidity" % RUN, False),
                         ("sensors/py-%s/x/temp" % RUN, False),
                         ("other/py-%s/temp" % RUN, False),
                         ("sensors/py-%s-b/temp" % RUN, True)):
        s = c.create_sender(topic, options=TOPIC)
        send(s, Message(body=topic))
        s.close()
        if match:
            sent.append(topic)
    got = []
    for _ in sent:
        got.append(body_bytes(receive(r, "wildcard receiver, sent %s" % sent)).decode())
    expect(got == sent, "wildcard receiver got %s, want %s" % (got, sent))
    expect_nothing(r, "non-matching topics must not reach sensors/+/temp")


@check("send to a topic with no subscriber is accepted (not released)")
def c_no_subscriber(cs):
    c = cs.connect()
    s = c.create_sender(BASE + "/nobody/listens", options=TOPIC)
    send(s, Message(body="into the void"))
    s2 = c.create_sender("topic://" + BASE + "/nobody/either")
    send(s2, Message(body="into the void", durable=True))


@check("sender attach to queue://nope is refused with amqp:not-found", gateway_only=True)
def c_queue_sender(cs):
    c = cs.connect()
    expect_attach_refused(lambda: c.create_sender("queue://nope-" + RUN), "sender to queue://nope-" + RUN)
    expect_attach_refused(lambda: c.create_sender("nope-" + RUN, options=QUEUE),
                          "sender to nope-%s with capability queue" % RUN)


@check("receiver attach on an unknown queue is refused with amqp:not-found", gateway_only=True)
def c_queue_receiver(cs):
    c = cs.connect()
    expect_attach_refused(lambda: c.create_receiver("nope-" + RUN, options=QUEUE),
                          "receiver on nope-%s with capability queue" % RUN)
    expect_attach_refused(lambda: c.create_receiver("queue://nope-" + RUN), "receiver on queue://nope-" + RUN)


@check("anonymous relay: to=queue://nope rejected amqp:not-found, to=<topic> accepted", gateway_only=True)
def c_anonymous_relay(cs):
    c = cs.connect()
    caps = c.conn.remote_offered_capabilities or []
    expect(symbol("ANONYMOUS-RELAY") in caps, "connection does not offer ANONYMOUS-RELAY: %r" % (caps,))
    s = c.create_sender(None)
    send(s, Message(address="topic://" + BASE + "/relay", body="relayed"))
    d = send(s, Message(address="queue://nope-" + RUN, body="lost?"), want=Delivery.REJECTED)
    cond = d.remote.condition
    expect(cond is not None and cond.name == "amqp:not-found",
           "rejected with condition %r, want amqp:not-found" % (cond and cond.name))


@check("1 MiB message (split over many transfer frames) arrives intact")
def c_large(cs):
    t = BASE + "/large"
    c = cs.connect(max_frame_size=16384)
    r = c.create_receiver(t, credit=2, options=TOPIC)
    s = c.create_sender(t, options=TOPIC)
    payload = os.urandom(1 << 20)
    tr = c.conn.transport
    remote_max = tr.remote_max_frame_size
    # we announce 16 KiB, so the server must split its delivery to us; the
    # gateway announces amqp.maxFrameSize (64 KiB), so we split ours to it
    if args.target == "gateway":
        expect(0 < remote_max < len(payload),
               "gateway max-frame-size %d does not force the 1 MiB message to be split" % remote_max)
    send(s, Message(body=payload, inferred=True, properties={"sha256": hashlib.sha256(payload).hexdigest()}))
    m = receive(r, "1 MiB message on " + t, timeout=15)
    expect(isinstance(m.body, bytes), "body type %s, want bytes (data section)" % type(m.body).__name__)
    expect(len(m.body) == len(payload) and m.body == payload,
           "1 MiB body differs: got %d bytes, sha256 %s, want %s" % (
               len(m.body), hashlib.sha256(m.body).hexdigest()[:16], hashlib.sha256(payload).hexdigest()[:16]))


def dynamic_receiver(c):
    r = c.create_receiver(None, dynamic=True, credit=10)
    addr = r.remote_source.address
    expect(addr, "dynamic receiver: server returned no source address (remote source %r)" % addr)
    return r, addr


@check("request/reply: dynamic reply-to, AMQP responder")
def c_rpc_amqp(cs):
    svc = BASE + "/svc/amqp"
    req_c = cs.connect()
    rsp_c = cs.connect()
    reply_rcv, reply_addr = dynamic_receiver(req_c)
    svc_rcv = rsp_c.create_receiver(svc, credit=10, options=TOPIC)
    req_snd = req_c.create_sender(svc, options=TOPIC)
    corr = b"rpc-" + RUN.encode()
    send(req_snd, Message(body="ping", reply_to=reply_addr, correlation_id=corr))
    req = receive(svc_rcv, "request on " + svc)
    expect(req.reply_to == reply_addr, "request reply_to %r, want the dynamic address %r" % (req.reply_to, reply_addr))
    rsp_snd = rsp_c.create_sender(req.reply_to)
    send(rsp_snd, Message(body="pong:" + body_bytes(req).decode(), correlation_id=req.correlation_id))
    rsp = receive(reply_rcv, "reply on dynamic address %s" % reply_addr)
    expect(body_bytes(rsp) == b"pong:ping", "reply body differs: " + desc(rsp))
    expect(rsp.correlation_id == corr, "reply correlation_id %r, want %r" % (rsp.correlation_id, corr))


@check("request/reply with Proton's SyncRequestResponse (string correlation-id echoed by an AMQP responder)")
def c_rpc_sync(cs):
    svc = BASE + "/svc/sync"
    errs, seen = [], []
    ready = threading.Event()

    def responder():
        # its own BlockingConnection: a Proton container is not shared across threads
        c = None
        try:
            c = cs.connect_unowned()
            r = c.create_receiver(svc, credit=10, options=TOPIC)
            ready.set()
            req = r.receive(timeout=T)
            settle(r)
            seen.append(req.correlation_id)
            s = c.create_sender(req.reply_to)
            s.send(Message(body="pong", correlation_id=req.correlation_id), timeout=T)
        except Exception as e:
            errs.append("responder: %s: %s" % (type(e).__name__, e))
        finally:
            ready.set()
            if c:
                try:
                    c.close()
                except Exception:
                    pass

    th = threading.Thread(target=responder, daemon=True)
    th.start()
    ready.wait(T)
    expect(not errs, "; ".join(errs))
    rpc = SyncRequestResponse(cs.connect(), svc)
    try:
        rsp = rpc.call(Message(body="ping"))
    except Timeout:
        th.join(T)
        raise CheckFailed("SyncRequestResponse.call got no reply with its correlation_id within %gs "
                          "(the responder saw correlation_id %r)%s" % (
                              T, seen[0] if seen else None, "; " + "; ".join(errs) if errs else ""))
    th.join(T)
    expect(not errs, "; ".join(errs))
    expect(body_bytes(rsp) == b"pong", "reply body differs: " + desc(rsp))


@check("request/reply: dynamic reply-to, MQTT responder", gateway_only=True, mqtt=True)
def c_rpc_mqtt(cs):
    svc = BASE + "/svc/mqtt"
    mq = MQTT("responder")
    cs.mqtt = [mq]
    mq.subscribe(svc)
    c = cs.connect()
    reply_rcv, reply_addr = dynamic_receiver(c)
    corr = b"rpc-mqtt-" + RUN.encode()
    snd = c.create_sender(svc, options=TOPIC)
    send(snd, Message(body="ping", reply_to=reply_addr, correlation_id=corr, content_type="text/plain"))
    req = mq.get("request published by AMQP on " + svc)
    p = mqtt_props(req)
    expect(p.get("ResponseTopic") == reply_addr,
           "MQTT responder saw ResponseTopic %r, want the dynamic address %r" % (p.get("ResponseTopic"), reply_addr))
    expect(p.get("CorrelationData") == corr, "MQTT responder saw CorrelationData %r, want %r" % (
        p.get("CorrelationData"), corr))
    mq.publish(p["ResponseTopic"], b"pong:" + req.payload, qos=1, CorrelationData=p["CorrelationData"])
    rsp = receive(reply_rcv, "MQTT reply published to dynamic address %s" % reply_addr)
    expect(body_bytes(rsp) == b"pong:ping", "reply body differs: " + desc(rsp))
    expect(rsp.correlation_id == corr, "reply correlation_id %r, want %r" % (rsp.correlation_id, corr))


@check("MQTT 5 publish -> AMQP receiver (payload, content-type, correlation, user properties, response topic, expiry, QoS)",
       gateway_only=True, mqtt=True)
def c_mqtt_to_amqp(cs):
    t = BASE + "/x/m2a"
    c = cs.connect()
    r = c.create_receiver(t, credit=10, options=TOPIC)
    mq = MQTT("pub")
    cs.mqtt = [mq]
    payload = b"\x00\x01binary\xff"
    mq.publish(t, payload, qos=1, ContentType="application/octet-stream", CorrelationData=b"c-" + RUN.encode(),
               UserProperty=[("unit", "C"), ("run", RUN)], ResponseTopic=BASE + "/x/reply",
               MessageExpiryInterval=60)
    m = receive(r, "MQTT publish on " + t)
    d = desc(m)
    expect(isinstance(m.body, bytes) and m.body == payload, "payload differs: " + d)
    expect(m.content_type == "application/octet-stream", "content-type not mapped: " + d)
    expect(m.correlation_id == b"c-" + RUN.encode(), "correlation data not mapped to binary correlation-id: " + d)
    expect(m.properties == {"unit": "C", "run": RUN}, "user properties not mapped to application-properties: " + d)
    expect(m.reply_to == BASE + "/x/reply", "response topic not mapped to reply-to: " + d)
    expect(m.durable is True, "QoS 1 publish not mapped to header.durable=true: " + d)
    expect(m.ttl and 50 <= m.ttl <= 60, "message expiry 60 s not mapped to header.ttl: " + d)
    expect(retain_flag(m) is not True, "live message carries x-opt-retain: " + d)
    # a text payload
    mq.publish(t, "21.5 °C".encode(), qos=0, ContentType="text/plain", PayloadFormatIndicator=1)
    m = receive(r, "MQTT text publish on " + t)
    expect(body_bytes(m) == "21.5 °C".encode(), "text payload differs: " + desc(m))
    expect(m.content_type == "text/plain", "content-type not mapped: " + desc(m))


@check("AMQP send -> MQTT 5 subscriber (payload, content-type, correlation, properties, reply-to, ttl, durable)",
       gateway_only=True, mqtt=True)
def c_amqp_to_mqtt(cs):
    t = BASE + "/x/a2m"
    mq = MQTT("sub")
    cs.mqtt = [mq]
    mq.subscribe(t, qos=1)
    c = cs.connect()
    s = c.create_sender(t, options=TOPIC)
    payload = b"\x00\x02bin\xfe"
    corr = b"c2-" + RUN.encode()
    send(s, Message(body=payload, inferred=True, durable=True, ttl=60.0, content_type="application/x-test",
                    correlation_id=corr, properties={"unit": "C", "run": RUN}, reply_to=BASE + "/x/back"))
    m = mq.get("AMQP send on " + t)
    p = mqtt_props(m)
    d = "payload=%r qos=%d retain=%d props=%r" % (m.payload, m.qos, m.retain, p)
    expect(m.payload == payload, "payload differs: " + d)
    expect(m.qos == 1, "durable=true not delivered at QoS 1: " + d)
    expect(not m.retain, "live message has RETAIN=1: " + d)
    expect(p.get("ContentType") == "application/x-test", "content-type not mapped: " + d)
    expect(p.get("CorrelationData") == corr, "correlation-id not mapped to correlation data: " + d)
    expect(sorted(p.get("UserProperty", [])) == sorted([("unit", "C"), ("run", RUN)]),
           "application-properties not mapped to user properties: " + d)
    expect(p.get("ResponseTopic") == BASE + "/x/back", "reply-to not mapped to response topic: " + d)
    expect(50 <= p.get("MessageExpiryInterval", 0) <= 60, "ttl 60 s not mapped to message expiry: " + d)
    # an amqp-value string body becomes its UTF-8 bytes
    send(s, Message(body="héllo"))
    m = mq.get("AMQP amqp-value string on " + t)
    expect(m.payload == "héllo".encode(), "amqp-value string not mapped to UTF-8 payload: %r" % m.payload)


@check("retained (MQTT retain=True): late AMQP receiver gets x-opt-retain=true, live message does not",
       gateway_only=True, mqtt=True)
def c_retained_mqtt(cs):
    t = BASE + "/ret/mqtt"
    mq = MQTT("retainer")
    cs.mqtt = [mq]
    mq.publish(t, b"stored-state", qos=1, retain=True)
    c = cs.connect()
    r = c.create_receiver(t, credit=10, options=TOPIC)
    m = receive(r, "retained message for late receiver on " + t)
    expect(body_bytes(m) == b"stored-state", "retained body differs: " + desc(m))
    expect(retain_flag(m) is True, "retained copy lacks x-opt-retain=true: " + desc(m))
    mq.publish(t, b"live", qos=1, retain=False)
    m = receive(r, "live message on " + t)
    expect(body_bytes(m) == b"live", "live body differs: " + desc(m))
    expect(retain_flag(m) is not True, "live message carries x-opt-retain: " + desc(m))
    # a wildcard late receiver sees the stored copy too
    r2 = c.create_receiver(BASE + "/ret/+", credit=10, options=TOPIC)
    m = receive(r2, "retained message for late wildcard receiver on %s/ret/+" % BASE)
    expect(body_bytes(m) == b"stored-state" and retain_flag(m) is True,
           "late wildcard receiver: " + desc(m))
    mq.publish(t, b"", qos=1, retain=True)  # clear


@check("retained (AMQP x-opt-retain=true): live receiver gets it without the flag, late AMQP and MQTT get it flagged",
       gateway_only=True, mqtt=True)
def c_retained_amqp(cs):
    t = BASE + "/ret/amqp"
    c = cs.connect()
    live = c.create_receiver(t, credit=10, options=TOPIC)
    s = c.create_sender(t, options=TOPIC)
    send(s, Message(body="kept", annotations={symbol("x-opt-retain"): True}))
    m = receive(live, "live receiver on " + t)
    expect(body_bytes(m) == b"kept", "live body differs: " + desc(m))
    expect(retain_flag(m) is not True, "live receiver's copy carries x-opt-retain (docs/architecture.md, decision 1): " + desc(m))
    late = c.create_receiver(t, credit=10, options=TOPIC, name="late-" + RUN)  # Proton names links by address
    m = receive(late, "late AMQP receiver on " + t)
    expect(body_bytes(m) == b"kept", "late body differs: " + desc(m))
    expect(retain_flag(m) is True, "late receiver's copy lacks x-opt-retain=true: " + desc(m))
    mq = MQTT("late")
    cs.mqtt = [mq]
    mq.subscribe(t)
    mm = mq.get("late MQTT subscriber on " + t)
    expect(mm.payload == b"kept" and mm.retain, "late MQTT subscriber: payload=%r retain=%r" % (mm.payload, mm.retain))
    send(s, Message(body=b"", inferred=True, annotations={symbol("x-opt-retain"): True}))  # clear


# --- runner ----------------------------------------------------------------


def run_check(name, fn):
    cs = Conns()
    cs.mqtt = []

    def alarm(signum, frame):
        raise CheckFailed("check did not finish within %ds" % CHECK_TIMEOUT)

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CHECK_TIMEOUT)
    t0 = time.time()
    try:
        fn(cs)
        status, detail = "PASS", ""
    except Skip as e:
        status, detail = "SKIP", str(e)
    except CheckFailed as e:
        status, detail = "FAIL", str(e)
    except Exception as e:
        status, detail = "FAIL", "%s: %s" % (type(e).__name__, e)
        if args.verbose:
            traceback.print_exc()
    finally:
        signal.alarm(0)
        for m in cs.mqtt:
            m.close()
        cs.close()
    line = "%s %s: %s" % (status, CLIENT, name)
    if detail:
        line += " -- " + detail
    print(line + " (%.1fs)" % (time.time() - t0), flush=True)
    results.append(status)


def main(selected=None):
    """Runs selected (a list like checks; default: this file's checks)."""
    global args
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--amqp", required=True, help="host:port of the AMQP listener")
    p.add_argument("--mqtt", help="host:port of the MQTT listener (cross-protocol checks)")
    p.add_argument("--admin", help="host:port of the admin API (queue checks, proton_queues.py)")
    p.add_argument("--user", default="alice")
    p.add_argument("--password", default="secret")
    p.add_argument("--target", choices=("gateway", "broker"), default="gateway")
    p.add_argument("--only", help="run only checks whose name contains this text")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    for name, fn, gateway_only, needs_mqtt in (checks if selected is None else selected):
        if args.only and args.only not in name:
            continue
        if gateway_only and args.target != "gateway":
            print("SKIP %s: %s -- needs the gateway" % (CLIENT, name), flush=True)
            continue
        if needs_mqtt and not args.mqtt:
            print("SKIP %s: %s -- no --mqtt given" % (CLIENT, name), flush=True)
            continue
        run_check(name, fn)
    failed = results.count("FAIL")
    print("%s: %d passed, %d failed" % (CLIENT, results.count("PASS"), failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
