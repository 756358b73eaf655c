package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;

import jakarta.jms.Connection;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.List;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Durable subscriptions are queues of the queue engine, kept by the embedded
 * store across a restart of the gateway, graceful or kill -9 (docs/jms.md,
 * "Durable subscriptions"): the subscriber that comes back gets every
 * message published, by JMS and MQTT, while it was away, once and in order,
 * and nothing it had acknowledged.
 */
@Timeout(120)
class DurableRestartTest {
    static final long WAIT = 10_000;

    @ParameterizedTest(name = "shared={0} kill={1}")
    @CsvSource({"false,false", "false,true", "true,false", "true,true"})
    void subscriberGetsWhatWasPublishedAcrossARestart(boolean shared, boolean kill) throws Exception {
        String topic = "jms/restart/" + shared + "/" + kill;
        String client = "restart-" + shared + "-" + kill;
        String sub = "sub";
        Gateway gw = Gateway.start();
        try {
            try (Connection c = SessionsTest.connectAs(gw, client)) {
                Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Topic t = s.createTopic(topic);
                MessageConsumer cons = subscribe(s, t, sub, shared);
                MessageProducer p = s.createProducer(t);
                p.send(s.createTextMessage("acked"));
                assertEquals("acked", text(cons.receive(WAIT)), "the subscription gets a live message");
                cons.close(); // detached, not unsubscribed
                MqttClient mc = GatewayTest.mqttClient(gw);
                try {
                    for (int i = 0; i < 3; i++) {
                        p.send(s.createTextMessage("jms-" + i)); // persistent: answered once stored
                        GatewayTest.mqttPublishText(mc, topic, "mqtt-" + i); // QoS 1: PUBACK once stored
                    }
                } finally {
                    mc.disconnect();
                    mc.close();
                }
            }

            gw = gw.restart(kill);

            List<String> want = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                want.add("jms-" + i);
                want.add("mqtt-" + i);
            }
            try (Connection c = SessionsTest.connectAs(gw, client)) {
                Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Topic t = s.createTopic(topic);
                MessageConsumer cons = subscribe(s, t, sub, shared);
                List<String> got = new ArrayList<>();
                for (int i = 0; i < want.size(); i++) {
                    got.add(text(cons.receive(WAIT)));
                }
                assertEquals(want, got, "every message published while away, once, in order");
                assertNull(cons.receive(300), "nothing more: the acknowledged message is not delivered again");
                cons.close();
                s.unsubscribe(sub);
                s.createProducer(t).send(s.createTextMessage("after unsubscribe"));
                MessageConsumer again = subscribe(s, t, sub, shared);
                assertNull(again.receive(300), "unsubscribe removed the subscription: a new one starts empty");
                again.close();
                s.unsubscribe(sub);
            }
        } finally {
            gw.close();
        }
    }


    static MessageConsumer subscribe(Session s, Topic t, String name, boolean shared) throws Exception {
        return shared ? s.createSharedDurableConsumer(t, name) : s.createDurableSubscriber(t, name);
    }

    static String text(Object m) throws Exception {
        return assertInstanceOf(TextMessage.class, m, "a message that must come").getText();
    }

}
