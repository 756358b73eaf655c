package limits

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// fake gives a an adjustable clock.
func fake(a *Admission) *time.Duration {
	now := new(time.Duration)
	a.clock = func() time.Duration { return *now }
	return now
}

func TestNoLimitsIsNil(t *testing.T) {
	if a := New(Options{}); a != nil {
		t.Fatal("New with no limit should return nil")
	}
	var a *Admission
	v := a.Admit(tcp("127.0.0.1:1"))
	if v.Reason != "" {
		t.Fatalf("nil Admission refused: %q", v.Reason)
	}
	v.Release()
}

func TestTotal(t *testing.T) {
	a := New(Options{MaxConnections: 2})
	v1 := a.Admit(tcp("10.0.0.1:1"))
	v2 := a.Admit(tcp("10.0.0.2:1"))
	if v1.Reason != "" || v2.Reason != "" {
		t.Fatalf("refused under the limit: %q %q", v1.Reason, v2.Reason)
	}
	if v := a.Admit(tcp("10.0.0.3:1")); v.Reason != ReasonTotal || !v.Log {
		t.Fatalf("third: %+v, want %s and a log line", v, ReasonTotal)
	}
	v1.Release()
	if v := a.Admit(tcp("10.0.0.3:1")); v.Reason != "" {
		t.Fatalf("after a release: %q", v.Reason)
	}
	if a.Open() != 2 {
		t.Fatalf("open %d, want 2", a.Open())
	}
}

func TestPerAddressAndIPv6Prefix(t *testing.T) {
	a := New(Options{MaxPerAddress: 1})
	for _, c := range []struct {
		first, second string
		same          bool
	}{
		{"10.0.0.1:1", "10.0.0.1:2", true},
		{"10.0.0.1:1", "10.0.0.2:2", false},
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:1", true}, // one /64
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", false},
		{"[::ffff:10.0.0.7]:1", "10.0.0.7:1", true}, // IPv4-mapped is IPv4
	} {
		v1 := a.Admit(tcp(c.first))
		v2 := a.Admit(tcp(c.second))
		if v1.Reason != "" {
			t.Fatalf("%s refused: %q", c.first, v1.Reason)
		}
		if got := v2.Reason == ReasonAddress; got != c.same {
			t.Errorf("%s then %s: reason %q, want refused=%v", c.first, c.second, v2.Reason, c.same)
		}
		v1.Release()
		v2.Release()
	}
}

func TestRateBucket(t *testing.T) {
	a := New(Options{Rate: 2, Burst: 3})
	now := fake(a)
	addr := tcp("10.0.0.1:1")
	for i := 0; i < 3; i++ {
		if v := a.Admit(addr); v.Reason != "" {
			t.Fatalf("burst connection %d refused: %q", i, v.Reason)
		}
	}
	v := a.Admit(addr)
	if v.Reason != ReasonRate || !v.Log {
		t.Fatalf("over the burst: %+v", v)
	}
	if v := a.Admit(addr); v.Reason != ReasonRate || v.Log {
		t.Fatalf("second refusal: %+v, want refused and not logged again", v)
	}
	if v := a.Admit(tcp("10.0.0.2:1")); v.Reason != "" {
		t.Fatalf("another address refused: %q", v.Reason)
	}
	*now += 500 * time.Millisecond // one token at 2/s
	if v := a.Admit(addr); v.Reason != "" {
		t.Fatalf("after a refill: %q", v.Reason)
	}
	if v := a.Admit(addr); v.Reason != ReasonRate {
		t.Fatalf("bucket should be empty again: %q", v.Reason)
	}
	*now += logEvery
	if v := a.Admit(addr); v.Reason != "" {
		t.Fatalf("after a long pause: %q", v.Reason)
	}
}

func TestLogBudget(t *testing.T) {
	a := New(Options{MaxConnections: 1})
	now := fake(a)
	a.Admit(tcp("10.0.0.1:1"))
	logged := 0
	for i := 0; i < 1000; i++ {
		if a.Admit(tcp(fmt.Sprintf("10.1.%d.%d:1", i/256, i%256))).Log {
			logged++
		}
	}
	if logged != logBurst {
		t.Fatalf("%d lines for 1000 refusals from 1000 addresses, want %d", logged, logBurst)
	}
	*now += logEvery
	if !a.Admit(tcp("10.0.0.9:1")).Log {
		t.Fatal("no line in the next window")
	}
}

// A flood from many addresses leaves a bounded table: idle addresses are
// forgotten, those with a connection open are kept with their counts.
func TestTableBounded(t *testing.T) {
	a := New(Options{MaxPerAddress: 1, Rate: 1, Burst: 1, MaxAddresses: 100})
	now := fake(a)
	held := a.Admit(tcp("192.168.0.1:1"))
	for i := 0; i < 100000; i++ {
		v := a.Admit(tcp(fmt.Sprintf("10.%d.%d.%d:1", i>>16, (i>>8)&255, i&255)))
		if v.Reason != "" {
			t.Fatalf("address %d refused: %q", i, v.Reason)
		}
		v.Release()
		if i%1000 == 0 {
			*now += time.Millisecond
		}
	}
	if n := a.Addresses(); n > 2*(1+100)+1024 {
		t.Fatalf("table holds %d addresses after 100,000 distinct ones, want ≤ %d", n, 2*(1+100)+1024)
	}
	if v := a.Admit(tcp("192.168.0.1:2")); v.Reason != ReasonAddress {
		t.Fatalf("the address with a connection open lost its count: %q", v.Reason)
	}
	held.Release()
	if a.Open() != 0 {
		t.Fatalf("open %d after every release", a.Open())
	}
}

func TestKeyNotIP(t *testing.T) {
	if k := Key(&net.UnixAddr{Name: "@x", Net: "unix"}); k.IsValid() {
		t.Fatalf("unix address keyed as %v", k)
	}
	if k := Key(nil); k.IsValid() {
		t.Fatalf("nil keyed as %v", k)
	}
}

// BenchmarkAdmit is one admission and its release, from many goroutines
// and addresses, with every limit on: the cost a new connection pays.
func BenchmarkAdmit(b *testing.B) {
	a := New(Options{MaxConnections: 1 << 30, MaxPerAddress: 1 << 20, Rate: 1e9})
	addrs := make([]net.Addr, 4096)
	for i := range addrs {
		addrs[i] = tcp(fmt.Sprintf("10.0.%d.%d:1", i>>8, i&255))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			a.Admit(addrs[i%len(addrs)]).Release()
			i++
		}
	})
}
