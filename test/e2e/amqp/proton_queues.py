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
from proton_checks import RUN, T, TOPIC, Caps, CheckFailed, body_bytes, desc, expect, expect_attach_refused, expect_nothing, send

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


@qcheck("queue: exclusive: the first receiver gets everything, the second stands by and takes over "
        "(with the unsettled message) when the first leaves")
def c_exclusive(cs):
    q = Queue(cs, "excl", {"access": "exclusive"})
    c = cs.connect()
    s = c.create_sender(q.addr)
    first = cs.connect().create_receiver(q.addr, credit=10, name="first-" + RUN)
    standby_conn = cs.connect()
    standby = standby_conn.create_receiver(q.addr, credit=10, name="standby-" + RUN)
    for b in (b"x0", b"x1"):
        send(s, Message(body=b, inferred=True, durable=True))
    m = take(first, "x0 on the active consumer of " + q.addr)
    expect(body_bytes(m) == b"x0", "active consumer: want x0, got " + desc(m))
    outcome(first, Delivery.ACCEPTED)
    m = take(first, "x1 on the active consumer")
    expect(body_bytes(m) == b"x1", "active consumer: want x1, got " + desc(m))
    expect_nothing(standby, "the standby of an exclusive queue gets nothing while the first is attached")
    first.close()  # x1 unsettled: given back, to the standby
    m = take(standby, "x1 on the standby after the active consumer left")
    expect(body_bytes(m) == b"x1", "standby took over with %s, want x1" % desc(m))
    expect(m.first_acquirer is False, "x1 was delivered before: %s" % header(m))
    outcome(standby, Delivery.ACCEPTED)
    send(s, Message(body=b"x2", inferred=True, durable=True))
    m = take(standby, "x2 on the consumer that took over")
    expect(body_bytes(m) == b"x2", "want x2, got " + desc(m))
    outcome(standby, Delivery.ACCEPTED)
    expect_nothing(standby, "three messages only")  # also sends the last accept: Proton writes while it waits
    q.wait_empty("after the standby took everything")


@qcheck("queue: rejected and modified{delivery-failed} past maxDeliveries go to the dead-letter queue")
def c_dead_letter(cs):
    dlq = Queue(cs, "dlq", {})
    q = Queue(cs, "dl", {"maxDeliveries": 2, "deadLetter": dlq.name})
    c = cs.connect()
    s = c.create_sender(q.addr)
    send(s, Message(body=b"rejected", inferred=True, durable=True))
    send(s, Message(body=b"poison", inferred=True, durable=True))
    r = c.create_receiver(q.addr, credit=1)
    m = take(r, "the message to reject")
    expect(body_bytes(m) == b"rejected", "want 'rejected' first, got " + desc(m))
    outcome(r, Delivery.REJECTED)
    for i in range(2):
        m = take(r, "poison, delivery %d of 2" % (i + 1))
        expect(body_bytes(m) == b"poison", "want poison, got " + desc(m))
        expect(m.delivery_count == i, "poison delivery %d: %s" % (i + 1, header(m)))
        outcome(r, Delivery.MODIFIED, failed=True)
    expect_nothing(r, "poison failed maxDeliveries (2) times: it must not come again")
    q.wait_empty("after the rejection and the failed deliveries")
    counters = q.view()["counters"]
    expect(counters["deadLettered"] == 2, "queue counters %s, want deadLettered 2" % counters)
    d = c.create_receiver(dlq.addr, credit=10)
    got = sorted(body_bytes(take(d, "dead letter %d of 2" % (i + 1))) for i in range(2))
    expect(got == [b"poison", b"rejected"], "the dead-letter queue holds %s, want poison and rejected" % got)


@qcheck("queue: a temporary queue (dynamic receiver, capability temporary-queue) takes messages from "
        "another connection and is removed when its connection closes")
def c_temporary(cs):
    owner = cs.connect_unowned()
    r = owner.create_receiver(None, dynamic=True, credit=10, options=Caps("temporary-queue"))
    addr = r.remote_source.address
    expect(addr and addr.startswith("queue://$tmpq/"), "temporary queue address %r, want queue://$tmpq/..." % addr)
    name = addr[len("queue://"):]
    expect(admin("GET", name)["config"].get("temporary") is True, "the admin API does not list %s as temporary" % name)
    other = cs.connect()
    s = other.create_sender(addr)
    send(s, Message(body=b"reply", inferred=True, durable=True))
    m = take(r, "a message sent to the temporary queue " + addr)
    expect(body_bytes(m) == b"reply", "want reply, got " + desc(m))
    outcome(r, Delivery.ACCEPTED)
    owner.close()
    deadline = time.time() + T
    while True:
        try:
            admin("GET", name)
        except CheckFailed as e:
            if "HTTP 404" in str(e):
                break
            raise
        if time.time() > deadline:
            raise CheckFailed("temporary queue %s still there %gs after its connection closed" % (name, T))
        time.sleep(0.05)
    # A sender still attached to it has each message rejected: nothing is
    # accepted and lost.
    d = send(s, Message(body=b"too-late", inferred=True), want=Delivery.REJECTED)
    expect(d.remote.condition is not None and d.remote.condition.name == "amqp:not-found",
           "a send to the removed temporary queue: condition %r, want amqp:not-found" % (
               d.remote.condition and d.remote.condition.name))
    expect_attach_refused(lambda: other.create_sender(addr, name="late-" + RUN), "a sender to the removed temporary queue")


@qcheck("queue: alternate destination (queues.addresses alt/python/ -> py-alt-parked) collects a publish "
        "nobody receives; a topic receiver attached later drains it")
def c_alternate(cs):
    t = "alt/python/%s/1" % RUN
    c = cs.connect()
    s = c.create_sender(t, options=TOPIC)
    send(s, Message(body=b"parked", inferred=True, durable=True))
    v = admin("GET", "py-alt-parked")
    expect(v["messages"] >= 1, "the alternate py-alt-parked holds %d messages after a publish nobody received" % v["messages"])
    r = c.create_receiver("alt/python/%s/#" % RUN, credit=10, options=TOPIC)
    m = take(r, "the parked message, drained by a topic receiver on alt/python/%s/#" % RUN)
    expect(body_bytes(m) == b"parked", "want the parked message, got " + desc(m))
    if r.fetcher.unsettled:
        outcome(r, Delivery.ACCEPTED)
    send(s, Message(body=b"live", inferred=True, durable=True))
    m = take(r, "a publish once a receiver is attached goes to it live")
    expect(body_bytes(m) == b"live", "want live, got " + desc(m))
    if r.fetcher.unsettled:
        outcome(r, Delivery.ACCEPTED)
    deadline = time.time() + T
    while admin("GET", "py-alt-parked")["messages"] != 0:
        if time.time() > deadline:
            raise CheckFailed("py-alt-parked not empty after draining: %s" % admin("GET", "py-alt-parked"))
        time.sleep(0.05)


# --- runner ------------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(pc.main(queue_checks))
