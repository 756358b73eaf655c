package dev.tolsey.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import jakarta.jms.Connection;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.qpid.jms.JmsConnection;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A failover: URI that lists two gateways of a cluster (docs/cluster.md: one
 * NATS, one Redis) moves to the second when the first goes away and carries
 * on, and a JMS subscriber on the second gateway gets what the failover
 * connection sent on either. NATS is the go.mod version (test/e2e/jms.sh
 * builds it and passes -Dnats.bin), Redis the machine's redis-server.
 */
@Timeout(120)
class ClusterFailoverTest {
    static final long WAIT = 10_000;

    @Test
    void reconnectsToAnotherGatewayOfTheCluster() throws Exception {
        String nats = System.getProperty("nats.bin", "");
        if (nats.isEmpty()) {
            throw new IllegalStateException("-Dnats.bin=PATH is needed: a nats-server binary (test/e2e/jms.sh builds it)");
        }
        Path dir = Files.createTempDirectory("tolsey-jms-cluster");
        int redisPort = freePort();
        int natsPort = freePort();
        Process redis = new ProcessBuilder("redis-server", "--bind", "127.0.0.1", "--port", String.valueOf(redisPort),
                "--save", "", "--appendonly", "no", "--dir", dir.toString())
                .redirectErrorStream(true).redirectOutput(dir.resolve("redis.log").toFile()).start();
        Process natsProc = new ProcessBuilder(nats, "-a", "127.0.0.1", "-p", String.valueOf(natsPort))
                .redirectErrorStream(true).redirectOutput(dir.resolve("nats.log").toFile()).start();
        Gateway a = null;
        Gateway b = null;
        try {
            waitListening(redisPort, redis);
            waitListening(natsPort, natsProc);
            a = Gateway.start(clusterFlags("a", natsPort, redisPort));
            b = Gateway.start(clusterFlags("b", natsPort, redisPort));
            String uri = "failover:(amqp://" + a.amqp + ",amqp://" + b.amqp + ")"
                    + "?failover.randomize=false&failover.reconnectDelay=50&failover.maxReconnectDelay=200";
            try (Connection onB = new JmsConnectionFactory(b.uri()).createConnection();
                    Connection f = new JmsConnectionFactory(uri).createConnection()) {
                onB.start();
                f.start();
                assertEquals(a.amqpPort(), ((JmsConnection) f).getConnectedURI().getPort(), "the failover connection starts on a");
                Session sb = onB.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Session s = f.createSession(false, Session.AUTO_ACKNOWLEDGE);
                Topic t = s.createTopic("jms/cluster-failover");
                MessageConsumer subB = sb.createConsumer(sb.createTopic("jms/cluster-failover"));
                MessageConsumer sub = s.createConsumer(t);
                MessageProducer p = s.createProducer(t);
                // Until b's subscription is known on a (interest forwarding),
                // a's messages may not cross: send fences until one does.
                String fence = null;
                for (int i = 0; i < 100 && fence == null; i++) {
                    p.send(s.createTextMessage("fence-" + i));
                    Message m = subB.receive(200);
                    if (m != null) {
                        fence = ((TextMessage) m).getText();
                    }
                }
                assertNotNull(fence, "no message from a reached the subscriber on b");
                drain(subB);
                drain(sub);

                p.send(s.createTextMessage("before"));
                assertEquals("before", text(sub.receive(WAIT)), "the failover connection's own subscriber, on a");
                assertEquals("before", text(subB.receive(WAIT)), "the subscriber on b, sent on a");

                a.close();
                a = null;
                // The send blocks until Qpid JMS has reconnected (to b) and
                // recreated the session, the consumer and the producer.
                p.send(s.createTextMessage("after"));
                assertEquals(b.amqpPort(), ((JmsConnection) f).getConnectedURI().getPort(), "the failover connection moved to b");
                assertEquals("after", text(sub.receive(WAIT)), "the failover connection's subscriber, now on b");
                assertEquals("after", text(subB.receive(WAIT)), "the subscriber on b, sent on b");
            }
        } finally {
            for (Gateway g : new Gateway[] {a, b}) {
                if (g != null) {
                    g.close();
                }
            }
            for (Process pr : List.of(natsProc, redis)) {
                pr.destroy();
                if (!pr.waitFor(10, TimeUnit.SECONDS)) {
                    pr.destroyForcibly().waitFor();
                }
            }
            try (var files = Files.walk(dir)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(x -> x.toFile().delete());
            }
        }
    }

    static String[] clusterFlags(String node, int natsPort, int redisPort) {
        return new String[] {"--cluster.enabled=true", "--node.id=" + node,
            "--bridge.nats.url=nats://127.0.0.1:" + natsPort,
            "--retain.backend=redis", "--retain.redis.url=redis://127.0.0.1:" + redisPort,
            "--retain.redis.prefix=jmscluster:"};
    }

    static String text(Message m) throws Exception {
        return assertInstanceOf(TextMessage.class, m, "no message").getText();
    }

    /** Takes the fences that are still coming. */
    static void drain(MessageConsumer c) throws Exception {
        while (c.receive(500) != null) {
            // a fence
        }
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    static void waitListening(int port, Process p) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (System.nanoTime() < deadline) {
            if (!p.isAlive()) {
                throw new IllegalStateException("a server exited during start: " + p.info().commandLine().orElse(""));
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 500);
                return;
            } catch (IOException e) {
                Thread.sleep(50);
            }
        }
        throw new IllegalStateException("nothing listening on 127.0.0.1:" + port + " within 20 s");
    }
}
