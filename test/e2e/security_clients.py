#!/usr/bin/python3
"""Security checks with the reference Python clients (docs/security.md).

Run by test/e2e/security.sh against a gateway it started with a users file,
mqtt.tls and amqp.tls (clientAuth request, clientCA = the CA of --pki):
Python paho-mqtt (python3-paho-mqtt) over TLS, Qpid Proton over amqps
(security.sh runs this under python-qpid-proton built with Cyrus SASL, for
SCRAM-SHA-256; Debian's python3-qpid-proton runs everything else), and
Python's ssl module as a TLS 1.0 and 1.1 client. Prints one PASS/FAIL/NOT RUN line per check and exits 1 if any
check failed.

    /usr/bin/python3 security_clients.py --pki DIR --mqtt-tls 127.0.0.1:8883 \\
        --amqp-tls 127.0.0.1:5671 --alice-password PW --ops-password PW

The users file (security.sh writes it): alice (password, group devices), ops
(password and SCRAM credential), client certificates in --pki for alice
and ghost (not a user), expired.pem (CN alice, expired), foreign.pem (CN
alice, from another CA). ACL: devices/%u/# for group devices, subscribe to
test/nosubscribe denied to everyone, # for ops, sec/# for everyone, default
deny.
"""

import argparse
import os
import queue
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
import uuid
import warnings

import paho.mqtt.client as mqtt
from proton import SASL, ConnectionException, Data, Message, SSLDomain
from proton.utils import BlockingConnection, LinkDetached

T = 5  # seconds, per operation
QUIET = 1.0  # seconds to wait for a message that must not come
RUN = uuid.uuid4().hex[:8]

args = None
checks = []


class CheckFailed(Exception):
    pass


class NotRun(Exception):
    """The client on this machine cannot run the check; the reason says why."""


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


def check(name):
    def register(fn):
        checks.append((name, fn))
        return fn
    return register


def host_port(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def pki(name):
    return os.path.join(args.pki, name)


# --- MQTT (paho) -------------------------------------------------------------


class PubackClient(mqtt.Client):
    """paho 1.6.1 (Debian 12's) reads an MQTT 5 PUBACK's reason code and
    drops it: on_publish gets only the mid (paho 2's callback API v2 passes
    it on). This records it per mid, from the packet paho has just read,
    before paho handles it as usual. A PUBACK of two bytes is success
    [MQTT-3.4.2.1]."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.puback_reasons = {}
        self.puback_event = threading.Condition()

    def _handle_pubackcomp(self, cmd):
        pkt = self._in_packet["packet"]
        if cmd == "PUBACK" and len(pkt) >= 2:
            mid, = struct.unpack("!H", pkt[:2])
            with self.puback_event:
                self.puback_reasons[mid] = pkt[2] if len(pkt) > 2 else 0
                self.puback_event.notify_all()
        return super()._handle_pubackcomp(cmd)

    def puback(self, mid):
        with self.puback_event:
            if not self.puback_event.wait_for(lambda: mid in self.puback_reasons, timeout=T):
                raise CheckFailed("no PUBACK for mid %d" % mid)
            return self.puback_reasons[mid]


class Attempt:
    """One MQTT connection attempt over TLS, driven on this thread until the
    CONNACK, a TLS error or the deadline. rc is the CONNACK's reason code
    (MQTT 5) or return code (3.1.1), None when none came; tls_error the
    SSLError's text when the handshake or the first read failed."""

    def __init__(self, proto, user=None, password=None, cert=None, ctx=None):
        self.rc = None
        self.tls_error = None
        self.disconnected = threading.Event()
        self.messages = queue.Queue()
        self.subacks = queue.Queue()
        self.client = PubackClient(client_id="sec-%s-%s" % (RUN, uuid.uuid4().hex[:6]), protocol=proto)
        if ctx is None:
            ctx = ssl.create_default_context(cafile=pki("ca.pem"))
            if cert:
                ctx.load_cert_chain(pki(cert + ".pem"), pki(cert + ".key"))
        self.client.tls_set_context(ctx)
        if user is not None:
            self.client.username_pw_set(user, password)
        c = self.client
        c.on_connect = self._on_connect
        c.on_disconnect = lambda cl, ud, rc, props=None: self.disconnected.set()
        c.on_message = lambda cl, ud, m: self.messages.put(m)
        c.on_subscribe = self._on_subscribe
        host, port = host_port(args.mqtt_tls)
        try:
            c.connect(host, port, keepalive=30)
        except ssl.SSLError as e:
            self.tls_error = str(e)
            return
        deadline = time.monotonic() + T
        while self.rc is None and not self.disconnected.is_set() and time.monotonic() < deadline:
            try:
                c.loop(0.1)
            except ssl.SSLError as e:  # TLS 1.3: a refused client certificate shows at the first read
                self.tls_error = str(e)
                return
        if self.rc == 0:
            c.loop_start()

    def _on_connect(self, cl, ud, flags, rc, props=None):
        self.rc = rc.value if hasattr(rc, "value") else rc

    def _on_subscribe(self, cl, ud, mid, granted, props=None):
        self.subacks.put([g.value if hasattr(g, "value") else g for g in granted])

    def subscribe(self, topic, qos=1):
        self.client.subscribe(topic, qos)
        try:
            return self.subacks.get(timeout=T)
        except queue.Empty:
            raise CheckFailed("no SUBACK for %s" % topic)

    def next(self, what):
        try:
            return self.messages.get(timeout=T)
        except queue.Empty:
            raise CheckFailed("no message: " + what)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def mqtt_connected(a, what):
    expect(a.tls_error is None, "%s: TLS failed: %s" % (what, a.tls_error))
    expect(a.rc == 0, "%s: CONNACK code %s, want 0" % (what, a.rc))
    return a


def round_trip(a, topic, what):
    granted = a.subscribe(topic)
    expect(granted[0] in (0, 1, 2), "%s: SUBACK %s for %s" % (what, granted, topic))
    body = ("%s-%s" % (what, uuid.uuid4().hex)).encode()
    info = a.client.publish(topic, body, qos=1)
    code = a.client.puback(info.mid)
    expect(code == 0, "%s: PUBACK reason %#x on %s" % (what, code, topic))
    m = a.next("%s on %s" % (what, topic))
    expect(m.topic == topic and m.payload == body, "%s: got %s %r" % (what, m.topic, m.payload))


V5, V311 = mqtt.MQTTv5, mqtt.MQTTv311


@check("MQTT 5 over TLS, user and password: connects, round trip on devices/alice/#")
def _(cl):
    a = cl(Attempt(V5, "alice", args.alice_password))
    mqtt_connected(a, "alice")
    round_trip(a, "devices/alice/%s/v5" % RUN, "alice")


@check("MQTT 3.1.1 over TLS, user and password: connects, round trip")
def _(cl):
    a = cl(Attempt(V311, "alice", args.alice_password))
    mqtt_connected(a, "alice")
    round_trip(a, "devices/alice/%s/v311" % RUN, "alice")


@check("MQTT over TLS, wrong password: CONNACK 0x86 (5) / 4 (3.1.1)")
def _(cl):
    for proto, want in ((V5, 0x86), (V311, 4)):
        a = cl(Attempt(proto, "alice", args.alice_password + "-wrong"))
        expect(a.rc == want, "protocol %d: CONNACK %s (TLS error %s), want %#x" % (proto, a.rc, a.tls_error, want))


@check("MQTT over TLS, unknown user: CONNACK 0x86 (5) / 4 (3.1.1), as a wrong password")
def _(cl):
    for proto, want in ((V5, 0x86), (V311, 4)):
        a = cl(Attempt(proto, "nobody-" + RUN, args.alice_password))
        expect(a.rc == want, "protocol %d: CONNACK %s (TLS error %s), want %#x" % (proto, a.rc, a.tls_error, want))


@check("MQTT over TLS, no credentials (anonymous not allowed): CONNACK 0x87 (5) / 5 (3.1.1)")
def _(cl):
    for proto, want in ((V5, 0x87), (V311, 5)):
        a = cl(Attempt(proto))
        expect(a.rc == want, "protocol %d: CONNACK %s (TLS error %s), want %#x" % (proto, a.rc, a.tls_error, want))


@check("MQTT client certificate CN=alice, no user name: connects as alice (devices/%u/# allows it)")
def _(cl):
    for proto in (V5, V311):
        a = cl(Attempt(proto, cert="alice"))
        mqtt_connected(a, "certificate alice")
        round_trip(a, "devices/alice/%s/cert%d" % (RUN, proto), "certificate alice")
        # The %u rule is the user's own: another user's subtree stays closed.
        expect(a.subscribe("devices/bob/#")[0] >= 0x80, "certificate alice could subscribe devices/bob/#")


@check("MQTT client certificate of the CA naming no user: CONNACK 0x86 (5) / 4 (3.1.1)")
def _(cl):
    for proto, want in ((V5, 0x86), (V311, 4)):
        a = cl(Attempt(proto, cert="ghost"))
        expect(a.rc == want, "protocol %d: CONNACK %s (TLS error %s), want %#x" % (proto, a.rc, a.tls_error, want))


def tls_refused(a, alert, what):
    expect(a.rc is None, "%s: got a CONNACK (%s): the TLS handshake should have failed" % (what, a.rc))
    expect(a.tls_error is not None and alert in a.tls_error,
           "%s: want a TLS alert %s, got %s" % (what, alert, a.tls_error or "no TLS error"))


@check("MQTT expired client certificate: refused in the TLS handshake (alert certificate expired)")
def _(cl):
    tls_refused(cl(Attempt(V5, cert="expired")), "CERTIFICATE_EXPIRED", "expired certificate")


@check("MQTT client certificate from another CA: refused in the TLS handshake (alert unknown ca)")
def _(cl):
    tls_refused(cl(Attempt(V5, cert="foreign")), "UNKNOWN_CA", "certificate of another CA")


def old_tls_context(version):
    """A client context that offers only the given old version. OpenSSL 3
    (Debian 12) refuses TLS 1.0/1.1 at security level 1, so the level is
    lowered to 0: the client then really offers the old version, and the
    refusal seen is the server's alert, not a local one."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki("ca.pem"))
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = version
        ctx.maximum_version = version
    return ctx


@check("TLS 1.0 and 1.1 clients refused on the MQTT and AMQP TLS ports (alert protocol version)")
def _(cl):
    for version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
        a = cl(Attempt(V5, "alice", args.alice_password, ctx=old_tls_context(version)))
        tls_refused(a, "PROTOCOL_VERSION", "MQTT %s" % version.name)
        s = socket.create_connection(host_port(args.amqp_tls), timeout=T)
        try:
            old_tls_context(version).wrap_socket(s, server_hostname="localhost")
            raise CheckFailed("AMQP %s: handshake succeeded" % version.name)
        except ssl.SSLError as e:
            expect("PROTOCOL_VERSION" in str(e), "AMQP %s: want alert protocol version, got %s" % (version.name, e))
        finally:
            s.close()
    # The same client with TLS 1.2 gets in: the refusal above is the version.
    s = socket.create_connection(host_port(args.amqp_tls), timeout=T)
    try:
        t = old_tls_context(ssl.TLSVersion.TLSv1_2).wrap_socket(s, server_hostname="localhost")
        expect(t.version() == "TLSv1.2", "TLS 1.2 client negotiated %s" % t.version())
    finally:
        s.close()


@check("MQTT SUBSCRIBE test/nosubscribe denied: SUBACK 0x87 (5) / 0x80 (3.1.1), nothing delivered")
def _(cl):
    ops = mqtt_connected(cl(Attempt(V5, "ops", args.ops_password)), "ops")
    for proto, want in ((V5, 0x87), (V311, 0x80)):
        a = mqtt_connected(cl(Attempt(proto, "alice", args.alice_password)), "alice")
        got = a.subscribe("test/nosubscribe")
        expect(got == [want], "protocol %d: SUBACK %s, want [%#x]" % (proto, got, want))
        ops.client.publish("test/nosubscribe", b"secret", qos=1)
        try:
            m = a.messages.get(timeout=QUIET)
            raise CheckFailed("protocol %d: a denied subscription received %s" % (proto, m.topic))
        except queue.Empty:
            pass


@check("MQTT wildcard allowed partly: ops on # hears sec/..., never test/nosubscribe")
def _(cl):
    ops = mqtt_connected(cl(Attempt(V5, "ops", args.ops_password)), "ops")
    granted = ops.subscribe("#")
    expect(granted[0] in (0, 1, 2), "ops SUBACK %s for #" % granted)
    pub = mqtt_connected(cl(Attempt(V5, "ops", args.ops_password)), "ops publisher")
    fence = "sec/%s/fence" % RUN
    pub.client.publish("test/nosubscribe", b"secret", qos=1)
    pub.client.publish(fence, b"fence", qos=1)
    while True:  # the fence comes after the denied topic, on one connection
        m = ops.next("the fence on " + fence)
        expect(m.topic != "test/nosubscribe", "ops's # delivered test/nosubscribe")
        if m.topic == fence:
            break


@check("MQTT PUBLISH outside the ACL: 5: PUBACK 0x87, not delivered, the connection stays; 3.1.1: disconnected")
def _(cl):
    ops = mqtt_connected(cl(Attempt(V5, "ops", args.ops_password)), "ops")
    ops.subscribe("devices/bob/#")
    a = mqtt_connected(cl(Attempt(V5, "alice", args.alice_password)), "alice v5")
    info = a.client.publish("devices/bob/%s" % RUN, b"forged", qos=1)
    code = a.client.puback(info.mid)
    expect(code == 0x87, "PUBACK reason %#x for a denied publish, want 0x87" % code)
    own = "devices/alice/%s/after" % RUN
    a.subscribe(own)
    a.client.publish(own, b"after", qos=1)
    m = a.next("alice's own publish after the denied one")
    expect(m.topic == own, "alice got %s" % m.topic)
    expect(not a.disconnected.is_set(), "MQTT 5: the connection was closed")
    try:
        m = ops.messages.get(timeout=QUIET)
        raise CheckFailed("ops received alice's forged %s" % m.topic)
    except queue.Empty:
        pass
    b = mqtt_connected(cl(Attempt(V311, "alice", args.alice_password)), "alice 3.1.1")
    b.client.publish("devices/bob/%s" % RUN, b"forged", qos=1)
    expect(b.disconnected.wait(T), "MQTT 3.1.1: a denied PUBLISH did not close the connection")
    try:
        m = ops.messages.get(timeout=QUIET)
        raise CheckFailed("ops received alice's forged %s (3.1.1)" % m.topic)
    except queue.Empty:
        pass


# --- AMQP (Qpid Proton) --------------------------------------------------------


def ssl_domain(cert=None):
    d = SSLDomain(SSLDomain.MODE_CLIENT)
    d.set_trusted_ca_db(pki("ca.pem"))
    d.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if cert:
        d.set_credentials(pki(cert + ".pem"), pki(cert + ".key"), None)
    return d


def amqp_url():
    # Proton checks the server's name against DNS names only, not IP SANs:
    # the server certificate names localhost.
    return "amqps://localhost:%d" % host_port(args.amqp_tls)[1]


def amqp_connect(cl, mechs, user=None, password=None, cert=None):
    kw = dict(ssl_domain=ssl_domain(cert), allowed_mechs=mechs, sasl_enabled=True, timeout=T)
    if user is not None:
        kw.update(user=user, password=password)
    return cl(BlockingConnection(amqp_url(), **kw))


def amqp_round_trip(c, address, what):
    r = c.create_receiver(address)
    body = "%s-%s" % (what, uuid.uuid4().hex)
    c.create_sender(address).send(Message(body=body))
    m = r.receive(timeout=T)
    expect(m.body in (body, body.encode()), "%s: got %r" % (what, m.body))


def amqp_refused(cl, what, want, **kw):
    try:
        amqp_connect(cl, **kw)
    except ConnectionException as e:
        expect(want in str(e), "%s: refused, but not with %s: %s" % (what, want, e))
        return
    raise CheckFailed("%s: the connection opened" % what)


@check("AMQP SASL PLAIN over TLS: connects, round trip on devices/alice/...")
def _(cl):
    c = amqp_connect(cl, "PLAIN", "alice", args.alice_password)
    amqp_round_trip(c, "devices/alice/%s/plain" % RUN, "PLAIN")


@check("AMQP SASL PLAIN over TLS, wrong password and unknown user: amqp:unauthorized-access")
def _(cl):
    amqp_refused(cl, "wrong password", "amqp:unauthorized-access", mechs="PLAIN", user="alice",
                 password=args.alice_password + "-wrong")
    amqp_refused(cl, "unknown user", "amqp:unauthorized-access", mechs="PLAIN", user="nobody-" + RUN,
                 password=args.alice_password)


@check("AMQP SASL EXTERNAL with client certificate CN=alice: connects as alice")
def _(cl):
    c = amqp_connect(cl, "EXTERNAL", cert="alice")
    amqp_round_trip(c, "devices/alice/%s/external" % RUN, "EXTERNAL")
    try:
        c.create_sender("devices/bob/%s" % RUN)
        raise CheckFailed("certificate alice could attach a sender to devices/bob/...")
    except LinkDetached as e:
        expect("amqp:unauthorized-access" in str(e), "devices/bob: detached with %s" % e)


@check("AMQP SASL EXTERNAL: a certificate naming no user is refused; expired and other-CA ones fail TLS")
def _(cl):
    amqp_refused(cl, "ghost", "amqp:unauthorized-access", mechs="EXTERNAL", cert="ghost")
    amqp_refused(cl, "expired", "certificate expired", mechs="EXTERNAL", cert="expired")
    amqp_refused(cl, "other CA", "unknown ca", mechs="EXTERNAL", cert="foreign")


@check("AMQP ACL: receiver on test/nosubscribe and sender to devices/bob/... refused (amqp:unauthorized-access)")
def _(cl):
    c = amqp_connect(cl, "PLAIN", "alice", args.alice_password)
    for make, address in ((c.create_receiver, "test/nosubscribe"), (c.create_sender, "devices/bob/%s" % RUN)):
        try:
            make(address)
            raise CheckFailed("attach to %s succeeded" % address)
        except LinkDetached as e:
            expect("amqp:unauthorized-access" in str(e), "%s: detached with %s" % (address, e))


def sasl_mechanisms():
    """The mechanisms the gateway offers over TLS, read off the wire: the
    protocol header for SASL, then the sasl-mechanisms frame (AMQP 1.0
    part 5 §5.3.3.1), decoded with Proton's codec."""
    s = socket.create_connection(host_port(args.amqp_tls), timeout=T)
    ctx = ssl.create_default_context(cafile=pki("ca.pem"))
    t = ctx.wrap_socket(s, server_hostname="localhost")
    try:
        t.sendall(b"AMQP\x03\x01\x00\x00")
        buf = b""
        while len(buf) < 8 + 8:
            chunk = t.recv(4096)
            expect(chunk, "connection closed before sasl-mechanisms")
            buf += chunk
        expect(buf[:8] == b"AMQP\x03\x01\x00\x00", "protocol header %r" % buf[:8])
        size, doff = struct.unpack(">IB", buf[8:13])
        while len(buf) < 8 + size:
            buf += t.recv(4096)
        d = Data()
        d.decode(buf[8 + doff * 4:8 + size])
        d.rewind()
        d.next()
        described = d.get_object()
        mechs = described.value[0]  # a symbol array, or one symbol alone
        elems = getattr(mechs, "elements", None)
        return [str(m) for m in (elems if elems is not None else [mechs])]
    finally:
        t.close()


@check("AMQP SASL SCRAM-SHA-256 over TLS: offered; ops connects, wrong password and a user without a scram credential refused")
def _(cl):
    mechs = sasl_mechanisms()
    expect("SCRAM-SHA-256" in mechs, "offered over TLS: %s" % mechs)
    if not SASL.extended():
        raise NotRun("offered (%s), but this Proton has no Cyrus SASL (proton.SASL.extended() is False: Debian's "
                     "python3-qpid-proton is built without it), so it speaks only PLAIN, EXTERNAL and ANONYMOUS; "
                     "security.sh builds one with it unless PROTON_VENV=system" % " ".join(mechs))
    c = amqp_connect(cl, "SCRAM-SHA-256", "ops", args.ops_password)
    amqp_round_trip(c, "sec/%s/scram" % RUN, "SCRAM")
    amqp_refused(cl, "SCRAM wrong password", "amqp:unauthorized-access", mechs="SCRAM-SHA-256", user="ops",
                 password=args.ops_password + "-wrong")
    # alice has a password hash but no scram credential: no SCRAM login,
    # even with her right password (docs/security.md, "SCRAM-SHA-256").
    amqp_refused(cl, "SCRAM without a scram credential", "amqp:unauthorized-access", mechs="SCRAM-SHA-256",
                 user="alice", password=args.alice_password)


# --- runner --------------------------------------------------------------------


class Closer:
    """Collects what a check opened and closes it afterwards."""

    def __init__(self):
        self.items = []

    def __call__(self, x):
        self.items.append(x)
        return x

    def close(self):
        for x in self.items:
            try:
                x.close()
            except Exception:
                pass


def main():
    global args
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pki", required=True)
    p.add_argument("--mqtt-tls", required=True)
    p.add_argument("--amqp-tls", required=True)
    p.add_argument("--alice-password", required=True)
    p.add_argument("--ops-password", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    failed = passed = 0
    for name, fn in checks:
        if args.only and args.only not in name:
            continue
        cl = Closer()
        t0 = time.monotonic()
        status, detail = "PASS", ""
        try:
            fn(cl)
        except NotRun as e:
            status, detail = "NOT RUN", str(e)
        except CheckFailed as e:
            status, detail = "FAIL", str(e)
        except Exception as e:
            status, detail = "FAIL", "%s: %s" % (type(e).__name__, e)
            if args.verbose:
                traceback.print_exc()
        finally:
            cl.close()
        if status == "FAIL":
            failed += 1
        elif status == "PASS":
            passed += 1
        print("%s python: %s%s (%.1fs)" % (status, name, " -- " + detail if detail else "", time.monotonic() - t0), flush=True)
    print("python: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
