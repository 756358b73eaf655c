package dev.tolsey.jms;

import jakarta.jms.Connection;
import jakarta.jms.JMSException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.eclipse.paho.mqttv5.client.IMqttMessageListener;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.client.MqttConnectionOptions;
import org.eclipse.paho.mqttv5.client.persist.MemoryPersistence;
import org.eclipse.paho.mqttv5.common.MqttMessage;
import org.eclipse.paho.mqttv5.common.MqttSubscription;
import org.eclipse.paho.mqttv5.common.packet.MqttProperties;
import org.eclipse.paho.mqttv5.common.packet.UserProperty;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInfo;

/**
 * One gateway process per test class. Each test uses topics and queues
 * named after itself (name(info)), so tests do not see each other.
 */
abstract class GatewayTest {
    static final long WAIT = 5000; // ms a receive waits for a message that must come

    static Gateway gw;

    @BeforeAll
    static void startGateway() throws Exception {
        gw = Gateway.start();
    }

    @AfterAll
    static void stopGateway() throws Exception {
        if (gw != null) {
            gw.close();
            gw = null;
        }
    }

    static Connection connect() throws JMSException {
        return connect("");
    }

    static Connection connect(String options) throws JMSException {
        Connection c = new JmsConnectionFactory(gw.uri(options)).createConnection();
        c.start();
        return c;
    }

    static String name(TestInfo info) {
        return "jms/" + info.getTestClass().orElseThrow().getSimpleName() + "/" + info.getTestMethod().orElseThrow().getName();
    }

    // ---- MQTT (Eclipse Paho, MQTT 5) ----

    static MqttClient mqttClient() throws Exception {
        return mqttClient(gw);
    }

    static MqttClient mqttClient(Gateway g) throws Exception {
        MqttClient mc = new MqttClient(g.mqttURI(), "", new MemoryPersistence());
        MqttConnectionOptions o = new MqttConnectionOptions();
        o.setCleanStart(true);
        mc.connect(o);
        return mc;
    }

    static MqttClient mqttSubscriber(String topic, BlockingQueue<MqttMessage> got) throws Exception {
        MqttClient mc = mqttClient();
        mc.subscribe(new MqttSubscription[] {new MqttSubscription(topic, 1)},
                new IMqttMessageListener[] {(t, m) -> got.add(m)}).waitForCompletion(WAIT);
        return mc;
    }

    /**
     * Answers an MQTT 5 request the usual way: on its Response Topic, with its
     * Correlation Data and user properties echoed; a text payload says so
     * (payload format indicator 1), a null one echoes the request's payload
     * and content type.
     */
    static void mqttRespond(MqttClient mc, MqttMessage req, String text) throws Exception {
        MqttProperties in = req.getProperties();
        MqttMessage reply = new MqttMessage(text == null ? req.getPayload() : text.getBytes(StandardCharsets.UTF_8), 1, false, null);
        MqttProperties props = new MqttProperties();
        props.setCorrelationData(in.getCorrelationData());
        props.setUserProperties(in.getUserProperties());
        if (text == null) {
            props.setContentType(in.getContentType());
        } else {
            props.setPayloadFormat(true);
        }
        reply.setProperties(props);
        mc.publish(in.getResponseTopic(), reply);
    }

    /** Publishes text (payload format indicator 1) at QoS 1 with user properties. */
    static void mqttPublishText(MqttClient mc, String topic, String text, UserProperty... user) throws Exception {
        MqttMessage m = new MqttMessage(text.getBytes(StandardCharsets.UTF_8), 1, false, null);
        MqttProperties props = new MqttProperties();
        props.setPayloadFormat(true);
        props.setUserProperties(List.of(user));
        m.setProperties(props);
        mc.publish(topic, m);
    }

    static void close(MqttClient mc) throws Exception {
        mc.disconnect();
        mc.close();
    }

    static String userProperty(MqttMessage m, String key) {
        for (UserProperty p : m.getProperties().getUserProperties()) {
            if (p.getKey().equals(key)) {
                return p.getValue();
            }
        }
        return null;
    }
}
