// Command abuse measures what one unauthenticated connection can make the
// gateway hold in its Go heap, trying the ways a hostile client would.
//
//	go run ./test/bench/abuse [-vectors all] [-conns 1] [-hold 2s] [-set key=value,...]
//
// It starts one gateway in this process (so that every allocation can be
// seen: a child process's /metrics would miss short peaks), with a users
// file and auth.allowAnonymous=false, so that no probe connection ever
// logs in: everything measured is paid before authentication. Each vector
// opens -conns connections from a fresh, collected heap and reports:
//
//	peak  the highest heap (runtime/metrics /memory/classes/heap/objects:bytes,
//	      sampled every 200 µs) above the baseline while the vector ran: an
//	      upper bound, since it counts garbage not yet collected
//	held  the live heap after a forced collection while the connections
//	      are still open (or already closed by the gateway), above the baseline
//	end   what the gateway did with the connection (closed, open)
//
// With -mode stuck it measures instead a QoS 1 publisher's throughput with
// a subscriber that never reads present, against without one (stuck.go):
//
//	go run ./test/bench/abuse -mode stuck [-n 20000 -size 1024 -window 64 -rounds 3]
//
// The vectors:
//
//	mqtt-publish-256m    a PUBLISH announcing 268,435,455 bytes as the first packet, then silence
//	mqtt-connect-256m    a CONNECT announcing 268,435,455 bytes, then silence
//	mqtt-connect-max-1   a CONNECT of mqtt.maxPacketSize, all but its last byte, at once
//	mqtt-connect-trickle the same, in 64 KiB pieces over about 6 s (inside mqtt.connectTimeout)
//	mqtt-connect-props   a whole MQTT 5 CONNECT of mqtt.maxPacketSize filled with empty
//	                     user properties (5 bytes each on the wire), with a user name:
//	                     parsed, then refused (not authorised)
//	mqtt-will-props      the same with the user properties in the will's properties
//	ws-frame-2^62        MQTT over WebSocket: a binary frame announcing 2^62 bytes, then silence
//	ws-connect-max-1     MQTT over WebSocket: a CONNECT of mqtt.maxPacketSize but its last byte
//	amqp-frame-4g        AMQP SASL header, then a frame header announcing 4 GiB, then silence
//	amqp-frame-max-1     AMQP SASL header, then a frame of amqp.maxFrameSize but its last byte
//
// -set passes more gateway keys (for example mqtt.maxPacketSize=0, the
// protocol's 256 MiB). The figures are in docs/mqtt-frontend.md ("Clients
// that misbehave").
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/tolsey/tolsey/gateway"
)

type vector struct {
	name string
	// open makes one connection and does what the vector does to it; it
	// returns once the bytes are sent (the connection stays open).
	open func(g *gateway.Gateway, maxPacket int) (net.Conn, error)
}

// The vectors' bytes, made before any baseline is taken and kept alive, so
// that the probe's own buffers are not counted.
var connectMax, connectProps, willProps, wsConnectMax []byte

func prepare(maxPacket int) {
	connectMax = connectOfSize(maxPacket)
	connectProps = connectWithProps(maxPacket, false)
	willProps = connectWithProps(maxPacket, true)
	pk := connectMax[:len(connectMax)-1]
	key := []byte{1, 2, 3, 4}
	hdr := binary.BigEndian.AppendUint64([]byte{0x82, 0x80 | 127}, uint64(len(pk)))
	wsConnectMax = append(append(hdr, key...), mask(pk, key)...)
}

var vectors = []vector{
	{"mqtt-publish-256m", func(g *gateway.Gateway, _ int) (net.Conn, error) {
		return sendMQTT(g.MQTTAddr(), []byte{0x30, 0xff, 0xff, 0xff, 0x7f, 0, 1, 'a'})
	}},
	{"mqtt-connect-256m", func(g *gateway.Gateway, _ int) (net.Conn, error) {
		return sendMQTT(g.MQTTAddr(), []byte{0x10, 0xff, 0xff, 0xff, 0x7f, 0, 4, 'M', 'Q', 'T', 'T', 5})
	}},
	{"mqtt-connect-max-1", func(g *gateway.Gateway, maxPacket int) (net.Conn, error) {
		return sendMQTT(g.MQTTAddr(), connectMax[:len(connectMax)-1])
	}},
	{"mqtt-connect-trickle", func(g *gateway.Gateway, maxPacket int) (net.Conn, error) {
		c, err := net.Dial("tcp", g.MQTTAddr())
		if err != nil {
			return nil, err
		}
		pk := connectMax[:len(connectMax)-1]
		pieces := (len(pk) + 64<<10 - 1) / (64 << 10)
		pause := 6 * time.Second / time.Duration(max(pieces, 1))
		for len(pk) > 0 {
			n := min(len(pk), 64<<10)
			if _, err := c.Write(pk[:n]); err != nil {
				return c, nil // closed by the gateway: reported as such
			}
			pk = pk[n:]
			time.Sleep(pause)
		}
		return c, nil
	}},
	{"mqtt-connect-props", func(g *gateway.Gateway, maxPacket int) (net.Conn, error) {
		return sendMQTT(g.MQTTAddr(), connectProps)
	}},
	{"mqtt-will-props", func(g *gateway.Gateway, maxPacket int) (net.Conn, error) {
		return sendMQTT(g.MQTTAddr(), willProps)
	}},
	{"ws-frame-2^62", func(g *gateway.Gateway, _ int) (net.Conn, error) {
		c, err := dialWS(g.MQTTWSAddr())
		if err != nil {
			return nil, err
		}
		hdr := []byte{0x82, 0x80 | 127, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4} // masked, 2^62 bytes
		_, err = c.Write(append(hdr, mask([]byte{0x10, 0xff, 0xff, 0xff, 0x7f}, hdr[10:14])...))
		return c, err
	}},
	{"ws-connect-max-1", func(g *gateway.Gateway, maxPacket int) (net.Conn, error) {
		c, err := dialWS(g.MQTTWSAddr())
		if err != nil {
			return nil, err
		}
		_, err = c.Write(wsConnectMax)
		return c, err
	}},
	{"amqp-frame-4g", func(g *gateway.Gateway, _ int) (net.Conn, error) {
		return sendAMQP(g.AMQPAddr(), []byte{0xff, 0xff, 0xff, 0xff, 2, 1, 0, 0})
	}},
	{"amqp-frame-max-1", func(g *gateway.Gateway, _ int) (net.Conn, error) {
		const size = 65536 // amqp.maxFrameSize's default
		f := make([]byte, size-1)
		binary.BigEndian.PutUint32(f, size)
		copy(f[4:], []byte{2, 1, 0, 0})
		return sendAMQP(g.AMQPAddr(), f)
	}},
}

func main() {
	which := flag.String("vectors", "all", "comma-separated vector names, or all")
	conns := flag.Int("conns", 1, "connections per vector")
	hold := flag.Duration("hold", 2*time.Second, "how long the connections are held (sampled) after their bytes are sent")
	set := flag.String("set", "", "more gateway keys, key=value,...")
	mode := flag.String("mode", "heap", "heap: the vectors above; stuck: a QoS 1 publisher's throughput with and without a subscriber that never reads")
	n := flag.Int("n", 20000, "-mode stuck: QoS 1 messages per phase")
	size := flag.Int("size", 1024, "-mode stuck: payload bytes")
	window := flag.Int("window", 64, "-mode stuck: the publisher's unacknowledged messages at most")
	rounds := flag.Int("rounds", 3, "-mode stuck: rounds of two phases, without and with the stuck subscriber (order alternating)")
	writeTimeout := flag.Duration("write-timeout", 10*time.Minute, "-mode stuck: mqtt.writeTimeout (long: the stuck subscriber stays throughout)")
	profile := flag.String("profile", "", "write a CPU profile (cpu.pprof) and an allocation profile (allocs.pprof) of the whole run into this directory")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(filepath.Join(*profile, "cpu.pprof"))
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
			if f, err := os.Create(filepath.Join(*profile, "allocs.pprof")); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}

	if *mode == "stuck" {
		runStuck(*n, *size, *window, *rounds, *writeTimeout)
		return
	}
	dir, err := os.MkdirTemp("", "abuse-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		fail(err)
	}
	users := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("users:\n  - {name: alice, password: %q}\n", hash)), 0o600); err != nil {
		fail(err)
	}
	args := []string{"--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0",
		"--amqp.listen=127.0.0.1:0", "--retain.backend=memory", "--data.dir=" + dir, "--node.id=abuse",
		"--auth.file=" + users, "--auth.allowAnonymous=false"}
	maxPacket := 1 << 20
	for _, kv := range strings.Split(*set, ",") {
		if kv == "" {
			continue
		}
		args = append(args, "--"+kv)
		if v, ok := strings.CutPrefix(kv, "mqtt.maxPacketSize="); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil {
				fail(fmt.Errorf("-set %s: a number of bytes, please", kv))
			}
			maxPacket = n
			if n == 0 {
				maxPacket = 268435455 + 5 // the protocol's: remaining length + fixed header
			}
		}
	}
	g, stop := startGateway(args)
	defer stop()
	if maxPacket > 64<<20 {
		maxPacket = 64 << 20 // the CONNECT vectors need the bytes in this process too
	}
	prepare(maxPacket)

	fmt.Printf("%-22s %5s %9s %9s %9s %9s  %s\n", "vector", "conns", "peak MiB", "/conn", "held MiB", "/conn", "end")
	for _, v := range vectors {
		if *which != "all" && !contains(strings.Split(*which, ","), v.name) {
			continue
		}
		r := run(g, v, *conns, maxPacket, *hold)
		fmt.Printf("%-22s %5d %9.2f %9.2f %9.2f %9.2f  %s\n", v.name, *conns, mib(r.peak), mib(r.peak)/float64(*conns),
			mib(r.held), mib(r.held)/float64(*conns), r.end)
	}
	fmt.Printf("(gateway keys: %s; Go %s, GOMAXPROCS %d)\n", strings.Join(args[9:], " "), runtime.Version(), runtime.GOMAXPROCS(0))
}

type result struct {
	peak, held int64
	end        string
}

func run(g *gateway.Gateway, v vector, conns, maxPacket int, hold time.Duration) result {
	// The vectors' own bytes (a CONNECT of maxPacket) are made before the
	// baseline and kept alive, so that they are not counted.
	runtime.GC()
	debug.FreeOSMemory()
	base := live()
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if h := int64(s[0].Value.Uint64()); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	var cs []net.Conn
	var errs []error
	for range conns {
		c, err := v.open(g, maxPacket)
		if err != nil {
			errs = append(errs, err)
		}
		if c != nil {
			cs = append(cs, c)
		}
	}
	time.Sleep(hold)
	close(stop)
	wg.Wait()
	held := live() - base
	// What became of them: closed by the gateway (EOF or reset, maybe after
	// a DISCONNECT), or still open.
	closed := 0
	var first []byte // what the gateway sent the first connection
	for i, c := range cs {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		got, err := io.ReadAll(c)
		if i == 0 {
			first = got[:min(len(got), 8)]
		}
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) {
			closed++
		}
		c.Close()
	}
	end := fmt.Sprintf("%d of %d closed by the gateway; it sent % x", closed, len(cs), first)
	if len(errs) > 0 {
		end += fmt.Sprintf(" (%d failed: %v)", len(errs), errs[0])
	}
	runtime.GC()
	return result{peak: peak.Load() - base, held: held, end: end}
}

// live is the live heap after a collection.
func live() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func sendMQTT(addr string, b []byte) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(b); err != nil {
		return c, nil // closed by the gateway already: reported as such
	}
	return c, nil
}

func sendAMQP(addr string, frame []byte) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0}); err != nil {
		return c, err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return c, fmt.Errorf("SASL header: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	_, _ = c.Write(frame)
	return c, nil
}

func dialWS(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	req := "GET /mqtt HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		return c, err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return c, fmt.Errorf("upgrade: %s", resp.Status)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, nil
}

func mask(b, key []byte) []byte {
	out := make([]byte, len(b))
	for i := range b {
		out[i] = b[i] ^ key[i%4]
	}
	return out
}

// connectOfSize is an MQTT 5 CONNECT of exactly size bytes in all (at
// least 64): one user property after another, each at most 65,535 bytes of
// 'a', fill its properties; the client id is "a".
func connectOfSize(size int) []byte {
	for lenBytes := 1; lenBytes <= 4; lenBytes++ {
		body := size - 1 - lenBytes
		if uvarintLen(body) != lenBytes {
			continue
		}
		for propLenBytes := 1; propLenBytes <= 4; propLenBytes++ {
			l := body - 10 - propLenBytes - 3 // variable header, properties' length, client id
			if l < 5 || uvarintLen(l) != propLenBytes {
				continue
			}
			pk := appendLen([]byte{0x10}, body)
			pk = append(pk, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 30)
			pk = appendLen(pk, l)
			for l > 0 {
				n := min(l-5, 65535)
				if rest := l - 5 - n; rest > 0 && rest < 5 {
					n -= 5 // leave room for one more property
				}
				pk = append(pk, 0x26, 0, 0)
				pk = binary.BigEndian.AppendUint16(pk, uint16(n))
				pk = append(pk, strings.Repeat("a", n)...)
				l -= 5 + n
			}
			pk = append(pk, 0, 1, 'a')
			if len(pk) != size {
				panic(fmt.Sprintf("connectOfSize(%d) made %d bytes", size, len(pk)))
			}
			return pk
		}
	}
	panic(fmt.Sprintf("connectOfSize(%d): no length fits", size))
}

// connectWithProps is a whole MQTT 5 CONNECT of at most size bytes (at
// most 256 MiB) carrying as many empty user properties as fit, in the
// CONNECT's properties or in its will's, and a user name (no password).
func connectWithProps(size int, inWill bool) []byte {
	size = min(size, 64<<20)
	const fixed = 1 + 4
	payload := []byte{0, 1, 'p'} // client id
	var tail []byte              // after the will properties
	if inWill {
		tail = append(tail, 0, 1, 'w', 0, 1, 'x') // will topic, will payload
	}
	tail = append(tail, 0, 6, 'n', 'o', 'b', 'o', 'd', 'y') // user name
	varHeader := 10
	room := size - fixed - varHeader - 4 - len(payload) - 4 - len(tail)
	if inWill {
		room -= 1 // the CONNECT's own (empty) properties
	}
	n := room / 5
	props := make([]byte, 0, n*5)
	for range n {
		props = append(props, 0x26, 0, 0, 0, 0)
	}
	flags := byte(0x80 | 0x02) // user name, clean start
	if inWill {
		flags |= 0x04
	}
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, flags, 0, 30}
	if inWill {
		body = append(body, 0) // CONNECT properties
		body = append(body, payload...)
		body = appendLen(body, len(props))
		body = append(body, props...)
	} else {
		body = appendLen(body, len(props))
		body = append(body, props...)
		body = append(body, payload...)
	}
	body = append(body, tail...)
	return append(appendLen([]byte{0x10}, len(body)), body...)
}

func appendLen(b []byte, n int) []byte { return binary.AppendUvarint(b, uint64(n)) }

func uvarintLen(n int) int { return len(binary.AppendUvarint(nil, uint64(n))) }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "abuse:", err)
	os.Exit(1)
}
