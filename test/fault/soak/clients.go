package soak

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// seqSet is the set of sequence numbers of one publisher that were
// acknowledged (or received): a bitset, so that an hour of load costs
// bits, not map entries.
type seqSet struct {
	mu   sync.Mutex
	bits []uint64
	n    int // members
}

func (s *seqSet) add(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := i / 64
	for len(s.bits) <= w {
		s.bits = append(s.bits, 0)
	}
	if s.bits[w]&(1<<(i%64)) == 0 {
		s.bits[w] |= 1 << (i % 64)
		s.n++
	}
}

// missing counts the members of s that got lacks, and returns the first few.
func (s *seqSet) missing(got *seqSet) (int, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got.mu.Lock()
	defer got.mu.Unlock()
	n, first := 0, []int(nil)
	for w, b := range s.bits {
		var g uint64
		if w < len(got.bits) {
			g = got.bits[w]
		}
		if m := b &^ g; m != 0 {
			for i := range 64 {
				if m&(1<<i) != 0 {
					n++
					if len(first) < 5 {
						first = append(first, w*64+i)
					}
				}
			}
		}
	}
	return n, first
}

func (s *seqSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// tracked is what one checked flow's publishers acknowledged and what its
// receiver got, per publisher: payloads are "<publisher>:<seq>" (padded).
type tracked struct {
	acked, got []*seqSet
	dups       atomic.Int64
}

func newTracked(pubs int) *tracked {
	t := &tracked{}
	for range pubs {
		t.acked = append(t.acked, &seqSet{})
		t.got = append(t.got, &seqSet{})
	}
	return t
}

func payload(pub, seq int, size int) []byte {
	b := fmt.Appendf(nil, "%d:%d:", pub, seq)
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

// receive records a received payload; it ignores what is not of the flow.
func (t *tracked) receive(p []byte) {
	a, rest, ok := strings.Cut(string(p), ":")
	if !ok {
		return
	}
	b, _, _ := strings.Cut(rest, ":")
	pub, err1 := strconv.Atoi(a)
	seq, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || pub < 0 || pub >= len(t.got) {
		return
	}
	before := t.got[pub].len()
	t.got[pub].add(seq)
	if t.got[pub].len() == before {
		t.dups.Add(1)
	}
}

// lost counts acknowledged messages the receiver has not had, and
// describes the first few.
func (t *tracked) lost() (int, string) {
	total, desc := 0, []string(nil)
	for i := range t.acked {
		n, first := t.acked[i].missing(t.got[i])
		total += n
		if n > 0 {
			desc = append(desc, fmt.Sprintf("publisher %d: %d missing, first %v", i, n, first))
		}
	}
	return total, strings.Join(desc, "; ")
}

// mqttOpts is how an MQTT 5 client connects.
type mqttOpts struct {
	clean bool // clean start; false: a persistent session (expiry 1 h)
	onMsg func(*paho.Publish)
}

// dialMQTT connects an MQTT 5 client (paho) over a real socket.
func dialMQTT(ctx context.Context, addr, id string, o mqttOpts) (*paho.Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{ClientID: id, Conn: conn, PacketTimeout: 30 * time.Second,
		OnClientError: func(error) {}}
	if o.onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			o.onMsg(pr.Packet)
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: id, CleanStart: o.clean, KeepAlive: 30}
	if !o.clean {
		exp := uint32(3600)
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &exp}
	}
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect %s: %w", id, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	return c, nil
}

func subscribe(ctx context.Context, c *paho.Client, filter string, qos byte) error {
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		return fmt.Errorf("subscribe %s refused: %v", filter, sa.Reasons)
	}
	return nil
}

// publish sends one message and returns nil when it was acknowledged with
// reason 0 (QoS 1) or written (QoS 0).
func publish(ctx context.Context, c *paho.Client, topic string, qos byte, retain bool, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: body})
	if err != nil {
		return err
	}
	if r != nil && r.ReasonCode != 0 {
		return fmt.Errorf("publish %s: PUBACK %#x", topic, r.ReasonCode)
	}
	return nil
}

func closeMQTT(c *paho.Client) {
	_ = c.Disconnect(&paho.Disconnect{})
	<-c.Done()
}

// dialAMQP opens an AMQP connection (SASL ANONYMOUS) and a session on it.
func dialAMQP(ctx context.Context, addr string) (*goamqp.Conn, *goamqp.Session, error) {
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		return nil, nil, err
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, sess, nil
}

// sendAMQP sends body unsettled and waits for the outcome: nil when
// accepted.
func sendAMQP(ctx context.Context, snd *goamqp.Sender, body []byte, durable bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m := goamqp.NewMessage(body)
	if durable {
		m.Header = &goamqp.MessageHeader{Durable: true}
	}
	r, err := snd.SendWithReceipt(ctx, m, nil)
	if err != nil {
		return err
	}
	st, err := r.Wait(ctx)
	if err != nil {
		return err
	}
	if _, ok := st.(*goamqp.StateAccepted); !ok {
		return fmt.Errorf("AMQP outcome %T %v", st, st)
	}
	return nil
}
