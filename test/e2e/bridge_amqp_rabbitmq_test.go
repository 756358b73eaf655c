package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"

	"github.com/tolsey/tolsey/core/coretest"
)

// rabbitServer is Debian's rabbitmq-server (3.10, test/run installs it);
// its wrapper in /usr/sbin insists on the rabbitmq user, this one does not.
const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// startRabbitMQ runs a RabbitMQ node of its own with the AMQP 1.0 plugin,
// on free ports bound to 127.0.0.1, with its data, logs, Erlang cookie and
// port mapper (epmd) in a temp dir, and returns its AMQP address. The
// test's end stops both processes.
func startRabbitMQ(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(rabbitServer); err != nil {
		t.Fatalf("RabbitMQ is needed (Debian: apt-get install rabbitmq-server; test/run installs it): %v", err)
	}
	dir := t.TempDir()
	port, dist, epmdPort := freePortNum(t), freePortNum(t), freePortNum(t)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plugins := write("enabled_plugins", "[rabbitmq_amqp1_0].\n")
	conf := write("rabbitmq.conf", "listeners.tcp.default = 127.0.0.1:"+strconv.Itoa(port)+"\nloopback_users = none\n")
	for _, d := range []string{"mnesia", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"RABBITMQ_NODENAME=tolsey"+strconv.Itoa(port)+"@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+plugins,
		"RABBITMQ_CONFIG_FILE="+conf,
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
	)
	start := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env, cmd.Dir = env, dir
		logf, err := os.Create(filepath.Join(dir, filepath.Base(name)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		// A group of its own, so that the end of the test stops the
		// Erlang VM the script starts too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
		return cmd
	}
	start("epmd", "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
	start(rabbitServer)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	coretest.Eventually(t, "RabbitMQ accepts AMQP 1.0", 90*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return addr
}

func freePortNum(t *testing.T) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(freePort(t))
	n, _ := strconv.Atoi(p)
	return n
}

// rabbitSession is a go-amqp session on RabbitMQ as guest.
func rabbitSession(t *testing.T, addr string) *goamqp.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("guest", "guest")})
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The bridge against RabbitMQ 3.10 with its AMQP 1.0 plugin: an outbound
// QoS 1 rule into a queue (/queue/<name>), read back with go-amqp with the
// topic, headers and the bridge's message-id; an inbound rule from another
// queue into our topics.
func TestBridgeAMQPRabbitMQ(t *testing.T) {
	rabbit := startRabbitMQ(t)
	rs := rabbitSession(t, rabbit)
	g := startGateway(t, "--node.id=edge", amqpBridgesFlag(map[string]any{
		"name": "rabbit", "addr": rabbit, "user": "guest", "password": "guest",
		"rules": []ruleJSON{
			{"direction": "out", "local": "up/#", "remote": "/queue/tolsey-up", "qos": 1},
			{"direction": "in", "local": "down/#", "remote": "/queue/tolsey-down", "qos": 1},
		}}))
	eventually(t, "bridge connected", func() bool { return bridgeUp(g) })

	pub := connect5(t, g.MQTTAddr(), "pub")
	props := &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "k", Value: "v"}}}
	for _, p := range []string{"one", "two"} {
		if r := pub.publish(t, &paho.Publish{Topic: "up/dev/" + p, QoS: 1, Payload: []byte(p), Properties: props}); r.ReasonCode != 0 {
			t.Fatalf("PUBACK %#x", r.ReasonCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcv, err := rs.NewReceiver(ctx, "/queue/tolsey-up", &goamqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatalf("receiver on RabbitMQ: %v", err)
	}
	var ids []any
	for _, p := range []string{"one", "two"} {
		m := amqpNext(t, rcv)
		if amqpBody(m) != p || m.Properties == nil || m.Properties.Subject == nil || *m.Properties.Subject != "up/dev/"+p ||
			m.ApplicationProperties["Tolsey-Topic"] != "up/dev/"+p || m.ApplicationProperties["k"] != "v" ||
			m.Properties.ContentType == nil || *m.Properties.ContentType != "text/plain" {
			t.Errorf("RabbitMQ gave %q %+v %v", amqpBody(m), m.Properties, m.ApplicationProperties)
		}
		ids = append(ids, m.Properties.MessageID)
	}
	// MessageID(node, epoch/queue, seq): the buffer's sequence numbers,
	// which the same record keeps when it is sent again.
	for i, id := range ids {
		s, _ := id.(string)
		if !strings.HasPrefix(s, "edge:") || !strings.HasSuffix(s, "/queue/tolsey-up:"+strconv.Itoa(i+1)) {
			t.Errorf("message-id %d is %v, want edge:<epoch>/<queue>:%d", i, id, i+1)
		}
	}

	sub := connect5(t, g.MQTTAddr(), "sub")
	sub.subscribe(t, paho.SubscribeOptions{Topic: "down/#", QoS: 1})
	snd, err := rs.NewSender(ctx, "/queue/tolsey-down", nil)
	if err != nil {
		t.Fatalf("sender on RabbitMQ: %v", err)
	}
	subj := "down/dev/1"
	if err := snd.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte("cmd")}, Properties: &goamqp.MessageProperties{Subject: &subj},
		ApplicationProperties: map[string]any{"a": "1"}}, nil); err != nil {
		t.Fatalf("send to RabbitMQ: %v", err)
	}
	m := sub.next(t)
	if m.Topic != subj || string(m.Payload) != "cmd" || m.Properties.User.Get("a") != "1" || m.QoS != 1 {
		t.Errorf("local got %s %q qos %d %+v", m.Topic, m.Payload, m.QoS, m.Properties)
	}
}
