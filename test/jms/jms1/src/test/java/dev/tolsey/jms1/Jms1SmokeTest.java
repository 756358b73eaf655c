package dev.tolsey.jms1;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import dev.tolsey.jms.Gateway;
import javax.jms.Connection;
import javax.jms.MapMessage;
import javax.jms.MessageConsumer;
import javax.jms.Queue;
import javax.jms.Session;
import javax.jms.TemporaryQueue;
import javax.jms.TextMessage;
import javax.jms.Topic;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Qpid JMS 1.x (javax.jms): the most deployed client, a smoke test. */
@Timeout(30)
class Jms1SmokeTest {
    @Test
    void topicQueueAndRequestReply() throws Exception {
        try (Gateway gw = Gateway.start();
                Connection c = new JmsConnectionFactory(Gateway.USER, Gateway.PASSWORD, gw.uri()).createConnection()) {
            c.start();
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);

            Topic t = s.createTopic("jms1/topic");
            MessageConsumer sub = s.createConsumer(t);
            s.createProducer(t).send(s.createTextMessage("on a topic"));
            assertEquals("on a topic", assertInstanceOf(TextMessage.class, sub.receive(5000)).getText());

            Queue q = s.createQueue("jms1/queue");
            TemporaryQueue replyTo = s.createTemporaryQueue();
            TextMessage req = s.createTextMessage("in a queue");
            req.setJMSReplyTo(replyTo);
            s.createProducer(q).send(req);
            TextMessage got = assertInstanceOf(TextMessage.class, s.createConsumer(q).receive(5000));
            assertEquals("in a queue", got.getText());
            s.createProducer(got.getJMSReplyTo()).send(s.createTextMessage("reply"));
            assertEquals("reply", assertInstanceOf(TextMessage.class, s.createConsumer(replyTo).receive(5000)).getText());

            MapMessage m = s.createMapMessage();
            m.setInt("n", 1);
            s.createProducer(t).send(m);
            assertEquals(1, assertInstanceOf(MapMessage.class, sub.receive(5000)).getObject("n"));

        }
    }
}
