package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.BytesMessage;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.JMSException;
import jakarta.jms.JMSSecurityException;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.common.MqttMessage;
import org.eclipse.paho.mqttv5.common.packet.UserProperty;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/** Qpid JMS 2.x (jakarta.jms): what a JMS application does on its first day. */
@Timeout(30)
class Jms2Test extends GatewayTest {
    // ---- what worked before the JMS work (docs/jms.md) ----

    @Test
    void connectsAnonymously() throws Exception {
        try (Connection c = new JmsConnectionFactory(gw.uri("amqp.saslMechanisms=ANONYMOUS")).createConnection()) {
            c.start();
            c.createSession(false, Session.AUTO_ACKNOWLEDGE).close();
        }
    }

    @Test
    void connectsWithPlain() throws Exception {
        try (Connection c = new JmsConnectionFactory(Gateway.USER, Gateway.PASSWORD, gw.uri("amqp.saslMechanisms=PLAIN")).createConnection()) {
            c.start();
            c.createSession(false, Session.AUTO_ACKNOWLEDGE).close();
        }
    }

    @Test
    void refusesAWrongPassword() {
        JmsConnectionFactory f = new JmsConnectionFactory(Gateway.USER, "wrong", gw.uri("amqp.saslMechanisms=PLAIN"));
        assertThrows(JMSSecurityException.class, () -> {
            try (Connection c = f.createConnection()) {
                c.start();
            }
        });
    }

    @Test
    void topicPublishSubscribe(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub1 = s.createConsumer(t);
            MessageConsumer sub2 = s.createConsumer(t);
            MessageProducer p = s.createProducer(t);
            TextMessage m = s.createTextMessage("hello");
            m.setJMSCorrelationID("corr-1");
            m.setStringProperty("colour", "blue");
            p.send(m);
            for (MessageConsumer sub : List.of(sub1, sub2)) {
                TextMessage got = assertInstanceOf(TextMessage.class, sub.receive(WAIT));
                assertEquals("hello", got.getText());
                assertEquals("corr-1", got.getJMSCorrelationID());
                assertEquals("blue", got.getStringProperty("colour"));
                assertEquals(DeliveryMode.PERSISTENT, got.getJMSDeliveryMode());
            }
        }
    }

    @Test
    void bytesMessage(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub = s.createConsumer(t);
            BytesMessage m = s.createBytesMessage();
            byte[] body = {0, 1, 2, (byte) 0xff, 'x'};
            m.writeBytes(body);
            s.createProducer(t).send(m);
            BytesMessage got = assertInstanceOf(BytesMessage.class, sub.receive(WAIT));
            byte[] b = new byte[(int) got.getBodyLength()];
            got.readBytes(b);
            assertArrayEquals(body, b);
        }
    }

    @Test
    void queueSendBrowseReceive(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            MessageProducer p = s.createProducer(q); // creates the queue (queues.autoCreate)
            for (int i = 0; i < 3; i++) {
                p.send(s.createTextMessage("m" + i));
            }
            List<String> seen = new ArrayList<>();
            try (QueueBrowser b = s.createBrowser(q)) {
                var e = b.getEnumeration();
                long deadline = System.currentTimeMillis() + WAIT;
                while (seen.size() < 3 && System.currentTimeMillis() < deadline) {
                    if (e.hasMoreElements()) {
                        seen.add(((TextMessage) e.nextElement()).getText());
                    }
                }
            }
            assertEquals(List.of("m0", "m1", "m2"), seen, "the browser sees the queue in order");
            MessageConsumer cons = s.createConsumer(q);
            for (int i = 0; i < 3; i++) {
                TextMessage got = assertInstanceOf(TextMessage.class, cons.receive(WAIT), "browsing took nothing away");
                assertEquals("m" + i, got.getText());
            }
            assertNull(cons.receive(200), "each message once");
        }
    }

    @Test
    void queueKeepsMessagesForALateConsumer(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            s.createProducer(q).send(s.createTextMessage("later"));
        }
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TextMessage got = assertInstanceOf(TextMessage.class, s.createConsumer(s.createQueue(name(info))).receive(WAIT));
            assertEquals("later", got.getText());
        }
    }

    @Test
    void temporaryQueueRequestReply(TestInfo info) throws Exception {
        try (Connection server = connect(); Connection client = connect()) {
            Session ss = server.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue service = ss.createQueue(name(info));
            MessageConsumer requests = ss.createConsumer(service);
            MessageProducer replies = ss.createProducer(null);
            requests.setMessageListener(req -> {
                try {
                    TextMessage r = ss.createTextMessage("re: " + ((TextMessage) req).getText());
                    r.setJMSCorrelationID(req.getJMSCorrelationID());
                    replies.send(req.getJMSReplyTo(), r);
                } catch (JMSException e) {
                    throw new RuntimeException(e);
                }
            });

            Session cs = client.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TemporaryQueue replyTo = cs.createTemporaryQueue();
            MessageConsumer answers = cs.createConsumer(replyTo);
            TextMessage req = cs.createTextMessage("ping");
            req.setJMSReplyTo(replyTo);
            req.setJMSCorrelationID("req-7");
            cs.createProducer(service).send(req);
            TextMessage got = assertInstanceOf(TextMessage.class, answers.receive(WAIT));
            assertEquals("re: ping", got.getText());
            assertEquals("req-7", got.getJMSCorrelationID());
        }
    }

    @Test
    void mqttSubscriberGetsAJmsTextMessage(TestInfo info) throws Exception {
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info), got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TextMessage m = s.createTextMessage("to mqtt");
            m.setStringProperty("k", "v");
            s.createProducer(s.createTopic(name(info))).send(m);
            MqttMessage mm = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(mm);
            assertEquals("to mqtt", new String(mm.getPayload(), StandardCharsets.UTF_8));
            assertEquals("v", userProperty(mm, "k"));
        } finally {
            close(mc);
        }
    }

    @Test
    void jmsSubscriberGetsAnMqttPublish(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer sub = s.createConsumer(s.createTopic(name(info)));
            MqttClient mc = mqttClient();
            try {
                mqttPublishText(mc, name(info), "from mqtt", new UserProperty("k", "v"));
            } finally {
                close(mc);
            }
            TextMessage got = assertInstanceOf(TextMessage.class, sub.receive(WAIT));
            assertEquals("from mqtt", got.getText());
            assertEquals("v", got.getStringProperty("k"));
            assertTrue(got.getJMSMessageID() != null && got.getJMSMessageID().startsWith("ID:tolsey:"),
                    "every AMQP message has a message-id: " + got.getJMSMessageID());
        }
    }

    @Test
    void transactedSessionCommitsAndRollsBack(TestInfo info) throws Exception {
        // AMQP local transactions (docs/jms.md, "Transactions"): sends are
        // invisible until commit and dropped at rollback; a receive rolled
        // back comes again, redelivered; a committed receive is gone.
        try (Connection c = connect()) {
            Session s = c.createSession(true, Session.SESSION_TRANSACTED);
            Queue q = s.createQueue(name(info));
            Topic t = s.createTopic(name(info) + "/t");
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer tc = plain.createConsumer(t);
            MessageProducer qp = s.createProducer(q);
            MessageProducer tp = s.createProducer(t);
            qp.send(s.createTextMessage("q-rolled-back"));
            tp.send(s.createTextMessage("t-rolled-back"));
            s.rollback();
            qp.send(s.createTextMessage("q1"));
            tp.send(s.createTextMessage("t1"));
            assertNull(tc.receive(300), "a topic message visible before its commit");
            s.commit();
            assertEquals("t1", assertInstanceOf(TextMessage.class, tc.receive(WAIT)).getText());
            MessageConsumer qc = s.createConsumer(q);
            TextMessage m = assertInstanceOf(TextMessage.class, qc.receive(WAIT));
            assertEquals("q1", m.getText(), "the rolled-back send never reached the queue");
            assertTrue(!m.getJMSRedelivered());
            s.rollback();
            m = assertInstanceOf(TextMessage.class, qc.receive(WAIT));
            assertEquals("q1", m.getText());
            assertTrue(m.getJMSRedelivered(), "redelivered after the rollback");
            s.commit();
            assertNull(qc.receive(300), "the queue is empty after the committed receive");
            qc.close();
            assertNull(plain.createConsumer(q).receive(300), "the committed receive came back");
        }
    }

    @Test
    void temporaryQueueReplyFromAnMqttResponder(TestInfo info) throws Exception {
        // An MQTT 5 responder answers on the Response Topic with the
        // Correlation Data it got; the JMS requester's temporary queue gets it.
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info), got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TemporaryQueue replyTo = s.createTemporaryQueue();
            MessageConsumer answers = s.createConsumer(replyTo);
            TextMessage req = s.createTextMessage("ping");
            req.setJMSReplyTo(replyTo);
            req.setJMSCorrelationID("tq-1");
            s.createProducer(s.createTopic(name(info))).send(req);
            MqttMessage r = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(r);
            mqttRespond(mc, r, "pong");
            TextMessage back = assertInstanceOf(TextMessage.class, answers.receive(WAIT),
                    "no reply on the temporary queue; the MQTT responder published to " + r.getProperties().getResponseTopic());
            assertEquals("pong", back.getText());
            assertEquals("tq-1", back.getJMSCorrelationID());
        } finally {
            close(mc);
        }
    }
}
