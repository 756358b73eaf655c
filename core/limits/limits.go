// Package limits admits new client connections against the gateway's
// connection limits (docs/security.md, "Limits"): a total over every
// listener of every protocol, a count per source address, and a connect
// rate per source address (a token bucket). One Admission serves MQTT
// (TCP, WebSocket, TLS, WSS) and AMQP (plain, TLS) alike, so the total is
// one number whatever the protocol.
//
// It knows no protocol: it says yes or why not, and each front-end puts
// the refusal in its protocol's own words. It sits under core/ for the
// reason core/metrics does (docs/architecture.md): the front-ends may not
// import each other nor gateway. It imports only the standard library.
package limits

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Reasons a connection is refused: the reason label of
// tolsey_connections_refused_total.
const (
	ReasonTotal   = "max_connections"             // limits.maxConnections
	ReasonAddress = "max_connections_per_address" // limits.maxConnectionsPerAddress
	ReasonRate    = "connect_rate"                // limits.connectRate / connectBurst
)

// Describe says what reason means to the client refused, in the words
// every front-end sends (an MQTT 5 Reason String, an AMQP error's
// description).
func Describe(reason string) string {
	switch reason {
	case ReasonTotal:
		return "quota exceeded: the gateway has as many connections as it takes"
	case ReasonAddress:
		return "quota exceeded: too many connections from this address"
	case ReasonRate:
		return "connection rate exceeded for this address: retry later"
	}
	return reason
}

// Reasons lists every reason, for series that read 0 from the start.
var Reasons = []string{ReasonTotal, ReasonAddress, ReasonRate}

// Options are the limits; a zero field is no limit.
type Options struct {
	MaxConnections int // open connections in all
	MaxPerAddress  int // open connections from one source address (Key)
	// Rate is the new connections per second one source address may
	// open, with bursts of up to Burst (at least 1; 0 means
	// max(1, ceil(Rate))). A bucket starts full.
	Rate  float64
	Burst int
	// MaxAddresses bounds the addresses remembered with no connection
	// open, only for their rate (default 16384); beyond it the rule in
	// sweep forgets some.
	MaxAddresses int
}

const (
	defaultMaxAddresses = 16384
	// logEvery: at most one log line per address per logEvery, and at
	// most logBurst lines in all per logEvery, so that a flood, from one
	// address or many, cannot flood the log.
	logEvery = 10 * time.Second
	logBurst = 20
)

// Admission decides on new connections. A nil *Admission admits all.
// Safe for concurrent use: one mutex, held for a map lookup and a few
// arithmetic operations (BenchmarkAdmit).
type Admission struct {
	opts  Options
	start time.Time
	clock func() time.Duration // since start; tests replace it

	mu        sync.Mutex
	open      int                     // admitted and not released
	addrs     map[netip.Addr]*address // nil when no per-address limit is set
	nextSweep int                     // len(addrs) that triggers the next sweep
	logStart  time.Duration           // the current window of the global log budget
	logLines  int                     // lines allowed in that window
}

// address is what is known of one source address (Key).
type address struct {
	open    int           // admitted connections not released
	tokens  float64       // the rate bucket, as of last
	last    time.Duration // when tokens was computed
	lastLog time.Duration // when a refusal was last logged; -logEvery: never
}

// New returns an Admission for o, or nil when o sets no limit.
func New(o Options) *Admission {
	if o.MaxConnections <= 0 && o.MaxPerAddress <= 0 && o.Rate <= 0 {
		return nil
	}
	if o.Rate > 0 && o.Burst <= 0 {
		o.Burst = max(1, int(o.Rate+0.999999))
	}
	if o.MaxAddresses <= 0 {
		o.MaxAddresses = defaultMaxAddresses
	}
	a := &Admission{opts: o, start: time.Now(), nextSweep: 1024}
	a.clock = func() time.Duration { return time.Since(a.start) }
	if o.MaxPerAddress > 0 || o.Rate > 0 {
		a.addrs = map[netip.Addr]*address{}
	}
	a.logStart = -logEvery
	return a
}

// Ticket is an admitted connection; Release it when the connection ends.
// The zero Ticket releases nothing.
type Ticket struct {
	a   *Admission
	key netip.Addr
}

// Verdict is Admit's answer.
type Verdict struct {
	Ticket        // valid when Reason is ""
	Reason string // "" admitted; else one of the Reason* constants
	// Log: the refusal is the first from its address in logEvery and the
	// global budget allows a line; the caller logs it, else only counts.
	Log bool
}

// Key is what a remote address is counted under: an IPv4 address (or an
// IPv4-mapped IPv6 one) as itself, an IPv6 address by its /64, the
// prefix one subscriber line or host is given (RFC 6177), so that a host
// cannot dodge the per-address limits by using more of its own addresses.
// An address that is not IP (a Unix socket, a test's pipe) is the zero
// Addr: all such share one count.
func Key(remote net.Addr) netip.Addr {
	var ip netip.Addr
	switch r := remote.(type) {
	case *net.TCPAddr:
		ip = r.AddrPort().Addr()
	default:
		if remote != nil {
			if ap, err := netip.ParseAddrPort(remote.String()); err == nil {
				ip = ap.Addr()
			}
		}
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	return ip
}

// Admit decides on a new connection from remote. Checked in order: the
// total, the address's count, its rate; a refused connection takes no
// token from the bucket.
func (a *Admission) Admit(remote net.Addr) Verdict {
	if a == nil {
		return Verdict{}
	}
	key := Key(remote)
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	var ad *address
	if a.addrs != nil {
		ad = a.addrs[key]
		if ad == nil {
			a.sweep(now)
			ad = &address{tokens: float64(a.opts.Burst), last: now, lastLog: -logEvery}
			a.addrs[key] = ad
		}
	}
	reason := ""
	switch {
	case a.opts.MaxConnections > 0 && a.open >= a.opts.MaxConnections:
		reason = ReasonTotal
	case a.opts.MaxPerAddress > 0 && ad.open >= a.opts.MaxPerAddress:
		reason = ReasonAddress
	case a.opts.Rate > 0:
		ad.tokens = min(float64(a.opts.Burst), ad.tokens+(now-ad.last).Seconds()*a.opts.Rate)
		ad.last = now
		if ad.tokens < 1 {
			reason = ReasonRate
			break
		}
		ad.tokens--
	}
	if reason != "" {
		return Verdict{Reason: reason, Log: a.mayLog(ad, now)}
	}
	a.open++
	if ad != nil {
		ad.open++
	}
	return Verdict{Ticket: Ticket{a: a, key: key}}
}

// mayLog reports whether a refusal may be logged, and notes it.
func (a *Admission) mayLog(ad *address, now time.Duration) bool {
	if ad != nil && now-ad.lastLog < logEvery {
		return false
	}
	if now-a.logStart >= logEvery {
		a.logStart, a.logLines = now, 0
	}
	if a.logLines >= logBurst {
		return false
	}
	a.logLines++
	if ad != nil {
		ad.lastLog = now
	}
	return true
}

// Release ends an admitted connection. Call it once per admitted Verdict.
func (t Ticket) Release() {
	a := t.a
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.open--
	if ad := a.addrs[t.key]; ad != nil {
		ad.open--
	}
}

// sweep bounds the address table before an address is added. An address
// with connections open stays (it is counted; there are at most as many
// as open sockets). An idle one is only rate state, and is dropped once
// its bucket has refilled and it was not logged within logEvery: it
// then says nothing a fresh entry would not. If more than MaxAddresses
// idle ones remain (a flood from many addresses), idle ones are dropped
// in map order, which is random, until MaxAddresses remain: each
// forgotten address gets a full bucket again, which errs towards letting
// clients in rather than refusing a newcomer because the table is full.
// It runs when the table has doubled since the last sweep, so its cost
// per admitted address is constant, and the table never holds more than
// about 2 × (open addresses + MaxAddresses) entries.
func (a *Admission) sweep(now time.Duration) {
	if len(a.addrs) < a.nextSweep {
		return
	}
	refill := time.Duration(0)
	if a.opts.Rate > 0 {
		refill = time.Duration(float64(a.opts.Burst) / a.opts.Rate * float64(time.Second))
	}
	idle := 0
	for k, ad := range a.addrs {
		if ad.open > 0 {
			continue
		}
		if now-ad.last >= refill && now-ad.lastLog >= logEvery {
			delete(a.addrs, k)
			continue
		}
		idle++
	}
	for k, ad := range a.addrs {
		if idle <= a.opts.MaxAddresses {
			break
		}
		if ad.open == 0 {
			delete(a.addrs, k)
			idle--
		}
	}
	a.nextSweep = max(1024, 2*len(a.addrs))
}

// Open is the number of admitted connections not yet released.
func (a *Admission) Open() int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.open
}

// Addresses is the number of addresses held in the table (tests, and a
// gauge if one is wanted).
func (a *Admission) Addresses() int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.addrs)
}
