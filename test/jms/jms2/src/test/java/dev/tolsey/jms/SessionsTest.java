package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.InvalidClientIDException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import jakarta.jms.TopicSubscriber;
import java.util.HashSet;
import java.util.Set;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * Subscriptions, acknowledgement modes, expiration and failover as a JMS
 * application uses them (docs/jms.md), against the gateway as it is.
 */
@Timeout(60)
class SessionsTest extends GatewayTest {
    static final int INDIVIDUAL_ACKNOWLEDGE = 101; // Qpid JMS's own mode (JmsSession, not public)

    static Connection connectAs(String clientID) throws Exception {
        return connectAs(gw, clientID);
    }

    static Connection connectAs(Gateway g, String clientID) throws Exception {
        Connection c = new JmsConnectionFactory(g.uri()).createConnection();
        c.setClientID(clientID);
        c.start();
        return c;
    }

    /**
     * A ClientID is unique (JMS 2.0 6.1.2): a second connection with one in
     * use gets InvalidClientIDException (Qpid JMS asks for
     * sole-connection-for-container), the first one goes on, and the id is
     * free again once it is closed.
     */
    @Test
    void clientIdInUseIsRefused(TestInfo info) throws Exception {
        String id = "unique-" + name(info);
        try (Connection first = connectAs(id)) {
            assertThrows(InvalidClientIDException.class, () -> connectAs(id));
            Session s = first.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createTemporaryQueue();
            s.createProducer(q).send(s.createTextMessage("still here"));
            assertEquals("still here", ((TextMessage) s.createConsumer(q).receive(WAIT)).getText());
        }
        try (Connection again = connectAs(id)) {
            assertNotNull(again.createSession(false, Session.AUTO_ACKNOWLEDGE));
        }
    }

    @Test
    void durableSubscriberGetsWhatWasPublishedWhileAway(TestInfo info) throws Exception {
        String topic = name(info);
        try (Connection c = connectAs("durable-client")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(topic);
            TopicSubscriber sub = s.createDurableSubscriber(t, "sub1");
            s.createProducer(t).send(s.createTextMessage("m0"));
            assertEquals("m0", ((TextMessage) sub.receive(WAIT)).getText());
            sub.close(); // detached, not unsubscribed
            MessageProducer p = s.createProducer(t);
            p.send(s.createTextMessage("m1"));
            p.send(s.createTextMessage("m2"));
        }
        try (Connection c = connectAs("durable-client")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TopicSubscriber sub = s.createDurableSubscriber(s.createTopic(topic), "sub1");
            assertEquals("m1", ((TextMessage) sub.receive(WAIT)).getText());
            assertEquals("m2", ((TextMessage) sub.receive(WAIT)).getText());
            sub.close();
            s.unsubscribe("sub1");
            s.createProducer(s.createTopic(topic)).send(s.createTextMessage("after unsubscribe"));
            TopicSubscriber again = s.createDurableSubscriber(s.createTopic(topic), "sub1");
            assertNull(again.receive(300), "a new subscription starts empty");
        }
    }

    @Test
    void sharedConsumersSplitTheMessages(TestInfo info) throws Exception {
        for (boolean durable : new boolean[] {false, true}) {
            try (Connection c1 = connect(); Connection c2 = connect()) {
                Session s1 = c1.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Session s2 = c2.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Topic t = s1.createTopic(name(info) + "/" + durable);
                String sub = "shared-" + durable;
                MessageConsumer a = durable ? s1.createSharedDurableConsumer(t, sub) : s1.createSharedConsumer(t, sub);
                MessageConsumer b = durable ? s2.createSharedDurableConsumer(t, sub) : s2.createSharedConsumer(t, sub);
                MessageProducer p = s1.createProducer(t);
                for (int i = 0; i < 10; i++) {
                    p.send(s1.createTextMessage("m" + i));
                }
                Set<String> seen = new HashSet<>();
                long deadline = System.currentTimeMillis() + WAIT;
                while (seen.size() < 10 && System.currentTimeMillis() < deadline) {
                    for (MessageConsumer mc : new MessageConsumer[] {a, b}) {
                        Message m = mc.receiveNoWait();
                        if (m != null) {
                            assertTrue(seen.add(((TextMessage) m).getText()), "each message once: " + seen);
                        }
                    }
                }
                assertEquals(10, seen.size(), "durable=" + durable + ": " + seen);
                if (durable) {
                    a.close();
                    b.close();
                    s1.unsubscribe(sub);
                }
            }
        }
    }

    @Test
    void expirationIsCarried(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            MessageProducer p = s.createProducer(q);
            p.setTimeToLive(60_000);
            long before = System.currentTimeMillis();
            p.send(s.createTextMessage("ttl"));
            Message m = s.createConsumer(q).receive(WAIT);
            assertNotNull(m);
            assertTrue(m.getJMSExpiration() >= before + 59_000 && m.getJMSExpiration() <= System.currentTimeMillis() + 60_000,
                    "JMSExpiration " + m.getJMSExpiration());
        }
    }

    @Test
    void clientAcknowledgeRecoverRedelivers(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            s.createProducer(q).send(s.createTextMessage("again"));
            MessageConsumer cons = s.createConsumer(q);
            Message first = cons.receive(WAIT);
            assertNotNull(first);
            assertFalse(first.getJMSRedelivered());
            assertEquals(1, first.getIntProperty("JMSXDeliveryCount"));
            s.recover();
            Message second = cons.receive(WAIT);
            assertNotNull(second, "recover() redelivers the unacknowledged message");
            assertEquals("again", ((TextMessage) second).getText());
            assertTrue(second.getJMSRedelivered());
            assertEquals(2, second.getIntProperty("JMSXDeliveryCount"));
            second.acknowledge();
        }
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            assertNull(s.createConsumer(s.createQueue(name(info))).receive(300), "acknowledged: gone from the queue");
        }
    }

    @Test
    void individualAndDupsOkAcknowledge(TestInfo info) throws Exception {
        for (int mode : new int[] {INDIVIDUAL_ACKNOWLEDGE, Session.DUPS_OK_ACKNOWLEDGE}) {
            String qname = name(info) + "/" + mode;
            try (Connection c = connect()) {
                Session s = c.createSession(false, mode);
                Queue q = s.createQueue(qname);
                MessageProducer p = s.createProducer(q);
                p.send(s.createTextMessage("a"));
                p.send(s.createTextMessage("b"));
                MessageConsumer cons = s.createConsumer(q);
                Message a = cons.receive(WAIT);
                Message b = cons.receive(WAIT);
                assertEquals("a", ((TextMessage) a).getText());
                assertEquals("b", ((TextMessage) b).getText());
                if (mode == INDIVIDUAL_ACKNOWLEDGE) {
                    b.acknowledge(); // only b
                }
            }
            try (Connection c = connect()) {
                Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Message left = s.createConsumer(s.createQueue(qname)).receive(mode == INDIVIDUAL_ACKNOWLEDGE ? WAIT : 300);
                if (mode == INDIVIDUAL_ACKNOWLEDGE) {
                    assertEquals("a", ((TextMessage) assertInstanceOf(TextMessage.class, left)).getText(),
                            "the message not acknowledged individually comes back");
                } else {
                    assertNull(left, "DUPS_OK acknowledged both");
                }
            }
        }
    }
}
