package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * JMSPriority ordering on queues (docs/queues.md, "Priority"): a queue
 * delivers higher priorities first, FIFO within one, and a message given
 * back keeps its priority.
 */
@Timeout(30)
class PriorityTest extends GatewayTest {
    @Test
    void highPriorityFirstWhenSentBeforeTheConsumer(TestInfo info) throws Exception {
        String[] sent = {"low-1", "default-1", "high-1", "low-2", "high-2", "default-2"};
        int[] prio = {1, 4, 8, 1, 8, 4};
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(name(info));
            MessageProducer p = s.createProducer(q); // creates the queue (queues.autoCreate)
            for (int i = 0; i < sent.length; i++) {
                // PERSISTENT sends are synchronous: all stored before any consumer attaches.
                p.send(s.createTextMessage(sent[i]), DeliveryMode.PERSISTENT, prio[i], 0);
            }
        }
        // The first consumer takes the first message and goes away without
        // acknowledging it: it comes back first, as high as it was.
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
            Message m = s.createConsumer(s.createQueue(name(info))).receive(WAIT);
            assertEquals("high-1", assertInstanceOf(TextMessage.class, m).getText());
            assertEquals(8, m.getJMSPriority());
            assertFalse(m.getJMSRedelivered());
        }
        String[] want = {"high-1", "high-2", "default-1", "default-2", "low-1", "low-2"};
        int[] wantPrio = {8, 8, 4, 4, 1, 1};
        try (Connection c = connect()) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer cons = s.createConsumer(s.createQueue(name(info)));
            for (int i = 0; i < want.length; i++) {
                Message m = cons.receive(WAIT);
                assertEquals(want[i], assertInstanceOf(TextMessage.class, m).getText(), "message " + i);
                assertEquals(wantPrio[i], m.getJMSPriority(), "priority of " + want[i]);
                if (i == 0) {
                    assertTrue(m.getJMSRedelivered(), "high-1 was delivered before");
                }
            }
            assertNull(cons.receive(300), "nothing more");
        }
    }
}
