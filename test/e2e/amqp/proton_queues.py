#!/usr/bin/python3
"""Reference-client checks of the gateway's queues (docs/queues.md, "AMQP")
with Qpid Proton.

Run by test/e2e/amqp_clients.sh against a running gateway, next to
proton_checks.py, whose helpers and runner it uses. Each check declares its
own queue through the admin API (PUT /api/v1/queues/{name}), so --admin is
required, and deletes it at the end. Prints one PASS/FAIL line per check and
exits 1 if any check failed.

    /usr/bin/python3 proton_queues.py --amqp 127.0.0.1:5672 --admin 127.0.0.1:8088
"""

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from proton import Delivery, Message, Terminus, Timeout
from proton.reactor import Copy

import proton_checks as pc
from proton_checks import RUN, T, TOPIC, CheckFailed, body_bytes, desc, expect, expect_nothing, send

queue_checks = []


def qcheck(name):
    def register(fn):
        queue_checks.append((name, fn, True, False))  # gateway only, no MQTT
        return fn
    return register


# --- admin API ---------------------------------------------------------------


def admin(method, name, body=None):
    """One admin API request on queue name; returns the decoded answer (None when empty)."""
    if not pc.args.admin:
        raise CheckFailed("no --admin HOST:PORT given: the queue checks declare their queues through the admin API")
    url = "http://%s/api/v1/queues/%s" % (pc.args.admin, urllib.parse.quote(name, safe=""))
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=T) as r:
            raw = r.read()
    except urllib.error.HTTPError as e:
        raise CheckFailed("%s %s: HTTP %d: %s" % (method, url, e.code, e.read().decode(errors="replace").strip()))
    except OSError as e:
        raise CheckFailed("%s %s: %s" % (method, url, e))
    return json.loads(raw) if raw.strip() else None


class Queue:
    """A queue declared for one check (PUT) and deleted after it (DELETE)."""

    def __init__(self, cs, tag, config):
        self.name = "py-%s-%s" % (RUN, tag)
        self.addr = "queue://" + self.name
        admin("PUT", self.name, config)
        cs.cleanups.append(self.delete)

    def delete(self):
        try:
            admin("DELETE", self.name)
        except CheckFailed as e:
            print("warning: %s" % e, flush=True)

    def view(self):
        return admin("GET", self.name)

    def wait_empty(self, what):
        """Polls the admin API until the queue holds nothing (stored or in flight)."""
        deadline = time.time() + T
        while True:
            v = self.view()
            if v["messages"] == 0 and v["inFlight"] == 0:
                return
            if time.time() > deadline:
                raise CheckFailed("%s: queue %s not empty after %gs: messages=%d inFlight=%d counters=%s" % (
                    what, self.name, T, v["messages"], v["inFlight"], v["counters"]))
            time.sleep(0.05)


# --- receiving with an explicit outcome --------------------------------------


def take(rcv, what):
    """The next message; its delivery stays unsettled until outcome()."""
    try:
        return rcv.receive(timeout=T)
    except Timeout:
        raise CheckFailed("no message within %gs: %s" % (T, what))


def outcome(rcv, state, failed=False):
    """Settles the oldest message taken from rcv with state (Delivery.ACCEPTED, ...).

    BlockingReceiver.release(delivered=True) sends modified without
    delivery-failed; this sets it when asked."""
    expect(rcv.fetcher.unsettled, "no unsettled delivery to settle: the gateway sent it settled")
    d = rcv.fetcher.unsettled.popleft()
    if state == Delivery.MODIFIED:
        d.local.failed = failed
    d.update(state)
    d.settle()


def header(m):
    return "delivery_count=%r first_acquirer=%r" % (m.delivery_count, m.first_acquirer)


# --- checks ------------------------------------------------------------------


@qcheck("queue: 3 sends accepted, received in order; released comes back (first-acquirer false, "
        "delivery-count unchanged), modified{delivery-failed} counts; the queue ends empty")
def c_order_release(cs):
    q = Queue(cs, "order", {})
    c = cs.connect()
    s = c.create_sender(q.addr)
    for i in range(3):
        send(s, Message(body="m%d" % i, durable=True))  # unsettled: accepted once stored
    r = c.create_receiver(q.addr, credit=10)
    for i, state in ((0, Delivery.ACCEPTED), (1, Delivery.RELEASED)):
        m = take(r, "message %d of 3 from %s" % (i, q.addr))
        expect(body_bytes(m) == b"m%d" % i, "message %d out of order: %s" % (i, desc(m)))
        expect(m.first_acquirer is True and m.delivery_count == 0,
               "first delivery of m%d: %s, want delivery_count=0 first_acquirer=True" % (i, header(m)))
        outcome(r, state)
    # m2 was in flight already when m1 was released, so the two may come
    # either way round; each is accepted except the released one's first
    # return, which is modified{delivery-failed}
    got, redelivered = [], None
    while len(got) < 2:
        m = take(r, "m2 and the released m1 (got %s)" % got)
        b = body_bytes(m)
        got.append(b)
        if b == b"m2":
            expect(m.first_acquirer is True and m.delivery_count == 0, "m2: %s" % header(m))
            outcome(r, Delivery.ACCEPTED)
        elif b == b"m1":
            expect(m.first_acquirer is False and m.delivery_count == 0,
                   "m1 after released: %s, want delivery_count=0 first_acquirer=False" % header(m))
            redelivered = m
            outcome(r, Delivery.MODIFIED, failed=True)
        else:
            raise CheckFailed("unexpected message after the release: " + desc(m))
    expect(sorted(got) == [b"m1", b"m2"], "after releasing m1 got %s, want m1 and m2" % got)
    expect(redelivered is not None, "the released m1 never came back")
    m = take(r, "m1 after modified{delivery-failed}")
    expect(body_bytes(m) == b"m1", "want m1 again after modified: " + desc(m))
    expect(m.first_acquirer is False and m.delivery_count == 1,
           "m1 after modified{delivery-failed=true}: %s, want delivery_count=1 first_acquirer=False" % header(m))
    outcome(r, Delivery.ACCEPTED)
    expect_nothing(r, "every message of %s was accepted" % q.addr)
    q.wait_empty("after accepting all three")


@qcheck("queue: a topic publish a queue subscribes to (clients/python/<run>/#) lands in the queue")
def c_topic_into_queue(cs):
    prefix = "clients/python/" + RUN
    q = Queue(cs, "subs", {"subscriptions": [prefix + "/#"]})
    c = cs.connect()
    s = c.create_sender(prefix + "/x", options=TOPIC)
    send(s, Message(body="via-topic", durable=True))
    other = c.create_sender("clients/python/other-" + RUN, options=TOPIC)
    send(other, Message(body="not-for-the-queue", durable=True))
    r = c.create_receiver(q.addr, credit=10)
    m = take(r, "topic publish on %s/x from %s" % (prefix, q.addr))
    expect(body_bytes(m) == b"via-topic", "body differs: " + desc(m))
    expect(m.address in (prefix + "/x", "topic://" + prefix + "/x"),
           "a message stored through a subscription keeps its topic: " + desc(m))
    outcome(r, Delivery.ACCEPTED)
    expect_nothing(r, "only %s/# is subscribed" % prefix)
    q.wait_empty("after accepting the topic publish")


@qcheck("queue: a full queue (maxMessages 1) rejects the second send with amqp:resource-limit-exceeded")
def c_full(cs):
    q = Queue(cs, "full", {"maxMessages": 1})
    c = cs.connect()
    s = c.create_sender(q.addr)
    send(s, Message(body="fits", durable=True))
    d = send(s, Message(body="too-many", durable=True), want=Delivery.REJECTED)
    cond = d.remote.condition
    expect(cond is not None and cond.name == "amqp:resource-limit-exceeded",
           "rejected with condition %r, want amqp:resource-limit-exceeded" % (cond and cond.name))
    expect(q.name in (cond.description or ""), "the description %r does not name the queue %s" % (
        cond.description, q.name))
    v = q.view()
    expect(v["messages"] == 1, "full queue holds %d messages, want 1" % v["messages"])
    r = c.create_receiver(q.addr, credit=10)
    m = take(r, "the one message of the full queue")
    expect(body_bytes(m) == b"fits", "want the message that fitted: " + desc(m))
    outcome(r, Delivery.ACCEPTED)
    expect_nothing(r, "the refused message must not be stored")
    q.wait_empty("after taking the one message")
    send(s, Message(body="room-again", durable=True))  # room again once consumed


@qcheck("queue: a browser (distribution-mode copy) sees the messages; a consumer afterwards gets them all")
def c_browse(cs):
    q = Queue(cs, "browse", {})
    c = cs.connect()
    s = c.create_sender(q.addr)
    bodies = [b"b0", b"b1", b"b2"]
    for b in bodies:
        send(s, Message(body=b, inferred=True, durable=True))
    br = c.create_receiver(q.addr, credit=10, options=Copy(), name="browser-" + RUN)
    expect(br.remote_source.distribution_mode == Terminus.DIST_MODE_COPY,
           "the attach answer says distribution-mode %r, want copy" % br.remote_source.distribution_mode)
    seen = []
    for _ in bodies:
        m = take(br, "browsing %s (seen %s)" % (q.addr, seen))
        seen.append(body_bytes(m))
        expect(not br.fetcher.unsettled, "browsed message sent unsettled: " + desc(m))
    expect(seen == bodies, "browser saw %s, want %s" % (seen, bodies))
    expect_nothing(br, "the browser sees each message once")
    v = q.view()
    expect(v["messages"] == 3, "after browsing the queue holds %d messages, want 3" % v["messages"])
    br.close()
    r = c.create_receiver(q.addr, credit=10, name="consumer-" + RUN)
    got = []
    for _ in bodies:
        m = take(r, "consuming %s after the browser (got %s)" % (q.addr, got))
        got.append(body_bytes(m))
        outcome(r, Delivery.ACCEPTED)
    expect(got == bodies, "consumer after the browser got %s, want %s" % (got, bodies))
    expect_nothing(r, "three messages only")
    q.wait_empty("after consuming what was browsed")


# --- runner ------------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(pc.main(queue_checks))
