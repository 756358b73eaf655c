package amqp

import (
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// What the admin API shows of one connection beyond ConnInfo's basics
// (GET /api/v1/connections, /api/v1/subscriptions): its counters and its
// links.

// connStats are a connection's counters: the reader adds what comes in,
// the writer what goes out, one atomic add each on the connection's own
// memory; the admin API reads them.
type connStats struct {
	bytesIn, bytesOut atomic.Int64 // AMQP frames (inside TLS), the protocol headers and SASL included
	msgsIn, msgsOut   atomic.Int64 // whole messages received on links, deliveries sent
}

// countingReader counts what its reader gives, for connStats.bytesIn.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// newFrameReader reads the connection's frames, counting their bytes.
func (c *conn) newFrameReader() *frames.Reader {
	return frames.NewReader(countingReader{r: c.nc, n: &c.stats.bytesIn}, c.s.opts.MaxFrameSize)
}

// linkRegistry is a connection's attached links as the admin API sees
// them: the reader adds one at attach and removes it when the link leaves
// its session; the admin API lists them from its own goroutine, so what it
// reads is fixed at attach (linkMeta) or atomic (linkBase.shownCredit).
type linkRegistry struct {
	mu sync.Mutex
	m  map[endpoint]linkMeta
}

type linkMeta struct {
	role    string // the client's: sender (it publishes) or receiver
	address string // the target (sender) or source (receiver) address the client gave
	durable bool   // a JMS durable subscription
	shared  bool   // a JMS shared subscription
	subName string // the subscription's name, when one of those
	qos     byte   // receiver: 0 when every delivery is sent settled, else 1
}

// noteLink records ep, attached by a, for the admin API; a refused link
// (or none) is not recorded. Called by the reader (session.keep) before
// the attach answer is queued.
func (c *conn) noteLink(ep endpoint, a *frames.Attach) {
	if ep == nil || ep.base().refused {
		return
	}
	var m linkMeta
	switch l := ep.(type) {
	case *inLink:
		m.role = "sender"
		if a.Target != nil {
			m.address = a.Target.Address
		}
	case *outLink:
		m.role = "receiver"
		if a.Source != nil && !a.Source.Dynamic {
			m.address = a.Source.Address
		}
		if m.address == "" {
			m.address = l.filter
		}
		if l.sndMode != frames.SenderSettleModeSettled {
			m.qos = 1
		}
		switch {
		case l.group != nil:
			m.durable, m.shared, m.subName = l.group.durable, l.group.shared, l.group.key
		case l.subQueue != "":
			m.durable, m.subName = true, l.subQueue
		}
	default:
		return
	}
	c.linkReg.mu.Lock()
	if c.linkReg.m == nil {
		c.linkReg.m = map[endpoint]linkMeta{}
	}
	c.linkReg.m[ep] = m
	c.linkReg.mu.Unlock()
}

// dropLink forgets ep (it left its session).
func (c *conn) dropLink(ep endpoint) {
	c.linkReg.mu.Lock()
	delete(c.linkReg.m, ep)
	c.linkReg.mu.Unlock()
}

// showCredit publishes the link's credit for the admin API; called by the
// link's owner (the reader for links we receive on, the writer for links
// we send on) whenever it changes.
func (b *linkBase) showCredit(n uint32) { b.shownCredit.Store(n) }

// LinkInfo is one attached link of an AMQP connection.
type LinkInfo struct {
	Name    string `json:"name"`
	Role    string `json:"role"` // the client's: sender or receiver
	Address string `json:"address"`
	// Credit is what the receiving side granted and the sender has not
	// used: ours to a client sender, the client's to us on a receiver.
	Credit       uint32 `json:"credit"`
	QoS          byte   `json:"qos"`
	Durable      bool   `json:"durable,omitempty"`
	Shared       bool   `json:"shared,omitempty"`
	Subscription string `json:"subscription,omitempty"`
}

// links is the connection's attached links, sorted by role, address, name.
func (c *conn) linkList() []LinkInfo {
	c.linkReg.mu.Lock()
	out := make([]LinkInfo, 0, len(c.linkReg.m))
	for ep, m := range c.linkReg.m {
		out = append(out, LinkInfo{
			Name: ep.base().name, Role: m.role, Address: m.address, Credit: ep.base().shownCredit.Load(),
			QoS: m.qos, Durable: m.durable, Shared: m.shared, Subscription: m.subName,
		})
	}
	c.linkReg.mu.Unlock()
	slices.SortFunc(out, func(a, b LinkInfo) int {
		return strings.Compare(a.Role+"\x00"+a.Address+"\x00"+a.Name, b.Role+"\x00"+b.Address+"\x00"+b.Name)
	})
	return out
}

// Links is the attached links of connection number id; ok is false when
// it is not open.
func (s *Server) Links(id uint64) (links []LinkInfo, ok bool) {
	c := s.connByID(id)
	if c == nil {
		return nil, false
	}
	return c.linkList(), true
}

// connByID is the open connection number id, or nil.
func (s *Server) connByID(id uint64) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.id == id && !c.forced.Load() {
			return c
		}
	}
	return nil
}
