package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.eclipse.paho.mqttv5.client.MqttClient;
import org.eclipse.paho.mqttv5.common.MqttMessage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * Transacted sessions (docs/jms.md, "Transactions") beyond
 * Jms2Test.transactedSessionCommitsAndRollsBack: consume-and-produce
 * committed as one, rollback counting deliveries, and a client that
 * vanishes mid-transaction.
 */
@Timeout(90)
class TransactionsTest extends GatewayTest {
    @Test
    void consumeFromQueueAndProduceToTopicCommitsAtomically(TestInfo info) throws Exception {
        String in = name(info) + "/in";
        String out = name(info) + "/out";
        BlockingQueue<MqttMessage> mqttGot = new ArrayBlockingQueue<>(10);
        MqttClient mc = mqttSubscriber(out, mqttGot);
        try (Connection c = connect(); Connection watcher = connect()) {
            Session ws = watcher.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer outSub = ws.createConsumer(ws.createTopic(out));
            ws.createProducer(ws.createQueue(in)).send(ws.createTextMessage("job-1"));

            Session s = c.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer jobs = s.createConsumer(s.createQueue(in));
            MessageProducer results = s.createProducer(s.createTopic(out));
            TextMessage job = assertInstanceOf(TextMessage.class, jobs.receive(WAIT));
            results.send(s.createTextMessage("result of " + job.getText()));

            assertNull(outSub.receive(300), "the result is not visible before the commit");
            assertNull(mqttGot.poll(0, TimeUnit.MILLISECONDS), "nor to MQTT");
            s.commit();
            assertEquals("result of job-1", assertInstanceOf(TextMessage.class, outSub.receive(WAIT)).getText());
            MqttMessage mm = mqttGot.poll(WAIT, TimeUnit.MILLISECONDS);
            assertNotNull(mm, "the MQTT subscriber gets the committed result");
            assertEquals("result of job-1", new String(mm.getPayload(), StandardCharsets.UTF_8));
            jobs.close();
            assertNull(ws.createConsumer(ws.createQueue(in)).receive(300), "the job was consumed by the commit");
        } finally {
            close(mc);
        }
    }

    @Test
    void rollbackRedeliversWithHigherDeliveryCountAndDropsTheSends(TestInfo info) throws Exception {
        String in = name(info) + "/in";
        String out = name(info) + "/out";
        try (Connection c = connect(); Connection watcher = connect()) {
            Session ws = watcher.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer outSub = ws.createConsumer(ws.createTopic(out));
            ws.createProducer(ws.createQueue(in)).send(ws.createTextMessage("job"));

            Session s = c.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer jobs = s.createConsumer(s.createQueue(in));
            MessageProducer results = s.createProducer(s.createTopic(out));
            for (int attempt = 1; attempt <= 3; attempt++) {
                Message job = jobs.receive(WAIT);
                assertNotNull(job, "attempt " + attempt);
                assertEquals(attempt, job.getIntProperty("JMSXDeliveryCount"), "attempt " + attempt);
                assertEquals(attempt > 1, job.getJMSRedelivered(), "attempt " + attempt);
                results.send(s.createTextMessage("result " + attempt));
                if (attempt < 3) {
                    s.rollback();
                } else {
                    s.commit();
                }
            }
            assertEquals("result 3", assertInstanceOf(TextMessage.class, outSub.receive(WAIT)).getText(),
                    "only the committed attempt's send is published");
            assertNull(outSub.receive(300));
        }
    }

    @Test
    void connectionThatVanishesMidTransactionRollsBack(TestInfo info) throws Exception {
        String in = name(info) + "/in";
        String outTopic = name(info) + "/out";
        String outQueue = name(info) + "/out-q";
        try (Connection watcher = connect()) {
            Session ws = watcher.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = ws.createTopic(outTopic);
            MessageConsumer outSub = ws.createConsumer(t);
            ws.createProducer(ws.createQueue(in)).send(ws.createTextMessage("job"));
            ws.createProducer(ws.createQueue(outQueue)).send(ws.createTextMessage("already there"));

            // The transacted client in its own JVM, killed with SIGKILL: its
            // socket closes without an AMQP close or a discharge.
            Path java = Path.of(System.getProperty("java.home"), "bin", "java");
            String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
            Process child = new ProcessBuilder(java.toString(), "-cp", cp, TxnChild.class.getName(),
                    gw.uri(), in, outTopic, outQueue).redirectErrorStream(true).start();
            try {
                BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
                StringBuilder said = new StringBuilder();
                String line;
                while ((line = r.readLine()) != null && !line.equals("READY")) {
                    said.append(line).append('\n');
                }
                assertEquals("READY", line, "the child did not get ready:\n" + said);
            } finally {
                child.destroyForcibly().waitFor();
            }

            MessageProducer p = ws.createProducer(t);
            p.send(ws.createTextMessage("marker"));
            assertEquals("marker", assertInstanceOf(TextMessage.class, outSub.receive(WAIT)).getText(),
                    "the vanished transaction's topic send was never published");
            MessageConsumer q = ws.createConsumer(ws.createQueue(outQueue));
            assertEquals("already there", assertInstanceOf(TextMessage.class, q.receive(WAIT)).getText());
            assertNull(q.receive(300), "the vanished transaction's queue send was never stored");
            Message job = ws.createConsumer(ws.createQueue(in)).receive(WAIT);
            assertNotNull(job, "the message the vanished transaction received came back");
            assertEquals("job", ((TextMessage) job).getText());
            assertTrue(job.getJMSRedelivered());
            assertEquals(2, job.getIntProperty("JMSXDeliveryCount"), "counted as a failed delivery");
            assertFalse(gw.log().contains("panic"));
        }
    }
}
