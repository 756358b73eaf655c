#!/usr/bin/python3
"""End-to-end checks of the gateway's MQTT front-end with the reference
Python client (Debian python3-paho-mqtt, written against the 1.6 API).

Run by test/e2e/mqtt_python.sh, which starts the gateway:

    mqtt_python.py --port P --ws-port W --phase main      # everything, and
                                                          # leaves retained
                                                          # state behind
    mqtt_python.py --port P --ws-port W --phase restarted # after a restart
                                                          # on the same data dir

Each check prints PASS or FAIL with detail; the exit status is the number of
failures (capped at 1). Waits are bounded polls; "nothing else arrived" is
proved with a fence: a non-retained marker message published last on the
same connection, so everything sent before it has already arrived.
"""

import argparse
import queue
import socket
import struct
import sys
import time
import traceback

import paho.mqtt
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

TIMEOUT = 10.0  # bound on every wait; a healthy gateway answers in milliseconds

args = None
failures = []


class CheckFailed(Exception):
    pass


def expect(cond, detail):
    if not cond:
        raise CheckFailed(detail)


def check(fn):
    """Runs one check and reports it; a check is a function of no arguments
    that raises CheckFailed (or any error) and may return a detail line."""
    name = fn.__name__
    try:
        detail = fn()
        print("PASS %s%s" % (name, ": " + detail if detail else ""), flush=True)
    except CheckFailed as e:
        failures.append(name)
        print("FAIL %s: %s" % (name, e), flush=True)
    except Exception as e:  # a client error is a failure of the check too
        failures.append(name)
        print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)
        traceback.print_exc(file=sys.stdout)
    return fn


class Client:
    """A connected paho client that queues what it receives."""

    def __init__(self, cid, v5=True, clean=True, session_expiry=None, transport="tcp",
                 will=None, connect=True):
        self.v5 = v5
        kw = {}
        if hasattr(mqtt, "CallbackAPIVersion"):  # paho 2.x keeps the 1.x callbacks on request
            kw["callback_api_version"] = mqtt.CallbackAPIVersion.VERSION1
        self.c = mqtt.Client(client_id=cid, protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
                             clean_session=None if v5 else clean, transport=transport,
                             reconnect_on_failure=False, **kw)
        self.msgs = queue.Queue()
        self.conn = queue.Queue()
        self.subacks = {}
        self.c.on_connect = self._on_connect
        self.c.on_message = lambda c, u, m: self.msgs.put(m)
        self.c.on_subscribe = self._on_subscribe
        if transport == "websockets":
            self.c.ws_set_options(path="/mqtt")
        if will:
            self.c.will_set(**will)
        self.clean, self.session_expiry = clean, session_expiry
        self.port = args.ws_port if transport == "websockets" else args.port
        if connect:
            self.connect()

    def _on_connect(self, c, u, flags, rc, props=None):
        self.conn.put((flags, rc))

    def _on_subscribe(self, c, u, mid, codes, props=None):
        self.subacks[mid] = codes

    def connect(self):
        kw = {}
        if self.v5:
            kw["clean_start"] = self.clean
            if self.session_expiry is not None:
                p = Properties(PacketTypes.CONNECT)
                p.SessionExpiryInterval = self.session_expiry
                kw["properties"] = p
        self.c.connect(args.host, self.port, keepalive=30, **kw)
        self.c.loop_start()
        try:
            flags, rc = self.conn.get(timeout=TIMEOUT)
        except queue.Empty:
            raise CheckFailed("no CONNACK within %ss" % TIMEOUT)
        expect(rc == 0, "CONNACK reason %s" % rc)
        self.session_present = bool(flags.get("session present"))
        return self

    def sub(self, *filters, qos=1, **opts):
        if self.v5:
            topics = [(f, SubscribeOptions(qos=qos, **opts)) for f in filters]
        else:
            topics = [(f, qos) for f in filters]
        rc, mid = self.c.subscribe(topics)
        expect(rc == 0, "subscribe not sent: %s" % rc)
        poll(lambda: mid in self.subacks, "SUBACK for %s" % (filters,))
        for code in self.subacks[mid]:
            value = code.value if hasattr(code, "value") else code
            expect(value < 0x80, "subscription refused: %r" % code)

    def pub(self, topic, payload, qos=1, retain=False, props=None):
        info = self.c.publish(topic, payload, qos=qos, retain=retain, properties=props)
        expect(info.rc == 0, "publish %s not sent: rc %s" % (topic, info.rc))
        if qos > 0:
            poll(info.is_published, "acknowledgement of %s" % topic)
        return info

    def next(self, what="a message"):
        try:
            return self.msgs.get(timeout=TIMEOUT)
        except queue.Empty:
            raise CheckFailed("no %s within %ss" % (what, TIMEOUT))

    def until(self, marker):
        """Everything received before the message on topic marker."""
        got = []
        while True:
            m = self.next("fence message on %s" % marker)
            if m.topic == marker:
                return got
            got.append(m)

    def drop(self):
        """Ends the connection without DISCONNECT, as a crashed device does."""
        self.c.loop_stop()
        s = self.c.socket()
        if s is not None:
            if hasattr(s, "shutdown"):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def poll(cond, what):
    deadline = time.monotonic() + TIMEOUT
    while not cond():
        if time.monotonic() > deadline:
            raise CheckFailed("timed out waiting for %s" % what)
        time.sleep(0.005)


def fence(pub, sub, marker):
    """Publishes marker on pub's connection and returns what sub got first.

    The marker goes at QoS 2: paho hands a QoS 2 message to the application
    at PUBREL, so a QoS 1 marker could overtake a QoS 2 message before it.
    """
    pub.pub(marker, b"fence", qos=2)
    return sub.until(marker)


def show(ms):
    return ", ".join("%s=%r(r%d,q%d)" % (m.topic, m.payload, m.retain, m.qos) for m in ms) or "nothing"


def props(**kv):
    p = Properties(PacketTypes.PUBLISH)
    for k, v in kv.items():
        setattr(p, k, v)
    return p


# ---- retained semantics -------------------------------------------------------

def retained_semantics(v5, tag):
    base = "ret%s" % tag
    early = Client("%s-early" % base, v5=v5)
    early.sub(base + "/#", "%s-fence" % base)
    pub = Client("%s-pub" % base, v5=v5)
    pub.pub(base + "/a", b"one", qos=1, retain=True)
    got = fence(pub, early, "%s-fence" % base)
    expect(len(got) == 1 and got[0].payload == b"one" and not got[0].retain,
           "existing subscriber: want one live copy with RETAIN=0, got %s" % show(got))

    late = Client("%s-late" % base, v5=v5)
    late.sub(base + "/#", "%s-fence" % base)
    got = fence(pub, late, "%s-fence" % base)
    expect(len(got) == 1 and got[0].payload == b"one" and got[0].retain,
           "late subscriber: want the stored copy with RETAIN=1, got %s" % show(got))

    pub.pub(base + "/a", b"two", qos=1, retain=True)  # replaces
    pub.pub(base + "/b", b"bee", qos=0, retain=True)
    pub.pub(base + "/b", b"", qos=1, retain=True)     # empty payload deletes
    for c in (early, late):
        fence(pub, c, "%s-fence" % base)
    late2 = Client("%s-late2" % base, v5=v5)
    late2.sub(base + "/#", "%s-fence" % base)
    got = fence(pub, late2, "%s-fence" % base)
    expect([(m.topic, m.payload, m.retain) for m in got] == [(base + "/a", b"two", 1)],
           "after replace and delete: want only %s/a=two with RETAIN=1, got %s" % (base, show(got)))
    for c in (early, late, late2, pub):
        c.close()


def mqtt311_retained():
    retained_semantics(False, "311")


def mqtt5_retained():
    retained_semantics(True, "5")


def mqtt5_retain_as_published_and_handling():
    pub = Client("rap-pub")
    rap = Client("rap-sub")
    rap.sub("rap/#", "rap-fence", retainAsPublished=True)
    pub.pub("rap/x", b"kept", qos=1, retain=True)
    got = fence(pub, rap, "rap-fence")
    expect(len(got) == 1 and got[0].retain, "Retain-As-Published subscriber: want RETAIN=1, got %s" % show(got))
    rh2 = Client("rap-rh2")
    rh2.sub("rap/#", "rap-fence", retainHandling=2)
    got = fence(pub, rh2, "rap-fence")
    expect(got == [], "Retain Handling 2: want no stored copies, got %s" % show(got))
    rh1 = Client("rap-rh1")
    rh1.sub("rap/#", "rap-fence", retainHandling=1)
    rh1.sub("rap/#", retainHandling=1)  # exists already: no copies this time
    got = fence(pub, rh1, "rap-fence")
    expect(len(got) == 1 and got[0].payload == b"kept",
           "Retain Handling 1: want exactly one stored copy (first SUBSCRIBE only), got %s" % show(got))
    for c in (pub, rap, rh2, rh1):
        c.close()


# ---- will ---------------------------------------------------------------------

def will_retained_to_late_subscriber():
    live = Client("will-live")
    live.sub("will/#")
    dying = Client("will-dying", will=dict(topic="will/dev1", payload=b"gone", qos=1, retain=True))
    dying.drop()
    m = live.next("will message")
    expect(m.topic == "will/dev1" and m.payload == b"gone" and not m.retain,
           "live subscriber: want will/dev1=gone RETAIN=0, got %s" % show([m]))
    late = Client("will-late")
    late.sub("will/#")
    m = late.next("retained will")
    expect(m.topic == "will/dev1" and m.payload == b"gone" and m.retain,
           "late subscriber: want the retained will with RETAIN=1, got %s" % show([m]))
    live.close()
    late.close()


# ---- QoS, overlap, sessions, $-topics --------------------------------------------

def qos_0_1_2_delivery():
    for v5 in (False, True):
        tag = "5" if v5 else "311"
        sub = Client("qos-sub" + tag, v5=v5)
        sub.sub("qos%s/#" % tag, "qos%s-fence" % tag, qos=2)
        pub = Client("qos-pub" + tag, v5=v5)
        for q in (0, 1, 2):
            pub.pub("qos%s/%d" % (tag, q), b"q%d" % q, qos=q)
        got = fence(pub, sub, "qos%s-fence" % tag)
        want = [("qos%s/%d" % (tag, q), b"q%d" % q, q) for q in (0, 1, 2)]
        expect([(m.topic, m.payload, m.qos) for m in got] == want,
               "MQTT %s: want %s, got %s" % (tag, want, show(got)))
        # the delivered QoS is min(published, granted)
        low = Client("qos-low" + tag, v5=v5)
        low.sub("qos%s/#" % tag, "qos%s-fence" % tag, qos=1)
        pub.pub("qos%s/2" % tag, b"again", qos=2)
        got = fence(pub, low, "qos%s-fence" % tag)
        expect([m.qos for m in got] == [1], "QoS 2 publish to a QoS 1 subscription: got %s" % show(got))
        for c in (sub, pub, low):
            c.close()


def mqtt5_overlapping_subscriptions_once():
    sub = Client("ovl-sub")
    sub.sub("ovl/#", "ovl/+", "ovl/x", "ovl-fence", qos=2)
    pub = Client("ovl-pub")
    pub.pub("ovl/x", b"once", qos=1)
    got = fence(pub, sub, "ovl-fence")
    expect(len(got) == 1, "one PUBLISH matched by three filters: want one copy, got %d: %s" % (len(got), show(got)))
    expect(got[0].qos == 1, "want QoS min(1, 2) = 1, got %d" % got[0].qos)
    sub.close()
    pub.close()


def offline_queueing_persistent_session():
    for v5 in (False, True):
        tag = "5" if v5 else "311"
        kw = dict(v5=v5, clean=False, session_expiry=3600 if v5 else None)
        cid = "offline-" + tag
        Client(cid, v5=v5, clean=True).close()  # start from no session
        s = Client(cid, **kw)
        s.sub("off%s/#" % tag, "off%s-fence" % tag, qos=2)
        s.close()
        pub = Client("offline-pub" + tag, v5=v5)
        pub.pub("off%s/1" % tag, b"q1", qos=1)
        pub.pub("off%s/2" % tag, b"q2", qos=2)
        pub.pub("off%s-fence" % tag, b"fence", qos=2)
        s = Client(cid, **kw)
        expect(s.session_present, "MQTT %s: reconnect to a persistent session: session present = 0" % tag)
        # They come back in the order they were published [MQTT-4.6.0-6]
        # (upstream mochi sorted them by creation second, in any order
        # within one; third_party/mochi-mqtt patch 4).
        want = [("off%s/1" % tag, b"q1"), ("off%s/2" % tag, b"q2"), ("off%s-fence" % tag, b"fence")]
        got = [s.next("queued message %d of 3" % (i + 1)) for i in range(3)]
        expect([(m.topic, m.payload) for m in got] == want,
               "MQTT %s: queued QoS 1/2 messages: got %s, want them in publish order" % (tag, show(got)))
        s.close()
        pub.close()
        Client(cid, v5=v5, clean=True).close()


def dollar_topics_not_matched_by_hash():
    wild = Client("dollar-wild")
    wild.sub("#", "+/dollar/#")
    direct = Client("dollar-direct")
    direct.sub("$gw/dollar/#")
    pub = Client("dollar-pub")
    pub.pub("$gw/dollar/x", b"hidden", qos=1)
    m = direct.next("$ message on an explicit $ filter")
    expect(m.topic == "$gw/dollar/x", "explicit $gw/# subscriber got %s" % show([m]))
    got = [m for m in fence(pub, wild, "dollar-fence") if m.topic.startswith("$")]
    expect(got == [], "# and +/... must not match $ topics [MQTT-4.7.2-1], got %s" % show(got))
    for c in (wild, direct, pub):
        c.close()


# ---- MQTT 5 properties ----------------------------------------------------------

def mqtt5_properties_pass_through():
    sub = Client("props-sub")
    sub.sub("props/#", qos=2)
    pub = Client("props-pub")
    for q in (0, 1, 2):
        p = props(ContentType="application/json", ResponseTopic="props/reply",
                  CorrelationData=b"\x00corr%d" % q, PayloadFormatIndicator=1)
        p.UserProperty = ("unit", "C")
        p.UserProperty = ("site", "north")
        pub.pub("props/q%d" % q, b'{"t":1}', qos=q, props=p)
        m = sub.next("QoS %d message with properties" % q)
        mp = m.properties
        expect(getattr(mp, "ContentType", None) == "application/json", "QoS %d content type %r" % (q, getattr(mp, "ContentType", None)))
        expect(getattr(mp, "ResponseTopic", None) == "props/reply", "QoS %d response topic %r" % (q, getattr(mp, "ResponseTopic", None)))
        expect(getattr(mp, "CorrelationData", None) == b"\x00corr%d" % q, "QoS %d correlation data %r" % (q, getattr(mp, "CorrelationData", None)))
        expect(getattr(mp, "PayloadFormatIndicator", None) == 1, "QoS %d payload format %r" % (q, getattr(mp, "PayloadFormatIndicator", None)))
        expect(getattr(mp, "UserProperty", None) == [("unit", "C"), ("site", "north")],
               "QoS %d user properties %r (order must be kept)" % (q, getattr(mp, "UserProperty", None)))
    sub.close()
    pub.close()


def mqtt5_message_expiry():
    pub = Client("exp-pub")
    pub.pub("exp/long", b"long", qos=1, retain=True, props=props(MessageExpiryInterval=100))
    pub.pub("exp/short", b"short", qos=1, retain=True, props=props(MessageExpiryInterval=1))
    t0 = time.monotonic()
    time.sleep(2.2)  # time must pass for an interval to shrink; the checks below do not depend on scheduling
    late = Client("exp-late")
    late.sub("exp/#", "exp-fence")
    got = fence(pub, late, "exp-fence")
    elapsed = time.monotonic() - t0
    expect([m.topic for m in got] == ["exp/long"],
           "want only exp/long (exp/short expired after 1 s), got %s" % show(got))
    left = getattr(got[0].properties, "MessageExpiryInterval", None)
    expect(left is not None and 100 - elapsed - 1.5 <= left <= 98,
           "remaining expiry interval %r after %.1fs; want it decremented from 100 [MQTT-3.3.2-6]" % (left, elapsed))
    pub.close()
    late.close()
    return "remaining interval %s after %.1fs" % (left, elapsed)


# ---- acknowledgements on the wire --------------------------------------------------

def raw_packet(sock):
    def read(n):
        b = b""
        while len(b) < n:
            chunk = sock.recv(n - len(b))
            if not chunk:
                raise CheckFailed("connection closed by the gateway")
            b += chunk
        return b
    first = read(1)[0]
    n, mul = 0, 1
    while True:
        d = read(1)[0]
        n += (d & 0x7F) * mul
        if d & 0x80 == 0:
            break
        mul *= 128
    return first, read(n)


def utf8(s):
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def mqtt5_puback_has_no_echoed_properties():
    # paho 1.6 does not hand acknowledgement properties to the application,
    # so this check speaks MQTT 5 on a plain socket.
    s = socket.create_connection((args.host, args.port), timeout=TIMEOUT)
    try:
        body = utf8("MQTT") + bytes([5, 0x02]) + struct.pack("!H", 30) + b"\x00" + utf8("ack-raw")
        s.sendall(bytes([0x10, len(body)]) + body)
        typ, b = raw_packet(s)
        expect(typ == 0x20 and b[1] == 0, "CONNACK %#x %s" % (typ, b.hex()))
        user = b"\x26" + utf8("echo") + utf8("me")
        for qos, want in ((1, 0x40), (2, 0x50)):
            pid = 10 + qos
            pk = utf8("ack/raw") + struct.pack("!H", pid) + bytes([len(user)]) + user + b"payload"
            s.sendall(bytes([0x30 | qos << 1, len(pk)]) + pk)
            typ, b = raw_packet(s)
            expect(typ == want, "QoS %d: want ack type %#x, got %#x" % (qos, want, typ))
            expect(b[:2] == struct.pack("!H", pid), "QoS %d: ack for packet id %s" % (qos, b[:2].hex()))
            # remaining length 2 (success), 3 (reason code) or 4 (reason code,
            # empty properties): anything longer carries properties
            expect(len(b) <= 3 or (len(b) == 4 and b[3] == 0),
                   "QoS %d: acknowledgement carries properties: %s" % (qos, b.hex()))
            if qos == 2:
                s.sendall(bytes([0x62, 2]) + struct.pack("!H", pid))  # PUBREL
                typ, b = raw_packet(s)
                expect(typ == 0x70 and len(b) <= 3, "PUBCOMP %#x %s" % (typ, b.hex()))
        s.sendall(b"\xe0\x00")
    finally:
        s.close()


# ---- websocket ------------------------------------------------------------------

def websocket_transport():
    if not args.ws_port:
        raise CheckFailed("no websocket port given")
    tcp = Client("ws-tcp-pub")
    tcp.pub("ws/state", b"over-tcp", qos=1, retain=True)
    ws = Client("ws-sub", transport="websockets")
    ws.sub("ws/#", "ws-fence")
    got = fence(tcp, ws, "ws-fence")
    expect([(m.payload, m.retain) for m in got] == [(b"over-tcp", 1)],
           "websocket late subscriber: got %s" % show(got))
    ws.pub("ws/live", b"over-ws", qos=2)
    got = fence(tcp, ws, "ws-fence")
    expect([(m.topic, m.payload, m.retain) for m in got] == [("ws/live", b"over-ws", 0)],
           "websocket publish to websocket subscriber: got %s" % show(got))
    tcp.close()
    ws.close()


# ---- restart ----------------------------------------------------------------------

def restart_fixture():
    """Retained state the restarted phase expects."""
    pub = Client("restart-pub")
    p = props(ContentType="text/plain")
    p.UserProperty = ("unit", "C")
    pub.pub("restart/5", b"durable-5", qos=1, retain=True, props=p)
    pub.pub("restart/gone", b"x", qos=1, retain=True)
    pub.pub("restart/gone", b"", qos=1, retain=True)
    pub.close()
    pub = Client("restart-pub311", v5=False)
    pub.pub("restart/311", b"durable-311", qos=2, retain=True)
    pub.close()


def retained_survive_restart():
    late = Client("restart-late311", v5=False)
    late.sub("restart/#", "restart-fence")
    pub = Client("restart-fencer")
    got = fence(pub, late, "restart-fence")
    expect(sorted((m.topic, m.payload, m.retain) for m in got) ==
           [("restart/311", b"durable-311", 1), ("restart/5", b"durable-5", 1)],
           "after restart, MQTT 3.1.1 late subscriber: got %s" % show(got))
    late5 = Client("restart-late5")
    late5.sub("restart/5")
    m = late5.next("retained restart/5")
    up = getattr(m.properties, "UserProperty", None)
    expect(m.retain and m.payload == b"durable-5" and getattr(m.properties, "ContentType", None) == "text/plain"
           and up == [("unit", "C")], "after restart, MQTT 5 properties: %s %s" % (show([m]), m.properties))
    for c in (late, late5, pub):
        c.close()


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ws-port", type=int, default=0)
    ap.add_argument("--phase", choices=["main", "restarted"], required=True)
    args = ap.parse_args()
    print("paho-mqtt %s, phase %s, gateway %s:%d (ws %d)" % (paho.mqtt.__version__, args.phase,
          args.host, args.port, args.ws_port), flush=True)
    if args.phase == "main":
        for fn in (mqtt311_retained, mqtt5_retained, mqtt5_retain_as_published_and_handling,
                   will_retained_to_late_subscriber, qos_0_1_2_delivery,
                   mqtt5_overlapping_subscriptions_once, offline_queueing_persistent_session,
                   dollar_topics_not_matched_by_hash, mqtt5_properties_pass_through,
                   mqtt5_message_expiry, mqtt5_puback_has_no_echoed_properties, websocket_transport):
            check(fn)
        check(restart_fixture)
    else:
        check(retained_survive_restart)
    if failures:
        print("FAILED: %s" % ", ".join(failures), flush=True)
        return 1
    print("all %s checks passed" % args.phase, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
