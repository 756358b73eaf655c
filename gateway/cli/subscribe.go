package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// received is one message `gateway subscribe` prints.
type received struct {
	Topic         string  `json:"topic"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 string  `json:"payloadBase64,omitempty"`
	Retain        bool    `json:"retain,omitempty"`
}

func (c *cli) printReceived(topic string, payload []byte, retain bool) {
	if c.asJSON {
		r := received{Topic: topic, Retain: retain}
		if utf8.Valid(payload) {
			s := string(payload)
			r.Payload = &s
		} else {
			r.PayloadBase64 = base64.StdEncoding.EncodeToString(payload)
		}
		b, _ := json.Marshal(r)
		fmt.Fprintf(c.out, "%s\n", b)
		return
	}
	p := string(payload)
	if !utf8.Valid(payload) {
		p = "0x" + hex.EncodeToString(payload)
	}
	fmt.Fprintf(c.out, "%s %s\n", topic, p)
}

// subscribe is `gateway subscribe FILTER`: a client of the gateway's MQTT
// (MQTT 5, paho.golang) or AMQP 1.0 (go-amqp) listener that prints every
// message it receives, one per line, until interrupted or --count.
func subscribe(c *cli, args []string) error {
	fs := c.flags("subscribe")
	target := fs.String("url", "mqtt://127.0.0.1:1883", "mqtt://HOST:PORT or amqp://HOST:PORT")
	user := fs.String("user", "", "user name")
	password := fs.String("password", os.Getenv(cliEnvPrefix+"PASSWORD"), "password (env "+cliEnvPrefix+"PASSWORD)")
	qos := fs.Uint8("qos", 0, "MQTT QoS of the subscription (0 or 1); AMQP: 1 settles each message after printing")
	count := fs.Int("count", 0, "exit after this many messages (0: until interrupted)")
	pos, err := c.parse(fs, args, 1, 1, "subscribe FILTER [--url mqtt://HOST:PORT|amqp://HOST:PORT] [--qos 0|1] [--count N]")
	if err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		return usagef("--url %q: mqtt://HOST:PORT or amqp://HOST:PORT", *target)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch u.Scheme {
	case "mqtt", "tcp":
		return c.subscribeMQTT(ctx, stop, u.Host, pos[0], *user, *password, *qos, *count)
	case "amqp":
		return c.subscribeAMQP(ctx, stop, u.Host, pos[0], *user, *password, *qos, *count)
	}
	return usagef("--url %q: mqtt:// or amqp://", *target)
}

func clientID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "gateway-cli-" + hex.EncodeToString(b[:])
}

func (c *cli) subscribeMQTT(ctx context.Context, stop func(), addr, filter, user, password string, qos byte, count int) error {
	conn, err := (&net.Dialer{Timeout: c.timeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	// n is counted on paho's goroutine. Reaching count closes enough, not
	// the context: a retained message can be handled before Subscribe has
	// returned, which a cancelled context would then make fail.
	var n atomic.Int64
	done, enough := make(chan struct{}), make(chan struct{})
	cfg := paho.ClientConfig{ClientID: clientID(), Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			if count > 0 && n.Load() >= int64(count) {
				return true, nil
			}
			c.printReceived(pr.Packet.Topic, pr.Packet.Payload, pr.Packet.Retain)
			if n.Add(1) == int64(count) {
				close(enough)
			}
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			fmt.Fprintf(c.errw, "gateway: the server disconnected: reason %#x\n", d.ReasonCode)
			close(done)
		},
	}
	cl := paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: cfg.ClientID, CleanStart: true, KeepAlive: 30}
	if user != "" {
		cp.Username, cp.UsernameFlag = user, true
		cp.Password, cp.PasswordFlag = []byte(password), true
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ca, err := cl.Connect(cctx, cp)
	if err != nil {
		conn.Close()
		return fmt.Errorf("connect %s: %w", addr, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return fmt.Errorf("connect %s: refused, reason %#x", addr, ca.ReasonCode)
	}
	defer func() { _ = cl.Disconnect(&paho.Disconnect{}) }()
	sa, err := cl.Subscribe(cctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		return fmt.Errorf("subscribe %s: refused, reason %#x", filter, sa.Reasons)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-enough:
		stop()
		return nil
	case <-done:
		return fmt.Errorf("disconnected after %d messages", n.Load())
	}
}

func (c *cli) subscribeAMQP(ctx context.Context, stop func(), addr, filter, user, password string, qos byte, count int) error {
	opts := &goamqp.ConnOptions{ContainerID: clientID()}
	if user != "" {
		opts.SASLType = goamqp.SASLTypePlain(user, password)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := goamqp.Dial(cctx, "amqp://"+addr, opts)
	if err != nil {
		return fmt.Errorf("connect %s: %w", addr, err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(cctx, nil)
	if err != nil {
		return err
	}
	mode := goamqp.SenderSettleModeSettled
	if qos > 0 {
		mode = goamqp.SenderSettleModeUnsettled
	}
	rcv, err := sess.NewReceiver(cctx, filter, &goamqp.ReceiverOptions{Credit: 100, RequestedSenderSettleMode: mode.Ptr()})
	if err != nil {
		return fmt.Errorf("attach %s: %w", filter, err)
	}
	for n := 0; count == 0 || n < count; n++ {
		m, err := rcv.Receive(ctx, nil)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		topic := filter
		if m.Properties != nil && m.Properties.To != nil {
			topic = *m.Properties.To
		}
		retain := false
		if v, ok := m.Annotations["x-opt-retain"].(bool); ok {
			retain = v
		}
		c.printReceived(topic, body(m), retain)
		if qos > 0 {
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				return err
			}
		}
	}
	stop()
	return nil
}

// body is a received AMQP message's payload: its data section, or an
// amqp-value holding text or bytes (how the gateway sends a UTF-8 payload,
// docs/mapping.md).
func body(m *goamqp.Message) []byte {
	if d := m.GetData(); d != nil {
		return d
	}
	switch v := m.Value.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	case nil:
		return nil
	default:
		return []byte(fmt.Sprint(v))
	}
}
