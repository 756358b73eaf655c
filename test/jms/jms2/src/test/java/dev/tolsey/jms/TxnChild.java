package dev.tolsey.jms;

import jakarta.jms.Connection;
import jakarta.jms.Message;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import org.apache.qpid.jms.JmsConnectionFactory;

/**
 * The transacted client of TransactionsTest.connectionThatVanishesRollsBack,
 * run in a child JVM that the test kills with SIGKILL: takes one message
 * from a queue and sends one to a topic and one to a queue in a transaction,
 * says READY, and waits to be killed without committing.
 *
 * Arguments: connection URI, input queue, output topic, output queue.
 */
public final class TxnChild {
    public static void main(String[] args) throws Exception {
        // forceSyncSend: Qpid JMS sends in a transaction asynchronously by
        // default; synchronous sends are known to the gateway before READY.
        Connection c = new JmsConnectionFactory(args[0] + "?jms.forceSyncSend=true").createConnection();
        c.start();
        Session s = c.createSession(true, Session.SESSION_TRANSACTED);
        Message in = s.createConsumer(s.createQueue(args[1])).receive(10_000);
        if (in == null) {
            System.out.println("NO INPUT");
            System.exit(2);
        }
        MessageProducer p = s.createProducer(null);
        p.send(s.createTopic(args[2]), s.createTextMessage("uncommitted topic send"));
        p.send(s.createQueue(args[3]), s.createTextMessage("uncommitted queue send"));
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
