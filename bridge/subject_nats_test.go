package bridge

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pahov3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// Every goroutine the tests start, the in-process NATS server's included,
// is gone once they have shut it down. (The package's only TestMain: tests
// added later share it.)
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startNATS runs a NATS server in-process, as nats-server's own tests do
// (RunServer): client and MQTT listeners on free ports, JetStream (which
// its MQTT support needs) in a temporary directory. It is shut down, and
// waited for, when the test ends. It returns the MQTT listener's URL.
func startNATS(t testing.TB) (*server.Server, string) {
	t.Helper()
	opts := &server.Options{
		ServerName: "tolsey-bridge-test", // MQTT needs a name
		Host:       "127.0.0.1",
		Port:       -1,
		NoLog:      true,
		NoSigs:     true,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		MQTT:       server.MQTTOpts{Host: "127.0.0.1", Port: -1},
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready after 10 s")
	}
	// NewServer keeps opts; the MQTT listener wrote the port it bound.
	return s, fmt.Sprintf("tcp://127.0.0.1:%d", opts.MQTT.Port)
}

// natsConn connects nats.go to s, closed when the test ends.
func natsConn(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("nats.Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// mqttMsg is a message a paho client received.
type mqttMsg struct{ topic, payload string }

// mqttConn connects an MQTT 3.1.1 client to NATS's MQTT listener (NATS
// speaks only 3.1.1, protocol level 4: paho.golang, MQTT 5 only, cannot
// connect). Every message it receives, whichever subscription it came
// through, goes to the returned channel. It disconnects when the test ends.
func mqttConn(t testing.TB, url, id string) (pahov3.Client, chan mqttMsg) {
	t.Helper()
	got := make(chan mqttMsg, 1024)
	o := pahov3.NewClientOptions().AddBroker(url).SetClientID(id).
		SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false).
		SetDefaultPublishHandler(func(_ pahov3.Client, m pahov3.Message) {
			got <- mqttMsg{m.Topic(), string(m.Payload())}
		})
	c := pahov3.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT connect %s to NATS: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c, got
}

func mqttPublish(t testing.TB, c pahov3.Client, topic, payload string) {
	t.Helper()
	if tok := c.Publish(topic, 0, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT publish %q: %v", topic, tok.Error())
	}
}

// mqttSubscribe subscribes at QoS 0 and returns the granted code (0x80:
// refused).
func mqttSubscribe(t testing.TB, c pahov3.Client, filter string) byte {
	t.Helper()
	tok := c.Subscribe(filter, 0, nil)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("MQTT subscribe %q: %v", filter, tok.Error())
	}
	return tok.(*pahov3.SubscribeToken).Result()[filter]
}

// subjects records, by payload, the subjects of every NATS message whose
// payload starts with prefix. The copies NATS's MQTT support stores in its
// streams ("$MQTT.rmsgs.", "$MQTT.msgs.") are left out.
type subjects struct {
	mu sync.Mutex
	m  map[string][]string
}

func recordSubjects(t testing.TB, nc *nats.Conn, prefix string) *subjects {
	t.Helper()
	r := &subjects{m: map[string][]string{}}
	_, err := nc.Subscribe(">", func(m *nats.Msg) {
		if p := string(m.Data); strings.HasPrefix(p, prefix) &&
			!strings.HasPrefix(m.Subject, "$MQTT.rmsgs.") && !strings.HasPrefix(m.Subject, "$MQTT.msgs.") {
			r.mu.Lock()
			r.m[p] = append(r.m[p], m.Subject)
			r.mu.Unlock()
		}
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		t.Fatalf("subscribe >: %v", err)
	}
	return r
}

func (r *subjects) get(payload string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.m[payload])
}

// wait polls until NATS has published payload on subject, or the deadline
// has passed, and reports whether it did.
func (r *subjects) wait(payload, subject string, deadline time.Time) bool {
	for {
		if slices.Contains(r.get(payload), subject) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMQTT waits for the message with payload, skipping others.
func waitMQTT(t testing.TB, got chan mqttMsg, payload string) mqttMsg {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-got:
			if m.payload == payload {
				return m
			}
		case <-deadline:
			t.Fatalf("no MQTT message %q within 10 s", payload)
		}
	}
}

// Every topic of the table that we map, NATS's MQTT listener publishes on
// the subject we compute; and a NATS message on that subject reaches an
// MQTT client subscribed to the topic on NATS's listener under exactly
// that topic. A device on the gateway and one on NATS agree on every name.
func TestTopicsAgreeWithNATS(t *testing.T) {
	s, url := startNATS(t)
	nc := natsConn(t, s)
	rec := recordSubjects(t, nc, "row-")
	pub, _ := mqttConn(t, url, "pub")
	sub, got := mqttConn(t, url, "sub")

	// MQTT → NATS.
	for i, c := range topicCases {
		if c.subject != "" {
			mqttPublish(t, pub, c.topic, fmt.Sprintf("row-%d", i))
		}
	}
	deadline := time.Now().Add(10 * time.Second) // for every row: all are sent
	for i, c := range topicCases {
		if c.subject == "" {
			continue
		}
		ours, err := TopicToSubject(c.topic)
		if err != nil {
			t.Fatalf("TopicToSubject(%q): %v", c.topic, err)
		}
		payload := fmt.Sprintf("row-%d", i)
		if !rec.wait(payload, ours, deadline) {
			t.Errorf("topic %q: NATS published on %q within 10 s, TopicToSubject gives %q", c.topic, rec.get(payload), ours)
			continue
		}
		for _, s := range rec.get(payload) {
			// Sparkplug-aware, NATS also makes an NBIRTH or DBIRTH
			// available on $sparkplug/certificates/<topic>.
			if s != ours && s != "$sparkplug.certificates."+ours {
				t.Errorf("topic %q: NATS published on %q too", c.topic, s)
			}
		}
	}

	// NATS → MQTT, through a subscription to the topic itself.
	for i, c := range topicCases {
		if c.subject == "" {
			continue
		}
		granted := mqttSubscribe(t, sub, c.topic)
		_, ourErr := FilterToSubjects(c.topic)
		if refused := granted == 0x80; refused != (ourErr != nil) {
			t.Errorf("filter %q: NATS granted 0x%02x, FilterToSubjects: %v", c.topic, granted, ourErr)
		}
		if granted == 0x80 {
			continue
		}
		payload := fmt.Sprintf("back-%d", i)
		if err := nc.Publish(c.subject, []byte(payload)); err != nil {
			t.Fatal(err)
		}
		if m := waitMQTT(t, got, payload); m.topic != c.topic {
			t.Errorf("subject %q: NATS delivered topic %q, want %q", c.subject, m.topic, c.topic)
		}
	}
}

// The NATS subscriptions NATS's MQTT listener makes for each filter are
// exactly FilterToSubjects's, level-up subject of "a/#" included.
func TestFiltersAgreeWithNATS(t *testing.T) {
	s, url := startNATS(t)
	filters := []string{
		"f1/#", "+/f2", "f3/+/c/#", "+/+/f4", "/f5/#", "f6//+", "spBv1.0/+/NBIRTH/#",
		"f7.x/#", "$SYS/f8/#", "f9/", "f10/+/", "température/#",
	}
	c, _ := mqttConn(t, url, "filters")
	var want []string
	for _, f := range filters {
		if g := mqttSubscribe(t, c, f); g == 0x80 {
			t.Fatalf("NATS refused filter %q", f)
		}
		ss, err := FilterToSubjects(f)
		if err != nil {
			t.Fatalf("FilterToSubjects(%q): %v", f, err)
		}
		want = append(want, ss...)
	}
	cz, err := s.Connz(&server.ConnzOptions{Subscriptions: true, MQTTClient: "filters"})
	if err != nil || len(cz.Conns) != 1 {
		t.Fatalf("Connz for the MQTT client: %v, %d connections", err, len(cz.Conns))
	}
	subs := cz.Conns[0].Subs
	slices.Sort(subs)
	slices.Sort(want)
	if !slices.Equal(subs, want) {
		t.Errorf("NATS subscribed\n\t%q\nFilterToSubjects gives\n\t%q", subs, want)
	}
}

// What NATS's MQTT support does with the names we refuse: each of these is
// why docs/bridge.md says "unmappable". If one fails, NATS changed its
// mapping: look again at subject.go and the docs.
func TestNATSDivergences(t *testing.T) {
	s, url := startNATS(t)
	nc := natsConn(t, s)
	rec := recordSubjects(t, nc, "div-")
	c, got := mqttConn(t, url, "div")

	// A '*' level becomes a wildcard subject, and a control character
	// passes through.
	for i, topic := range []string{"w/*", "v/a\x01b"} {
		if _, err := TopicToSubject(topic); !errors.Is(err, ErrUnmappable) {
			t.Errorf("TopicToSubject(%q): %v, want ErrUnmappable", topic, err)
		}
		mqttPublish(t, c, topic, fmt.Sprintf("div-%d", i))
		want := natsCharRules(topic)
		if p := fmt.Sprintf("div-%d", i); !rec.wait(p, want, time.Now().Add(10*time.Second)) {
			t.Errorf("topic %q: NATS published on %q within 10 s, this test expected %q", topic, rec.get(p), want)
		}
	}

	// An MQTT filter "x/*", which matches the one topic "x/*", becomes
	// the NATS wildcard "x.*": its subscriber gets "x/anything".
	if _, err := FilterToSubjects("x/*"); !errors.Is(err, ErrUnmappable) {
		t.Errorf("FilterToSubjects(\"x/*\"): %v, want ErrUnmappable", err)
	}
	mqttSubscribe(t, c, "x/*")
	if err := nc.Publish("x.anything", []byte("star")); err != nil {
		t.Fatal(err)
	}
	if m := waitMQTT(t, got, "star"); m.topic != "x/anything" {
		t.Errorf("filter x/*: got topic %q", m.topic)
	}

	// Subjects no topic maps to reach MQTT under another name: a lone '/'
	// is dropped, '+' arrives as an MQTT wildcard in a topic name.
	mqttSubscribe(t, c, "d/#")
	for _, r := range [][2]string{{"d.a/b", "d/ab"}, {"d.+", "d/+"}, {"d.a/", "d/a"}} {
		if _, err := SubjectToTopic(r[0]); !errors.Is(err, ErrUnmappable) {
			t.Errorf("SubjectToTopic(%q): %v, want ErrUnmappable", r[0], err)
		}
		if err := nc.Publish(r[0], []byte(r[0])); err != nil {
			t.Fatal(err)
		}
		if m := waitMQTT(t, got, r[0]); m.topic != r[1] {
			t.Errorf("subject %q reached MQTT as %q, this test expected %q", r[0], m.topic, r[1])
		}
	}
}

// Why Mapping refuses subjects over MaxSubjectLength: NATS cuts a client
// whose protocol line is over max_control_line (4 KiB), and nats.go then
// closes the connection for good instead of reconnecting.
func TestNATSClosesOnLongSubject(t *testing.T) {
	s, _ := startNATS(t)
	closed := make(chan struct{})
	nc := natsConn(t, s, nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err := nc.Publish(strings.Repeat("a", MaxSubjectLength), nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("a %d-byte subject: %v", MaxSubjectLength, err)
	}
	_ = nc.Publish(strings.Repeat("a", 4096), nil)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("NATS kept the connection after a 4,096-byte subject")
	}
}
