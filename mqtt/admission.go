package mqtt

import (
	"net"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core/limits"
)

// admission applies the connection limits (Options.Admission: limits.*,
// docs/security.md, "Limits") to every listener, TCP, WebSocket and
// their TLS twins.
//
// The decision is taken at accept, where it is cheapest and before the
// connection holds anything but its socket; the refusal is given at
// CONNECT, because MQTT has no way to refuse before it: a connection
// closed at accept looks to a client like a network failure, and it
// retries at once. A refused connection is served just far enough to read
// its CONNECT (within refuseTimeout, not connectTimeout) and answer it:
//   - MQTT 5: CONNACK 0x97 Quota exceeded (too many connections, in all or
//     from the address) or 0x9F Connection rate exceeded, with a Reason
//     String saying which;
//   - MQTT 3.1.1 and 3.1: CONNACK return code 3 Server unavailable.
//
// Refused connections waiting for their CONNECT are at most
// maxPendingRefusals; beyond that they are closed at accept unanswered
// (still counted), so a flood of refused connections costs a bounded
// number of goroutines and buffers, whoever sends it. A refused
// connection is never counted as open and takes no rate token.
//
// The connection's verdict is kept by the net.Conn mochi is given, which
// is cl.Net.Conn in OnConnect.
type admission struct {
	s   *Server
	adm *limits.Admission // nil: no limits; every method is then a no-op

	mu      sync.Mutex
	conns   map[net.Conn]verdict // connections being served, admitted or refused
	pending int                  // refused ones among them
}

type verdict struct {
	ticket limits.Ticket
	reason string // "" admitted
}

const (
	maxPendingRefusals = 256
	refuseTimeout      = 2 * time.Second
)

func newAdmission(s *Server) *admission {
	a := &admission{s: s, adm: s.opts.Admission, conns: map[net.Conn]verdict{}}
	if a.adm != nil && s.opts.Metrics != nil {
		for _, r := range limits.Reasons { // series that read 0, not absent
			s.opts.Metrics.ConnsRefused.WithLabelValues("mqtt", r)
		}
	}
	return a
}

// admit decides on conn, accepted by the listener named listener. It
// returns how long conn has for its CONNECT, or 0 when it is to be closed
// now, unanswered. Every conn admit returns a timeout for must go through
// done when it ends.
func (a *admission) admit(conn net.Conn, listener string, connectTimeout time.Duration) time.Duration {
	if a.adm == nil {
		return connectTimeout
	}
	v := a.adm.Admit(conn.RemoteAddr())
	a.mu.Lock()
	defer a.mu.Unlock()
	if v.Reason == "" {
		a.conns[conn] = verdict{ticket: v.Ticket}
		return connectTimeout
	}
	a.s.opts.Metrics.ConnRefused("mqtt", v.Reason)
	if v.Log {
		// At most once per address per interval (limits.Verdict.Log).
		a.s.log.Info("mqtt connection refused", "listener", listener, "remote", conn.RemoteAddr().String(),
			"reason", v.Reason)
	}
	if a.pending >= maxPendingRefusals {
		return 0
	}
	a.pending++
	a.conns[conn] = verdict{reason: v.Reason}
	return min(connectTimeout, refuseTimeout)
}

// done forgets conn, which has ended, and releases its admission.
func (a *admission) done(conn net.Conn) {
	if a.adm == nil {
		return
	}
	a.mu.Lock()
	v := a.conns[conn]
	delete(a.conns, conn)
	if v.reason != "" {
		a.pending--
	}
	a.mu.Unlock()
	v.ticket.Release()
}

// refusal is why cl's connection was refused at accept, or "".
func (a *admission) refusal(cl *mochi.Client) string {
	if a.adm == nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[cl.Net.Conn].reason
}

// refuseConnect writes the CONNACK refusing cl for reason, and returns the
// error that ends the connection. Written here rather than by
// mochi.SendConnack, which replaces a Reason String with the code's name.
func (a *admission) refuseConnect(cl *mochi.Client, reason string) error {
	code := packets.ErrQuotaExceeded
	if reason == limits.ReasonRate {
		code = packets.ErrConnectionRateExceeded
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ReasonCode: code.Code,
		Properties: packets.Properties{ReasonString: limits.Describe(reason)}}
	if cl.Properties.ProtocolVersion < 5 {
		// 3.1.1 has no quota codes: 3 is "the Network Connection has been
		// made but the MQTT service is unavailable" [MQTT-3.2.2.3].
		ack = packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack},
			ReasonCode: packets.Err3ServerUnavailable.Code}
	}
	_ = cl.WritePacket(ack)
	return code
}
