package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TextMessage;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.common.MqttMessage;
import org.eclipse.paho.mqttv5.common.packet.UserProperty;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * JMSType, JMSPriority and JMSTimestamp to MQTT 5 and back (docs/mapping.md,
 * "JMS headers"): user properties tolsey_amqp_subject, tolsey_amqp_priority,
 * tolsey_amqp_creation_time.
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
}
