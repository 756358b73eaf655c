package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Topic;
import jakarta.jms.Session;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TextMessage;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.common.MqttMessage;
import org.eclipse.paho.mqttv5.common.packet.MqttProperties;
import org.eclipse.paho.mqttv5.common.packet.UserProperty;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * JMSType, JMSPriority and JMSTimestamp to MQTT 5 and back (docs/mapping.md,
 * "JMS headers"): user properties tolsey_amqp_subject, tolsey_amqp_priority,
 * tolsey_amqp_creation_time; JMSDeliveryMode and JMSExpiration as QoS and
 * message expiry; JMSCorrelationID of each AMQP id type through an MQTT 5
 * responder.
 */
@Timeout(30)
class HeadersTest extends GatewayTest {
    @Test
    void headersReachAnMqttResponderAndComeBackInItsReply(TestInfo info) throws Exception {
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info), got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            TemporaryQueue replyTo = s.createTemporaryQueue();
            MessageConsumer answers = s.createConsumer(replyTo);
            TextMessage req = s.createTextMessage("ping");
            req.setJMSType("order.v1");
            req.setJMSReplyTo(replyTo);
            req.setJMSCorrelationID("h-1");
            s.createProducer(s.createTopic(name(info))).send(req, DeliveryMode.PERSISTENT, 7, 0);
            long sent = req.getJMSTimestamp();

            MqttMessage r = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(r);
            assertEquals("order.v1", userProperty(r, "tolsey_amqp_subject"));
            assertEquals("7", userProperty(r, "tolsey_amqp_priority"));
            assertEquals(sent, Instant.parse(userProperty(r, "tolsey_amqp_creation_time")).toEpochMilli());

            mqttRespond(mc, r, "pong"); // echoes the user properties
            Message back = assertInstanceOf(TextMessage.class, answers.receive(WAIT));
            assertEquals("order.v1", back.getJMSType());
            assertEquals(7, back.getJMSPriority());
            assertEquals(sent, back.getJMSTimestamp());
            assertEquals("h-1", back.getJMSCorrelationID());
            for (String p : List.of("tolsey_amqp_subject", "tolsey_amqp_priority", "tolsey_amqp_creation_time")) {
                assertNull(back.getObjectProperty(p), p + " is said by its header, not a property");
            }
        } finally {
            close(mc);
        }
    }

    @Test
    void anMqttPublisherSetsThem(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer sub = s.createConsumer(s.createTopic(name(info)));
            MqttClient mc = mqttClient();
            try {
                mqttPublishText(mc, name(info), "reading", new UserProperty("tolsey_amqp_subject", "reading.v2"),
                        new UserProperty("tolsey_amqp_priority", "2"),
                        new UserProperty("tolsey_amqp_creation_time", "1700000000123"));
            } finally {
                close(mc);
            }
            Message m = assertInstanceOf(TextMessage.class, sub.receive(WAIT));
            assertEquals("reading.v2", m.getJMSType());
            assertEquals(2, m.getJMSPriority());
            assertEquals(1700000000123L, m.getJMSTimestamp());
        }
    }

    @Test
    void deliveryModeAndExpirationToMqtt(TestInfo info) throws Exception {
        // PERSISTENT is QoS 1, NON_PERSISTENT QoS 0 (the subscription asks
        // for 1); a time to live is the MQTT message expiry interval.
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info), got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageProducer p = s.createProducer(s.createTopic(name(info)));
            p.send(s.createTextMessage("persistent"), DeliveryMode.PERSISTENT, 4, 60_000);
            MqttMessage m = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(m);
            assertEquals("persistent", new String(m.getPayload(), StandardCharsets.UTF_8));
            assertEquals(1, m.getQos());
            Long expiry = m.getProperties().getMessageExpiryInterval();
            assertTrue(expiry != null && expiry > 0 && expiry <= 60, "message expiry interval " + expiry);

            p.send(s.createTextMessage("non-persistent"), DeliveryMode.NON_PERSISTENT, 4, 0);
            m = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(m);
            assertEquals("non-persistent", new String(m.getPayload(), StandardCharsets.UTF_8));
            assertEquals(0, m.getQos());
            assertNull(m.getProperties().getMessageExpiryInterval(), "no time to live, no expiry");
        } finally {
            close(mc);
        }
    }

    @Test
    void deliveryModeAndExpirationFromMqtt(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer sub = s.createConsumer(s.createTopic(name(info)));
            MqttClient mc = mqttClient();
            long before = System.currentTimeMillis();
            try {
                MqttMessage m = new MqttMessage("qos1".getBytes(StandardCharsets.UTF_8), 1, false, null);
                MqttProperties props = new MqttProperties();
                props.setPayloadFormat(true);
                props.setMessageExpiryInterval(60L);
                m.setProperties(props);
                mc.publish(name(info), m);
                m = new MqttMessage("qos0".getBytes(StandardCharsets.UTF_8), 0, false, null);
                props = new MqttProperties();
                props.setPayloadFormat(true);
                m.setProperties(props);
                mc.publish(name(info), m);
            } finally {
                close(mc);
            }
            for (int i = 0; i < 2; i++) { // either order: one publisher, but QoS 0 and 1
                TextMessage m = assertInstanceOf(TextMessage.class, sub.receive(WAIT));
                if (m.getText().equals("qos1")) {
                    assertEquals(DeliveryMode.PERSISTENT, m.getJMSDeliveryMode());
                    assertTrue(m.getJMSExpiration() >= before + 58_000 && m.getJMSExpiration() <= System.currentTimeMillis() + 60_000,
                            "JMSExpiration " + m.getJMSExpiration() + ", published at " + before + " with 60 s expiry");
                } else {
                    assertEquals("qos0", m.getText());
                    assertEquals(DeliveryMode.NON_PERSISTENT, m.getJMSDeliveryMode());
                    assertEquals(0, m.getJMSExpiration(), "no expiry");
                }
            }
        }
    }

    @Test
    void correlationIdTypesComeBackFromAnMqttResponder(TestInfo info) throws Exception {
        // Qpid JMS sends "ID:AMQP_ULONG:…" and "ID:AMQP_UUID:…" as AMQP ulong
        // and uuid ids, setJMSCorrelationIDAsBytes as binary, anything else
        // as a string. The MQTT responder sees the id's text (raw bytes for
        // binary) and echoes it with the user properties; the JMS requester
        // gets the id back with its type, on a queue named as JMSReplyTo.
        String[][] cases = {
            {"c-1", "c-1", "string"},
            {"ID:AMQP_ULONG:42", "42", "ulong"},
            {"ID:AMQP_UUID:0f8fad5b-d9cb-469f-a165-70867728950e", "0f8fad5b-d9cb-469f-a165-70867728950e", "uuid"},
            {null, null, null}, // binary, below
        };
        byte[] binary = {0, (byte) 0xff, '-', 'b', 'i', 'n'};
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info), got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue replyTo = s.createQueue(name(info) + "/replies");
            MessageConsumer answers = s.createConsumer(replyTo);
            MessageProducer p = s.createProducer(s.createTopic(name(info)));
            for (String[] tc : cases) {
                TextMessage req = s.createTextMessage("ping");
                req.setJMSReplyTo(replyTo);
                if (tc[0] != null) {
                    req.setJMSCorrelationID(tc[0]);
                } else {
                    req.setJMSCorrelationIDAsBytes(binary);
                }
                p.send(req);
                MqttMessage r = got.poll(WAIT, TimeUnit.MILLISECONDS);
                assertNotNull(r, "the MQTT responder got no request for " + tc[0]);
                byte[] data = r.getProperties().getCorrelationData();
                if (tc[0] != null) {
                    assertEquals(tc[1], new String(data, StandardCharsets.UTF_8), "correlation data for " + tc[0]);
                    String types = userProperty(r, "tolsey_amqp_types");
                    assertTrue(types != null && types.contains("\"$correlation-id\":\"" + tc[2] + "\""),
                            "tolsey_amqp_types " + types + " for " + tc[0]);
                } else {
                    assertArrayEquals(binary, data, "binary correlation data");
                }
                assertEquals("$queue/" + name(info) + "/replies", r.getProperties().getResponseTopic(),
                        "a queue as JMSReplyTo is its MQTT address");
                mqttRespond(mc, r, "pong");
                Message back = assertInstanceOf(TextMessage.class, answers.receive(WAIT), "no reply for " + tc[0]);
                if (tc[0] != null) {
                    assertEquals(tc[0], back.getJMSCorrelationID());
                } else {
                    assertArrayEquals(binary, back.getJMSCorrelationIDAsBytes());
                }
            }
        } finally {
            close(mc);
        }
    }

    @Test
    void anMqttRequestsResponseTopicIsAJmsReplyToOfEachKind(TestInfo info) throws Exception {
        // An MQTT 5 requester's Response Topic is the JMS responder's
        // JMSReplyTo: a Topic, or a Queue for a queue's MQTT address
        // ($queue/<name>); the JMS reply sent to it reaches that topic or queue.
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer requests = s.createConsumer(s.createTopic(name(info)));
            MessageProducer replies = s.createProducer(null);
            Queue q = s.createQueue(name(info) + "/queue-replies");
            MessageConsumer onQueue = s.createConsumer(q);
            MessageConsumer onTopic = s.createConsumer(s.createTopic(name(info) + "/topic-replies"));
            MqttClient mc = mqttClient();
            try {
                for (String rt : List.of("$queue/" + name(info) + "/queue-replies", name(info) + "/topic-replies")) {
                    MqttMessage m = new MqttMessage("req".getBytes(StandardCharsets.UTF_8), 1, false, null);
                    MqttProperties props = new MqttProperties();
                    props.setPayloadFormat(true);
                    props.setResponseTopic(rt);
                    m.setProperties(props);
                    mc.publish(name(info), m);
                    Message req = assertInstanceOf(TextMessage.class, requests.receive(WAIT), "no request for " + rt);
                    boolean queue = rt.startsWith("$queue/");
                    if (queue) {
                        assertInstanceOf(Queue.class, req.getJMSReplyTo(), "JMSReplyTo for " + rt);
                    } else {
                        assertInstanceOf(Topic.class, req.getJMSReplyTo(), "JMSReplyTo for " + rt);
                    }
                    replies.send(req.getJMSReplyTo(), s.createTextMessage("re " + rt));
                    TextMessage back = assertInstanceOf(TextMessage.class, (queue ? onQueue : onTopic).receive(WAIT),
                            "the reply to " + req.getJMSReplyTo() + " did not arrive");
                    assertEquals("re " + rt, back.getText());
                }
            } finally {
                close(mc);
            }
        }
    }
}
