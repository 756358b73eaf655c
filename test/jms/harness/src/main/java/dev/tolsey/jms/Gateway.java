package dev.tolsey.jms;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One gateway process on free ports (port 0: the gateway logs the address each
 * listener bound, as test/e2e/amqp_clients.sh reads it), with anonymous AMQP,
 * the SASL PLAIN user alice:secret, queues created on first use and the
 * embedded store in a temporary directory. The binary comes from the
 * system property gateway.bin (test/e2e/jms.sh builds it).
 */
public final class Gateway implements AutoCloseable {
    public static final String USER = "alice";
    public static final String PASSWORD = "secret";

    private final Process proc;
    private final Path dir;
    private final Path log;
    private final String[] extra; // the flags it was started with, kept by restart
    public final String amqp;  // host:port
    public final String mqtt;  // host:port
    public final String admin; // host:port

    private Gateway(Process proc, Path dir, Path log, String[] extra, String amqp, String mqtt, String admin) {
        this.proc = proc;
        this.dir = dir;
        this.log = log;
        this.extra = extra;
        this.amqp = amqp;
        this.mqtt = mqtt;
        this.admin = admin;
    }

    /** Starts a gateway with the suite's flags plus extra ones ("--key=value"). */
    public static Gateway start(String... extra) throws Exception {
        return startOn(0, extra);
    }

    /** The AMQP port a started gateway bound. */
    public int amqpPort() {
        return Integer.parseInt(amqp.substring(amqp.lastIndexOf(':') + 1));
    }

    /**
     * Starts a gateway whose AMQP listener binds amqpPort (0: a free one), e.g.
     * the port of a gateway stopped before, for clients that reconnect.
     */
    public static Gateway startOn(int amqpPort, String... extra) throws Exception {
        String bin = System.getProperty("gateway.bin", "");
        if (bin.isEmpty()) {
            throw new IllegalStateException("-Dgateway.bin=PATH is needed: the gateway binary (test/e2e/jms.sh builds it)");
        }
        return launch(Files.createTempDirectory("tolsey-jms"), amqpPort, extra);
    }

    /**
     * Starts a gateway process in dir (its data.dir is dir/data), logging to a
     * new file there: a restarted gateway finds what the one before stored.
     */
    private static Gateway launch(Path dir, int amqpPort, String... extra) throws Exception {
        String bin = System.getProperty("gateway.bin", "");
        Path log = Files.createTempFile(dir, "gateway", ".log");
        List<String> cmd = new ArrayList<>(List.of(bin,
                "--mqtt.listen=127.0.0.1:0",
                "--amqp.listen=127.0.0.1:" + amqpPort,
                "--admin.listen=127.0.0.1:0",
                "--amqp.allowAnonymous=true",
                "--amqp.users=" + USER + ":" + PASSWORD,
                "--queues.autoCreate=true",
                "--data.dir=" + dir.resolve("data"),
                "--log.format=text"));
        cmd.addAll(List.of(extra));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        try {
            String admin = null;
            while (System.nanoTime() < deadline) {
                if (!p.isAlive()) {
                    throw new IllegalStateException("the gateway exited during start:\n" + Files.readString(log));
                }
                admin = addr(log, "admin API listening");
                if (admin != null && ready(admin)) {
                    // Every listener is up once /readyz answers 200.
                    return new Gateway(p, dir, log, extra, addr(log, "amqp listening"), addr(log, "mqtt listening"), admin);
                }
                Thread.sleep(50);
            }
            throw new IllegalStateException("the gateway was not ready within 20 s:\n" + Files.readString(log));
        } catch (Exception e) {
            p.destroyForcibly();
            throw e;
        }
    }

    private static final Pattern ADDR = Pattern.compile(" (?:addr|address)=\"?([^ \"]+)");

    private static String addr(Path log, String msg) throws IOException {
        for (String line : Files.readAllLines(log)) {
            if (line.contains("msg=\"" + msg + "\"") && !line.contains("transport=websocket")) {
                Matcher m = ADDR.matcher(line);
                if (m.find()) {
                    return m.group(1);
                }
            }
        }
        return null;
    }

    private static boolean ready(String admin) {
        try {
            HttpResponse<Void> r = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(URI.create("http://" + admin + "/readyz")).timeout(Duration.ofSeconds(2)).build(),
                    HttpResponse.BodyHandlers.discarding());
            return r.statusCode() == 200;
        } catch (Exception e) {
            return false;
        }
    }

    /** The Qpid JMS connection URI, with extra query options ("a=b&c=d"). */
    public String uri(String options) {
        return "amqp://" + amqp + (options.isEmpty() ? "" : "?" + options);
    }

    public String uri() {
        return uri("");
    }

    /** tcp://host:port for an MQTT client. */
    public String mqttURI() {
        return "tcp://" + mqtt;
    }

    /** The gateway's log so far (for failure messages). */
    public String log() throws IOException {
        return Files.readString(log);
    }

    /**
     * Stops this gateway and starts another on the same AMQP port and data
     * directory, with the same flags: gracefully (SIGTERM, the process drains
     * and closes its stores) or, when kill, with SIGKILL (kill -9: nothing
     * is flushed or closed). Use the returned gateway from then on (its MQTT
     * and admin ports are new); this one is spent.
     */
    public Gateway restart(boolean kill) throws Exception {
        if (kill) {
            proc.destroyForcibly().waitFor(); // Process.destroyForcibly: SIGKILL
        } else {
            stop();
        }
        checkLog();
        return launch(dir, amqpPort(), extra);
    }

    private void stop() throws Exception {
        proc.destroy(); // SIGTERM: a graceful drain
        if (!proc.waitFor(10, TimeUnit.SECONDS)) {
            proc.destroyForcibly().waitFor();
        }
    }

    private void checkLog() throws IOException {
        String out = Files.readString(log);
        if (out.contains("panic:") || out.contains("DATA RACE") || out.contains("fatal error:")) {
            throw new AssertionError("panic or race in the gateway log:\n" + out);
        }
    }

    @Override
    public void close() throws Exception {
        stop();
        String out = Files.readString(log);
        try (var files = Files.walk(dir)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
        if (out.contains("panic:") || out.contains("DATA RACE") || out.contains("fatal error:")) {
            throw new AssertionError("panic or race in the gateway log:\n" + out);
        }
    }
}
