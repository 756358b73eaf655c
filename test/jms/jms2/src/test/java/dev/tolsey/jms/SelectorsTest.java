package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.InvalidSelectorException;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.common.packet.UserProperty;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.function.Executable;

/**
 * JMS message selectors (docs/jms.md, "Selectors") as Qpid JMS sends them:
 * the apache.org:selector-filter:string source filter, over typed JMS
 * properties and MQTT 5 user properties alike.
 */
@Timeout(60)
class SelectorsTest extends GatewayTest {
    static final String SELECTOR = "price > 10 AND region = 'eu'";

    static TextMessage priced(Session s, String text, Object price, String region) throws Exception {
        TextMessage m = s.createTextMessage(text);
        if (price instanceof Integer i) {
            m.setIntProperty("price", i);
        } else if (price instanceof Long l) {
            m.setLongProperty("price", l);
        } else if (price instanceof Double d) {
            m.setDoubleProperty("price", d);
        }
        if (region != null) {
            m.setStringProperty("region", region);
        }
        return m;
    }

    static void mqttPublish(MqttClient mc, String topic, String text, String price, String region) throws Exception {
        mqttPublishText(mc, topic, text, new UserProperty("price", price), new UserProperty("region", region));
    }

    /** Receives until n messages came or one does not come in time. */
    static Set<String> receive(MessageConsumer c, int n) throws Exception {
        Set<String> got = new TreeSet<>();
        for (int i = 0; i < n; i++) {
            Message m = c.receive(WAIT);
            if (m == null) {
                break;
            }
            got.add(((TextMessage) m).getText());
        }
        return got;
    }

    @Test
    void topicSubscriberGetsWhatItsSelectorSelects(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer selective = s.createConsumer(t, SELECTOR);
            MessageConsumer all = s.createConsumer(t);
            MessageProducer p = s.createProducer(t);
            p.send(priced(s, "jms-int-12-eu", 12, "eu"));
            p.send(priced(s, "jms-int-5-eu", 5, "eu"));
            p.send(priced(s, "jms-long-20-us", 20L, "us"));
            p.send(priced(s, "jms-double-10.5-eu", 10.5, "eu"));
            p.send(priced(s, "jms-no-price-eu", null, "eu"));
            MqttClient mc = mqttClient();
            try {
                mqttPublish(mc, name(info), "mqtt-15-eu", "15", "eu");
                mqttPublish(mc, name(info), "mqtt-3-eu", "3", "eu");
                mqttPublish(mc, name(info), "mqtt-warm-eu", "warm", "eu");
            } finally {
                close(mc);
            }
            assertEquals(8, receive(all, 8).size(), "the plain subscriber gets everything");
            assertEquals(new TreeSet<>(List.of("jms-int-12-eu", "jms-double-10.5-eu", "mqtt-15-eu")), receive(selective, 3));
            assertNull(selective.receive(300), "nothing the selector does not select");
        }
    }

    @Test
    void selectorOnJmsTypeAndPriority(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            MessageConsumer cars = s.createConsumer(t, "JMSType = 'car' AND JMSPriority > 4");
            MessageProducer p = s.createProducer(t);
            for (String[] m : new String[][] {{"car", "7"}, {"car", "1"}, {"bike", "9"}, {"car", "4"}}) {
                TextMessage tm = s.createTextMessage(m[0] + "-" + m[1]);
                tm.setJMSType(m[0]);
                p.send(tm, jakarta.jms.DeliveryMode.PERSISTENT, Integer.parseInt(m[1]), 0);
            }
            assertEquals("car-7", assertInstanceOf(TextMessage.class, cars.receive(WAIT)).getText());
            assertNull(cars.receive(300));
        }
    }

    @Test
    void queueConsumerLeavesWhatItDoesNotSelect(TestInfo info) throws Exception {
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            MessageProducer p = s.createProducer(q);
            for (int i = 0; i < 6; i++) {
                TextMessage m = s.createTextMessage((i % 2 == 0 ? "red-" : "blue-") + i);
                m.setStringProperty("color", i % 2 == 0 ? "red" : "blue");
                m.setIntProperty("n", i);
                p.send(m);
            }
            MessageConsumer reds = s.createConsumer(q, "color = 'red'");
            List<String> got = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                got.add(assertInstanceOf(TextMessage.class, reds.receive(WAIT)).getText());
            }
            assertEquals(List.of("red-0", "red-2", "red-4"), got, "in queue order");
            assertNull(reds.receive(300));
            reds.close();
            MessageConsumer rest = s.createConsumer(q);
            got.clear();
            for (int i = 0; i < 3; i++) {
                got.add(assertInstanceOf(TextMessage.class, rest.receive(WAIT), "the unselected messages stayed").getText());
            }
            assertEquals(List.of("blue-1", "blue-3", "blue-5"), got);
            assertNull(rest.receive(300));
        }
    }

    @Test
    void durableSubscriberStoresWhatItsSelectorSelects(TestInfo info) throws Exception {
        String topic = name(info);
        try (Connection c = SessionsTest.connectAs("selector-client")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(topic);
            s.createDurableSubscriber(t, "selective", SELECTOR, false).close();
            MessageProducer p = s.createProducer(t);
            p.send(priced(s, "a-12-eu", 12, "eu"));
            p.send(priced(s, "b-12-us", 12, "us"));
            p.send(priced(s, "c-1-eu", 1, "eu"));
            MqttClient mc = mqttClient();
            try {
                mqttPublish(mc, topic, "d-99-eu", "99", "eu");
            } finally {
                close(mc);
            }
        }
        try (Connection c = SessionsTest.connectAs("selector-client")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer sub = s.createDurableSubscriber(s.createTopic(topic), "selective", SELECTOR, false);
            assertEquals("a-12-eu", assertInstanceOf(TextMessage.class, sub.receive(WAIT)).getText());
            assertEquals("d-99-eu", assertInstanceOf(TextMessage.class, sub.receive(WAIT)).getText());
            assertNull(sub.receive(300), "the subscription stored only what its selector selects");
            sub.close();
            s.unsubscribe("selective");
        }
    }

    @Test
    void invalidSelectorIsRefusedAtCreateConsumer(TestInfo info) throws Exception {
        try (Connection c = SessionsTest.connectAs("invalid-selector-client")) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(name(info));
            Queue q = s.createQueue(name(info));
            s.createProducer(q).send(s.createTextMessage("so that the queue exists"));
            // A syntax error, a string compared with <: Qpid JMS parses the
            // selector itself before it attaches, and raises
            // InvalidSelectorException.
            for (String bad : List.of("price >", "price < 'x'")) {
                assertThrows(InvalidSelectorException.class, () -> s.createConsumer(t, bad), bad);
                assertThrows(InvalidSelectorException.class, () -> s.createConsumer(q, bad), bad);
            }
            // Selectors Qpid JMS's parser lets through but the gateway refuses
            // (types that cannot work; longer than amqp.maxSelectorLength): the
            // attach is refused with amqp:invalid-field, which Qpid JMS 2.7
            // raises as a plain JMSException (it maps no link error to
            // InvalidSelectorException), and no consumer is created.
            String tooLong = "x = 1" + " OR x = 1".repeat(600);
            for (String bad : List.of("'a' + 1 > 0", "region = 'eu' AND -'x' < 0", tooLong)) {
                String what = bad.length() > 40 ? bad.length() + " bytes" : bad;
                for (Executable create : List.<Executable>of(() -> s.createConsumer(t, bad), () -> s.createConsumer(q, bad),
                        () -> s.createDurableSubscriber(t, "bad", bad, false))) {
                    JMSException e = assertThrows(JMSException.class, create, what);
                    assertTrue(e.getMessage().contains("amqp:invalid-field"), what + ": " + e.getMessage());
                }
            }
            // The session is still usable.
            MessageConsumer ok = s.createConsumer(q, "TRUE");
            assertEquals("so that the queue exists", assertInstanceOf(TextMessage.class, ok.receive(WAIT)).getText());
        }
    }
}
