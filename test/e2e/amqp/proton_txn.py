#!/usr/bin/python3
"""Local transactions (docs/jms.md, "Transactions") with Qpid Proton's own
transaction support (Container.declare_transaction, TransactionHandler),
the same AMQP 1.0 exchange Qpid JMS uses for a transacted session.

Run by test/e2e/amqp_clients.sh against a running gateway; --admin is used
to declare (and delete) the check's queue. One scripted run, in steps:

  1. sends in a transaction, to a topic and to a queue, are not visible
     before the commit: a plain message sent after them arrives first;
     after the commit the topic message arrives and the queue holds one;
  2. a send in a transaction that is rolled back never arrives (a plain
     message sent after the rollback does);
  3. a queue message accepted in a transaction that is rolled back comes
     back with delivery-count 1; accepted again and committed, the queue is
     empty once the commit is answered.

With --max-txn N (the gateway's amqp.maxTransactionMessages), also:

  4. N+1 sends in one transaction: the commit fails.

Prints PASS or FAIL and exits 1 on failure.

    /usr/bin/python3 proton_txn.py --amqp 127.0.0.1:5672 --admin 127.0.0.1:8088
"""

import argparse
import json
import sys
import urllib.parse
import urllib.request
import uuid

from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

T = 20  # seconds for the whole run
RUN = uuid.uuid4().hex[:8]


def admin(args, method, name, body=None):
    url = "http://%s/api/v1/queues/%s" % (args.admin, urllib.parse.quote(name, safe=""))
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        raw = r.read()
    return json.loads(raw) if raw.strip() else None


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


class Txn(MessagingHandler, TransactionHandler):
    def __init__(self, args, queue):
        super().__init__(auto_accept=False)
        self.args, self.queue = args, queue
        self.topic = "e2e/py/txn/" + RUN
        self.step = "start"
        self.txn = None
        self.error = None
        self.done = False
        self.stash = None
        self.t1 = self.committed1 = False

    def fail(self, what):
        if self.error is None:  # the first failure is the one to report
            self.error = what
        self.timer.cancel()
        self.conn.close()

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(self.args.amqp)
        self.trecv = event.container.create_receiver(self.conn, self.topic)
        self.tsnd = event.container.create_sender(self.conn, self.topic)
        self.qsnd = event.container.create_sender(self.conn, "queue://" + self.queue)
        self.timer = event.container.schedule(T, self)

    def on_connection_error(self, event):
        c = event.connection.remote_condition
        self.fail("connection closed by the gateway in step %s: %s" % (self.step, c and "%s %s" % (c.name, c.description)))

    def on_transport_error(self, event):
        c = event.transport.condition
        self.fail("transport error in step %s: %s" % (self.step, c and "%s %s" % (c.name, c.description)))

    def on_timer_task(self, event):
        self.fail("timed out in step %s" % self.step)

    def on_link_opened(self, event):
        if event.link == self.trecv:
            self.step = "declare 1"
            self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        self.txn = event.transaction
        if self.step == "declare 1":
            self.step = "marker 1"
            self.txn.send(self.tsnd, Message(body="t1"))
            self.txn.send(self.qsnd, Message(body="q1"))
            self.tsnd.send(Message(body="marker1"))
        elif self.step == "declare 2":
            self.step = "rolled back send"
            self.txn.send(self.tsnd, Message(body="t2"))
            self.txn.abort()
        elif self.step == "declare 3":
            self.step = "queue take"
            self.qrecv = self.container.create_receiver(self.conn, "queue://" + self.queue)
        elif self.step == "declare 4":
            self.step = "queue take again"
            if self.stash is not None:  # redelivered before this declare was answered
                self.take_again(*self.stash)

    def on_transaction_declare_failed(self, event):
        self.fail("declare failed in step %s" % self.step)

    def on_transaction_commit_failed(self, event):
        self.fail("commit failed in step %s" % self.step)

    def on_transaction_committed(self, event):
        if self.step == "commit 1":
            n = admin(self.args, "GET", self.queue)["messages"]
            if n != 1:
                return self.fail("queue holds %d once the commit is answered, want 1" % n)
            self.committed1 = True
            self.after_commit1()
        elif self.step == "commit 4":
            v = admin(self.args, "GET", self.queue)
            if v["messages"] != 0:
                return self.fail("queue holds %d once the acknowledging commit is answered, want 0" % v["messages"])
            self.done = True
            self.timer.cancel()
            self.conn.close()

    def after_commit1(self):
        if self.t1 and self.committed1:
            self.step = "declare 2"
            self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_aborted(self, event):
        if self.step == "rolled back send":
            self.step = "marker 2"
            self.tsnd.send(Message(body="marker2"))
        elif self.step == "queue rollback":
            self.step = "declare 4"
            self.container.declare_transaction(self.conn, handler=self)

    def on_message(self, event):
        body = event.message.body
        if event.receiver == self.trecv:
            event.delivery.settle()
            if self.step == "marker 1":
                if body != "marker1":
                    return self.fail("first message %r, want marker1: a transaction's send was visible before its commit" % body)
                self.step = "commit 1"
                self.txn.commit()
            elif self.step == "commit 1" and not self.t1:
                # The commit publishes, then answers: t1 may come first.
                if body != "t1":
                    return self.fail("after the commit got %r, want t1" % body)
                self.t1 = True
                self.after_commit1()
            elif self.step == "marker 2":
                if body != "marker2":
                    return self.fail("after the rollback got %r, want marker2" % body)
                self.step = "declare 3"
                self.container.declare_transaction(self.conn, handler=self)
            else:
                self.fail("topic message %r in step %s" % (body, self.step))
            return
        # The queue receiver.
        if self.step == "queue take":
            if body != "q1" or (event.message.delivery_count or 0) != 0:
                return self.fail("queue gave %r delivery-count %s, want q1 0" % (body, event.message.delivery_count))
            self.txn.accept(event.delivery)
            self.step = "queue rollback"
            self.txn.abort()
        elif self.step == "queue take again":
            self.take_again(event.message, event.delivery)
        elif self.step in ("queue rollback", "declare 4") and self.stash is None:
            self.stash = (event.message, event.delivery)
        else:
            self.fail("queue message %r in step %s" % (body, self.step))

    def take_again(self, msg, dlv):
        if msg.body != "q1" or msg.delivery_count != 1:
            return self.fail("after the rollback the queue gave %r delivery-count %s, want q1 1" % (msg.body, msg.delivery_count))
        self.txn.accept(dlv)
        self.step = "commit 4"
        self.txn.commit()


class Limit(MessagingHandler, TransactionHandler):
    """--max-txn N: N+1 sends in one transaction; the last is refused
    (amqp.maxTransactionMessages reached the gateway), and the commit fails."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.result = None

    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(self.args.amqp)
        self.snd = event.container.create_sender(self.conn, "e2e/py/txnlimit/" + RUN)
        self.timer = event.container.schedule(T, self)

    def on_timer_task(self, event):
        self.finish("timed out")

    def finish(self, result):
        if self.result is None:
            self.result = result
        self.timer.cancel()
        self.conn.close()

    def on_link_opened(self, event):
        if event.link == self.snd:
            self.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        for i in range(self.args.max_txn + 1):
            event.transaction.send(self.snd, Message(body="m%d" % i))
        event.transaction.commit()

    def on_transaction_committed(self, event):
        self.finish("committed %d messages in one transaction, over --max-txn %d" % (self.args.max_txn + 1, self.args.max_txn))

    def on_transaction_commit_failed(self, event):
        self.finish("ok")

    def on_transaction_declare_failed(self, event):
        self.finish("declare failed")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--amqp", required=True)
    p.add_argument("--admin", required=True)
    p.add_argument("--max-txn", type=int, default=0, help="the gateway's amqp.maxTransactionMessages: check it")
    args = p.parse_args()
    queue = "py-%s-txn" % RUN
    admin(args, "PUT", queue, {})
    h = Txn(args, queue)
    try:
        Container(h).run()
    finally:
        try:
            admin(args, "DELETE", queue)
        except OSError as e:
            print("warning: %s" % e, flush=True)
    if h.error or not h.done:
        print("FAIL proton_txn: %s" % (h.error or "ended in step " + h.step), flush=True)
        sys.exit(1)
    print("PASS proton_txn: transactional sends (topic, queue), commit, rollback, transactional acknowledgement", flush=True)
    if args.max_txn > 0:
        lim = Limit(args)
        Container(lim).run()
        if lim.result != "ok":
            print("FAIL proton_txn: amqp.maxTransactionMessages: %s" % lim.result, flush=True)
            sys.exit(1)
        print("PASS proton_txn: %d sends in one transaction: the commit fails (amqp.maxTransactionMessages=%d)" % (
            args.max_txn + 1, args.max_txn), flush=True)


if __name__ == "__main__":
    main()
