package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import jakarta.jms.Connection;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A failover: URI reconnects to a restarted gateway and carries on. */
@Timeout(60)
class FailoverTest {
    @Test
    void reconnectsToARestartedGateway() throws Exception {
        Gateway first = Gateway.start();
        int port = first.amqpPort();
        String uri = "failover:(amqp://127.0.0.1:" + port + ")?failover.reconnectDelay=50&failover.maxReconnectDelay=200";
        Gateway second = null;
        try (Connection c = new JmsConnectionFactory(uri).createConnection()) {
            c.start();
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic("jms/failover");
            MessageConsumer sub = s.createConsumer(t);
            MessageProducer p = s.createProducer(t);
            p.send(s.createTextMessage("before"));
            assertEquals("before", assertInstanceOf(TextMessage.class, sub.receive(5000)).getText());

            first.close();
            second = Gateway.startOn(port);
            // The send blocks until Qpid JMS has reconnected and recreated
            // the session, the consumer and the producer.
            p.send(s.createTextMessage("after"));
            assertEquals("after", assertInstanceOf(TextMessage.class, sub.receive(10000)).getText());
        } finally {
            if (second != null) {
                second.close();
            }
        }
    }
}
