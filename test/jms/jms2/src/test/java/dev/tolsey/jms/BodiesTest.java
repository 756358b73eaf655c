package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.BytesMessage;
import jakarta.jms.Connection;
import jakarta.jms.MapMessage;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.ObjectMessage;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.StreamMessage;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.common.MqttMessage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * Every JMS body type, the JMS headers and typed properties pass AMQP to
 * AMQP unchanged; MQTT subscribers get the documented rendering
 * (docs/mapping.md, "Typed bodies").
 */
@Timeout(30)
class BodiesTest extends GatewayTest {
    @Test
    void mapMessage(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub = s.createConsumer(t);
            MapMessage m = s.createMapMessage();
            m.setInt("int", 42);
            m.setLong("long", 1L << 40);
            m.setString("str", "text");
            m.setBoolean("bool", true);
            m.setDouble("double", 1.5);
            m.setBytes("bytes", new byte[] {1, 2, 3});
            s.createProducer(t).send(m);
            MapMessage got = assertInstanceOf(MapMessage.class, sub.receive(WAIT));
            assertEquals(42, got.getObject("int"));
            assertEquals(1L << 40, got.getObject("long"));
            assertEquals("text", got.getObject("str"));
            assertEquals(true, got.getObject("bool"));
            assertEquals(1.5, got.getObject("double"));
            assertArrayEquals(new byte[] {1, 2, 3}, got.getBytes("bytes"));
        }
    }

    @Test
    void streamMessage(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub = s.createConsumer(t);
            StreamMessage m = s.createStreamMessage();
            m.writeInt(7);
            m.writeString("seven");
            m.writeBoolean(false);
            m.writeShort((short) -3);
            s.createProducer(t).send(m);
            StreamMessage got = assertInstanceOf(StreamMessage.class, sub.receive(WAIT));
            assertEquals(7, got.readObject());
            assertEquals("seven", got.readObject());
            assertEquals(false, got.readObject());
            assertEquals((short) -3, got.readObject());
        }
    }

    @Test
    void objectMessageStaysOpaque(TestInfo info) throws Exception {
        try (Connection c = connect("jms.deserializationPolicy.allowList=java.util,java.lang")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub = s.createConsumer(t);
            ArrayList<String> body = new ArrayList<>(List.of("a", "b"));
            s.createProducer(t).send(s.createObjectMessage(body));
            ObjectMessage got = assertInstanceOf(ObjectMessage.class, sub.receive(WAIT));
            assertEquals(body, got.getObject());
        }
    }

    @Test
    void plainMessage(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub = s.createConsumer(t);
            Message m = s.createMessage();
            m.setStringProperty("only", "headers");
            s.createProducer(t).send(m);
            Message got = sub.receive(WAIT);
            assertNotNull(got);
            assertFalse(got instanceof TextMessage || got instanceof BytesMessage || got instanceof MapMessage,
                    "a plain Message stays one, got " + got.getClass());
            assertEquals("headers", got.getStringProperty("only"));
        }
    }

    @Test
    void headersAndTypedPropertiesUnchanged(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            MessageProducer p = s.createProducer(q);
            TextMessage m = s.createTextMessage("typed");
            m.setJMSType("order.created");
            m.setIntProperty("i", 7);
            m.setLongProperty("l", 1L << 40);
            m.setBooleanProperty("b", true);
            m.setDoubleProperty("d", 2.25);
            m.setFloatProperty("f", 0.5f);
            m.setShortProperty("s", (short) 3);
            m.setByteProperty("y", (byte) -1);
            p.setPriority(7);
            p.send(m);
            Message got = s.createConsumer(q).receive(WAIT);
            assertNotNull(got);
            assertEquals(m.getJMSMessageID(), got.getJMSMessageID());
            assertEquals(m.getJMSTimestamp(), got.getJMSTimestamp());
            assertEquals("order.created", got.getJMSType());
            assertEquals(7, got.getJMSPriority());
            assertEquals(7, got.getObjectProperty("i"));
            assertEquals(1L << 40, got.getObjectProperty("l"));
            assertEquals(true, got.getObjectProperty("b"));
            assertEquals(2.25, got.getObjectProperty("d"));
            assertEquals(0.5f, got.getObjectProperty("f"));
            assertEquals((short) 3, got.getObjectProperty("s"));
            assertEquals((byte) -1, got.getObjectProperty("y"));
        }
    }

    @Test
    void mqttSubscriberSeesAMapMessageAsJson(TestInfo info) throws Exception {
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info), got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MapMessage m = s.createMapMessage();
            m.setInt("n", 1);
            m.setString("s", "x");
            s.createProducer(s.createTopic(name(info))).send(m);
            MqttMessage mm = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(mm);
            String json = new String(mm.getPayload(), StandardCharsets.UTF_8);
            // A JMS MapMessage keeps no order: either order is the same object.
            assertTrue(json.equals("{\"n\":1,\"s\":\"x\"}") || json.equals("{\"s\":\"x\",\"n\":1}"), json);
            assertEquals("application/json", mm.getProperties().getContentType());
            assertEquals("map", userProperty(mm, "tolsey_amqp_type"));
        } finally {
            close(mc);
        }
    }

    @Test
    void mqttReplyToAMapMessageComesBackAsOne(TestInfo info) throws Exception {
        // An MQTT responder echoes what it got (JSON and the type property);
        // the JMS requester gets a MapMessage again.
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info) + "/req", got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic replies = s.createTopic(name(info) + "/reply");
            MessageConsumer sub = s.createConsumer(replies);
            MapMessage m = s.createMapMessage();
            m.setString("q", "question");
            m.setJMSReplyTo(replies);
            s.createProducer(s.createTopic(name(info) + "/req")).send(m);
            MqttMessage req = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(req);
            mqttRespond(mc, req, null);
            MapMessage back = assertInstanceOf(MapMessage.class, sub.receive(WAIT));
            assertEquals("question", back.getString("q"));
            assertNull(back.getObjectProperty("tolsey_amqp_type"), "the type property is consumed");
        } finally {
            close(mc);
        }
    }

    @Test
    void mqttResponderKeepsTypedProperties(TestInfo info) throws Exception {
        // JMS request with typed properties → MQTT 5 responder that echoes
        // the user properties (and answers on the Response Topic with the
        // Correlation Data) → the JMS requester gets the types back.
        BlockingQueue<MqttMessage> got = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(name(info) + "/req", got);
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic replies = s.createTemporaryTopic();
            MessageConsumer sub = s.createConsumer(replies);
            TextMessage m = s.createTextMessage("req");
            m.setIntProperty("i", 7);
            m.setLongProperty("l", 1L << 40);
            m.setBooleanProperty("b", true);
            m.setDoubleProperty("d", 2.5);
            m.setStringProperty("s", "str");
            m.setFloatProperty("f", 0.25f);
            m.setShortProperty("h", (short) -3);
            m.setByteProperty("y", (byte) 100);
            m.setJMSReplyTo(replies);
            m.setJMSCorrelationID("c-1");
            s.createProducer(s.createTopic(name(info) + "/req")).send(m);
            MqttMessage req = got.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(req);
            assertEquals("7", userProperty(req, "i"));
            mqttRespond(mc, req, "resp");
            TextMessage back = assertInstanceOf(TextMessage.class, sub.receive(WAIT));
            assertEquals("resp", back.getText());
            assertEquals(7, back.getObjectProperty("i"));
            assertEquals(1L << 40, back.getObjectProperty("l"));
            assertEquals(true, back.getObjectProperty("b"));
            assertEquals(2.5, back.getObjectProperty("d"));
            assertEquals("str", back.getObjectProperty("s"));
            assertEquals(0.25f, back.getObjectProperty("f"));
            assertEquals((short) -3, back.getObjectProperty("h"));
            assertEquals((byte) 100, back.getObjectProperty("y"));
            assertEquals("c-1", back.getJMSCorrelationID());
        } finally {
            close(mc);
        }
    }

    @Test
    void largeMapMessageOverSmallFrames(TestInfo info) throws Exception {
        try (Connection c = connect("amqp.maxFrameSize=4096")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer sub = s.createConsumer(t);
            MapMessage m = s.createMapMessage();
            byte[] big = new byte[1 << 20];
            for (int i = 0; i < big.length; i++) {
                big[i] = (byte) i;
            }
            m.setBytes("big", big);
            for (int i = 0; i < 1000; i++) {
                m.setInt("k" + i, i);
            }
            s.createProducer(t).send(m);
            MapMessage got = assertInstanceOf(MapMessage.class, sub.receive(WAIT * 2));
            assertArrayEquals(big, got.getBytes("big"));
            assertEquals(999, got.getInt("k999"));
            assertEquals(1001, Collections.list(got.getMapNames()).size());
        }
    }
}
