package dev.tolsey.jms.bench;

import dev.tolsey.jms.Gateway;
import jakarta.jms.BytesMessage;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Destination;
import jakarta.jms.JMSException;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.qpid.jms.JmsConnectionFactory;

/**
 * JMS producer → JMS consumer through the gateway and through ActiveMQ
 * Artemis, the same Qpid JMS 2.x code against both, in one run (docs/jms.md,
 * "Performance"; run by test/bench/jms/run.sh, which starts Artemis with its
 * own scripts; this program starts the gateway through the suite's harness,
 * embedded queue store on disk).
 *
 * Four phases, each a fresh destination: topic and queue, each with
 * NON_PERSISTENT and PERSISTENT messages. Consumers (MessageListener,
 * AUTO_ACKNOWLEDGE, Qpid's default prefetch) attach first, then producers
 * send n messages in all as fast as Qpid JMS lets them: a persistent send
 * waits for the server's acceptance (JMS's synchronous send, Qpid's default;
 * --async-persistent changes that), a non-persistent one does not. A
 * message's latency is from its send to its onMessage (System.nanoTime in a
 * long property, one JVM, one clock). Server CPU comes from /proc through
 * ProcessHandle. Rounds alternate the order of the targets, so neither
 * always runs on a warmer (or busier) machine.
 */
public final class JmsBench {
    record Target(String name, String uri, long pid) {}

    record Phase(String name, boolean queue, boolean persistent) {}

    record Result(Phase phase, Target target, int round, int sent, int delivered, long elapsedNanos,
            long[] lat, long cpuNanos, long clientCpuNanos, boolean stalled) {
        double rate() {
            return delivered / (elapsedNanos / 1e9);
        }
    }

    static final List<Phase> PHASES = List.of(
            new Phase("topic non-persistent", false, false),
            new Phase("topic persistent", false, true),
            new Phase("queue non-persistent", true, false),
            new Phase("queue persistent", true, true));

    // Flags (defaults keep run.sh's whole run under ~5 minutes on the 2-core box).
    static int n = 20000;         // non-persistent messages per phase and target
    static int np = 2000;         // persistent messages per phase and target
    static int size = 1024;       // body bytes
    static int producers = 1;
    static int consumers = 1;
    static int rounds = 2;
    static long timeoutSec = 60;  // a phase that has not delivered everything by then is cut short
    static boolean asyncPersistent = false;
    static String only = "";      // comma-separated phase names (as in PHASES, spaces as '-')
    static String profilePhase = ""; // a phase of the gateway to CPU-profile (its admin /debug/pprof)
    static int profileSeconds = 10;
    static String profileDir = ".";
    static final long QUIET_NANOS = TimeUnit.SECONDS.toNanos(3);

    public static void main(String[] args) throws Exception {
        String artemisURI = "";
        long artemisPid = 0;
        boolean noGateway = false;
        List<String> gatewayArgs = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : "";
            switch (a) {
                case "-n" -> { n = Integer.parseInt(v); i++; }
                case "-np" -> { np = Integer.parseInt(v); i++; }
                case "-size" -> { size = Integer.parseInt(v); i++; }
                case "-producers" -> { producers = Integer.parseInt(v); i++; }
                case "-consumers" -> { consumers = Integer.parseInt(v); i++; }
                case "-rounds" -> { rounds = Integer.parseInt(v); i++; }
                case "-timeout" -> { timeoutSec = Long.parseLong(v); i++; }
                case "-phases" -> { only = v; i++; }
                case "-async-persistent" -> asyncPersistent = true;
                case "-artemis" -> { artemisURI = v; i++; }
                case "-artemis-pid" -> { artemisPid = Long.parseLong(v); i++; }
                case "-no-gateway" -> noGateway = true;
                case "-gateway-arg" -> { gatewayArgs.add(v); i++; }
                case "-profile" -> { profilePhase = v; i++; }
                case "-profile-seconds" -> { profileSeconds = Integer.parseInt(v); i++; }
                case "-profile-dir" -> { profileDir = v; i++; }
                default -> {
                    System.err.println("unknown flag " + a + "\nflags: -n -np -size -producers -consumers -rounds -timeout"
                            + " -phases topic-non-persistent,... -async-persistent -artemis URI -artemis-pid PID -no-gateway -gateway-arg --key=value"
                            + " -profile PHASE -profile-seconds S -profile-dir DIR");
                    System.exit(2);
                }
            }
        }
        // On ^C or SIGTERM the JVM skips the finally below: stop the gateway
        // the harness started from a shutdown hook, so it is not left behind.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> ProcessHandle.current().children().forEach(ProcessHandle::destroy)));
        List<Target> targets = new ArrayList<>();
        Gateway gw = null;
        try {
            if (!noGateway) {
                gw = Gateway.start(gatewayArgs.toArray(String[]::new));
                targets.add(new Target("gateway", gw.uri(), childPid()));
            }
            if (!artemisURI.isEmpty()) {
                targets.add(new Target("artemis", artemisURI, artemisPid));
            }
            if (targets.isEmpty()) {
                throw new IllegalArgumentException("no target: -artemis URI and/or the gateway");
            }
            run(targets, gw);
        } finally {
            if (gw != null) {
                gw.close();
            }
        }
    }

    /** The gateway the harness started: this JVM's only child process. */
    static long childPid() {
        return ProcessHandle.current().children().findFirst().map(ProcessHandle::pid).orElse(0L);
    }

    static void run(List<Target> targets, Gateway gw) throws Exception {
        List<Phase> phases = PHASES.stream()
                .filter(p -> only.isEmpty() || Arrays.asList(only.split(",")).contains(p.name.replace(' ', '-')))
                .toList();
        System.out.printf(Locale.ROOT, "JMS bench: Qpid JMS 2.7.0, %d producer(s) → %d consumer(s), %d B bodies, "
                + "%d non-persistent / %d persistent msgs per phase, %d round(s)%s%n",
                producers, consumers, size, n, np, rounds, asyncPersistent ? ", persistent sends asynchronous" : "");
        // Warm-up (not reported): the JIT of this JVM (and Artemis's) on every path.
        long w0 = System.nanoTime();
        for (Target t : targets) {
            for (Phase p : phases) {
                Result w = runPhase(p, t, 0, Math.max(100, (p.persistent ? np : n) / 10), null);
                if (w.stalled) {
                    System.out.printf("  warm-up %s on %s stalled (%d of %d in %d s)%n", p.name, t.name, w.delivered,
                            expected(p, w.sent), timeoutSec);
                }
            }
        }
        System.out.printf(Locale.ROOT, "  warm-up: %.1f s%n", (System.nanoTime() - w0) / 1e9);
        List<Result> results = new ArrayList<>();
        for (int r = 1; r <= rounds; r++) {
            List<Target> order = new ArrayList<>(targets);
            if (r % 2 == 0) {
                java.util.Collections.reverse(order);
            }
            for (Phase p : phases) {
                for (Target t : order) {
                    String prof = null;
                    if (gw != null && t.name.equals("gateway") && r == 1 && p.name.replace(' ', '-').equals(profilePhase)) {
                        prof = gw.admin;
                    }
                    Result res = runPhase(p, t, r, p.persistent ? np : n, prof);
                    results.add(res);
                    System.out.printf(Locale.ROOT, "  round %d  %-21s %-8s %7d msgs/s  p50 %9s  p99 %9s  (%.1f s)%s%n", r, p.name,
                            t.name, Math.round(res.rate()), ms(pct(res.lat, 50)), ms(pct(res.lat, 99)), res.elapsedNanos / 1e9,
                            lostText(res) + (res.stalled ? "  STALLED at -timeout" : ""));
                }
            }
        }
        summary(phases, targets, results);
    }

    static String lostText(Result r) {
        int lost = expected(r.phase, r.sent) - r.delivered;
        return lost > 0 ? "  lost " + lost : "";
    }

    static int expected(Phase p, int sent) {
        return p.queue ? sent : sent * consumers;
    }

    static Result runPhase(Phase p, Target t, int round, int count, String profileAdmin) throws Exception {
        String dest = "bench." + (p.queue ? "q" : "t") + "." + (p.persistent ? "p" : "np") + "." + round + "."
                + Long.toHexString(System.nanoTime());
        int expect = p.queue ? count : count * consumers;
        long[] lat = new long[expect];
        AtomicInteger got = new AtomicInteger();
        AtomicLong last = new AtomicLong(); // nanoTime of the latest delivery
        CountDownLatch all = new CountDownLatch(1);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        List<Connection> conns = new ArrayList<>();
        JmsConnectionFactory cf = new JmsConnectionFactory(t.uri + (asyncPersistent && p.persistent
                ? (t.uri.contains("?") ? "&" : "?") + "jms.forceAsyncSend=true" : ""));
        try {
            for (int i = 0; i < consumers; i++) {
                Connection c = cf.createConnection();
                conns.add(c);
                Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
                MessageConsumer mc = s.createConsumer(dest(s, p, dest));
                mc.setMessageListener(m -> {
                    try {
                        long l = System.nanoTime() - m.getLongProperty("t");
                        last.set(System.nanoTime());
                        int k = got.getAndIncrement();
                        if (k < lat.length) {
                            lat[k] = l;
                        }
                        if (k + 1 == expect) {
                            all.countDown();
                        }
                    } catch (JMSException e) {
                        failed.compareAndSet(null, e);
                        all.countDown();
                    }
                });
                c.start();
            }
            CompletableFuture<byte[]> profile = null;
            if (profileAdmin != null) {
                profile = HttpClient.newHttpClient().sendAsync(HttpRequest.newBuilder(
                        URI.create("http://" + profileAdmin + "/debug/pprof/profile?seconds=" + profileSeconds))
                        .timeout(Duration.ofSeconds(profileSeconds + 30)).build(),
                        HttpResponse.BodyHandlers.ofByteArray()).thenApply(HttpResponse::body);
            }
            long cpu0 = cpu(t.pid);
            long ccpu0 = cpu(ProcessHandle.current().pid());
            long start = System.nanoTime();
            byte[] body = new byte[size];
            List<Thread> senders = new ArrayList<>();
            AtomicInteger sent = new AtomicInteger();
            for (int i = 0; i < producers; i++) {
                int mine = count / producers + (i < count % producers ? 1 : 0);
                Connection c = cf.createConnection();
                conns.add(c);
                Thread th = new Thread(() -> {
                    try {
                        Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
                        MessageProducer mp = s.createProducer(dest(s, p, dest));
                        mp.setDeliveryMode(p.persistent ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT);
                        for (int k = 0; k < mine; k++) {
                            BytesMessage m = s.createBytesMessage();
                            m.writeBytes(body);
                            m.setLongProperty("t", System.nanoTime());
                            mp.send(m);
                            sent.incrementAndGet();
                        }
                    } catch (Throwable e) {
                        failed.compareAndSet(null, e);
                        all.countDown();
                    }
                }, "producer-" + i);
                senders.add(th);
                th.start();
            }
            // Every message, or (non-persistent messages may be dropped: the
            // gateway drops at-most-once messages for a consumer whose link
            // buffer is full, as for MQTT QoS 0) the producers done and
            // nothing delivered for QUIET_NANOS; the rate counts to the last
            // delivery either way.
            long deadline = start + TimeUnit.SECONDS.toNanos(timeoutSec);
            boolean done = false, quiet = false;
            while (!done && !quiet && System.nanoTime() < deadline) {
                done = all.await(100, TimeUnit.MILLISECONDS);
                boolean sending = senders.stream().anyMatch(Thread::isAlive);
                long since = System.nanoTime() - Math.max(last.get(), start);
                quiet = !sending && since > QUIET_NANOS;
            }
            long elapsed = (done || quiet) && last.get() > start ? last.get() - start : System.nanoTime() - start;
            long cpu = cpu(t.pid) - cpu0;
            long ccpu = cpu(ProcessHandle.current().pid()) - ccpu0;
            for (Thread th : senders) {
                th.join(TimeUnit.SECONDS.toMillis(timeoutSec));
            }
            if (failed.get() != null) {
                throw new RuntimeException(p.name + " on " + t.name + " failed", failed.get());
            }
            if (profile != null) {
                Path f = Path.of(profileDir, "gateway-" + p.name.replace(' ', '-') + ".pprof");
                Files.write(f, profile.get(profileSeconds + 30, TimeUnit.SECONDS));
                System.out.println("  gateway CPU profile: " + f);
            }
            int d = Math.min(got.get(), expect);
            return new Result(p, t, round, sent.get(), d, elapsed, Arrays.copyOf(lat, d), cpu, ccpu, !done && !quiet);
        } finally {
            for (Connection c : conns) {
                try {
                    c.close();
                } catch (JMSException e) {
                    // the server went away: the result says so already
                }
            }
        }
    }

    static Destination dest(Session s, Phase p, String name) throws JMSException {
        return p.queue ? s.createQueue(name) : s.createTopic(name);
    }

    static long cpu(long pid) {
        if (pid <= 0) {
            return 0;
        }
        return ProcessHandle.of(pid).flatMap(h -> h.info().totalCpuDuration()).map(Duration::toNanos).orElse(0L);
    }

    static long pct(long[] lat, int p) {
        if (lat.length == 0) {
            return -1;
        }
        long[] s = lat.clone();
        Arrays.sort(s);
        return s[Math.min(s.length - 1, (int) Math.ceil(p / 100.0 * s.length) - 1)];
    }

    static String ms(long nanos) {
        return nanos < 0 ? "-" : String.format(Locale.ROOT, "%.2f ms", nanos / 1e6);
    }

    /** One row per phase and target over all rounds, and gateway/artemis. */
    static void summary(List<Phase> phases, List<Target> targets, List<Result> results) {
        Map<String, String> goal = Map.of("topic non-persistent", "≥ 1.00", "queue persistent", "≥ 1.00");
        System.out.println();
        System.out.printf(Locale.ROOT, "%-21s %-8s %7s %9s %6s %7s %10s %10s %15s %15s %16s %6s %7s%n", "phase", "target", "sent",
                "delivered", "lost", "msgs/s", "p50", "p99", "server CPU/msg", "client CPU/msg", "gateway/artemis", "goal", "verdict");
        for (Phase p : phases) {
            for (Target t : targets) {
                long sent = 0, got = 0, el = 0, cpu = 0, lost = 0, ccpu = 0;
                List<long[]> lats = new ArrayList<>();
                boolean stalled = false;
                for (Result r : results) {
                    if (r.phase == p && r.target == t) {
                        sent += r.sent;
                        got += r.delivered;
                        lost += expected(p, r.sent) - r.delivered;
                        el += r.elapsedNanos;
                        cpu += r.cpuNanos;
                        ccpu += r.clientCpuNanos;
                        lats.add(r.lat);
                        stalled |= r.stalled;
                    }
                }
                long[] lat = lats.stream().flatMapToLong(Arrays::stream).toArray();
                double mps = got / (el / 1e9);
                String ratio = "", g = "", verdict = "";
                if (t.name.equals("gateway") && targets.size() == 2) {
                    double other = -1;
                    for (Target o : targets) {
                        if (!o.name.equals("gateway")) {
                            other = results.stream().filter(r -> r.phase == p && r.target == o).mapToLong(r -> r.delivered).sum()
                                    / (results.stream().filter(r -> r.phase == p && r.target == o).mapToLong(r -> r.elapsedNanos).sum() / 1e9);
                        }
                    }
                    double q = mps / other;
                    ratio = String.format(Locale.ROOT, "%.2f", q);
                    g = goal.getOrDefault(p.name, "-");
                    verdict = g.equals("-") ? "-" : (q >= 1.0 ? "PASS" : "FAIL");
                    if (lost > 0 && !g.equals("-")) {
                        // Delivered msgs/s while dropping is not the same service: say so.
                        verdict += String.format(Locale.ROOT, " with %.1f%% lost", 100.0 * lost / (got + lost));
                    }
                }
                System.out.printf(Locale.ROOT, "%-21s %-8s %7d %9d %6d %7d %10s %10s %15s %15s %16s %6s %7s%s%n", p.name, t.name, sent, got, lost,
                        Math.round(mps), ms(pct(lat, 50)), ms(pct(lat, 99)),
                        t.pid > 0 && got > 0 ? String.format(Locale.ROOT, "%.1f µs", cpu / 1e3 / got) : "-",
                        got > 0 ? String.format(Locale.ROOT, "%.1f µs", ccpu / 1e3 / got) : "-",
                        ratio, g, verdict, stalled ? "  (stalled: cut at -timeout)" : "");
            }
        }
    }
}
