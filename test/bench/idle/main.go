// Command idle measures the memory an idle MQTT connection costs the
// gateway and bare mochi-mqtt.
//
//	go run ./test/bench/idle [-k 5000] [-wait 250s]
//
// For each target (the gateway with retain.backend=memory over TCP and over
// WebSocket, bare mochi with its defaults, bare mochi with
// MaximumClientWritesPending 128) it starts the server as a child process,
// reads its settled RSS, opens K MQTT 5 connections (a raw CONNECT with
// clean start and no keepalive, answered by a successful CONNACK; with
// -active, the default, each then subscribes to a topic of its own,
// publishes one QoS 1 message to it and receives it, as a device with a
// command topic would; then nothing), waits -wait, reads the settled RSS
// again and checks every connection is still open. RLIMIT_NOFILE is raised
// to its hard limit first; the children inherit it.
//
// A goroutine stack shrinks by half at each garbage collection while it is
// less than a quarter used, and an idle server collects every 2 minutes, so
// -wait 250s measures connections that have been idle through two forced
// collections; -wait 0 measures them just after their last packet.
//
// Goal (docs/benchmarks.md, "Goals"): ≤ 20 KiB RSS per idle connection on the gateway.
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
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

type result struct {
	name          string
	before, after int64
	alive         int
	// gateway only, from /metrics (before, after): Go heap and goroutine stacks
	goroutines     float64
	heap0, heap1   float64
	stack0, stack1 float64
}

func main() {
	k := flag.Int("k", 5000, "idle connections per target")
	targets := flag.String("targets", "gateway,gatewayws,mochi,mochi128", "targets: gateway, gatewayws (the gateway's MQTT over WebSocket), mochi (defaults), mochi128 (MaximumClientWritesPending=128)")
	settle := flag.Duration("settle", 30*time.Second, "longest wait for RSS to settle")
	active := flag.Bool("active", true, "each connection subscribes to its own topic and publishes one QoS 1 message to it, which it receives, before going idle (as a device with a command topic); false: CONNECT only")
	profiles := flag.String("profiles", "", "save the gateway's heap and goroutine profiles (from /debug/pprof) into this directory once connected")
	wait := flag.Duration("wait", 0, "extra wait after connecting, before measuring (>2m lets the runtime's periodic forced GC shrink goroutine stacks)")
	flag.Parse()

	r, err := rig.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	lim, err := rig.RaiseNoFile()
	if err != nil {
		r.Fatal(err)
	}
	if uint64(*k)+100 > lim {
		r.Fatal(fmt.Errorf("-k %d needs more file descriptors than RLIMIT_NOFILE allows (%d)", *k, lim))
	}
	gwBin, err := r.Build("gateway", "./cmd/gateway")
	if err != nil {
		r.Fatal(err)
	}
	mochiBin, err := r.Build("baremochi", "./test/bench/baremochi")
	if err != nil {
		r.Fatal(err)
	}
	fmt.Printf("idle: %d idle MQTT 5 connections per target (RLIMIT_NOFILE %d)\n", *k, lim)

	var results []result
	for _, t := range strings.Split(*targets, ",") {
		var srv *rig.Child
		res := result{name: t, goroutines: -1}
		switch t {
		case "gateway":
			res.name = "gateway"
			srv, err = r.StartGateway("gateway", gwBin, "--retain.backend=memory")
		case "gatewayws":
			res.name = "gateway, WebSocket"
			srv, err = r.StartGateway("gatewayws", gwBin, "--retain.backend=memory", "--mqtt.ws.listen=127.0.0.1:0")
		case "mochi":
			res.name = "bare mochi"
			srv, err = r.StartMochi("mochi", mochiBin)
		case "mochi128":
			res.name = "bare mochi (pending=128)"
			srv, err = r.StartMochi("mochi128", mochiBin, "--max-pending=128")
		default:
			err = fmt.Errorf("unknown target %q", t)
		}
		if err != nil {
			r.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "== %s\n", res.name)
		if res.before, err = srv.SettledRSS(*settle); err != nil {
			r.Fatal(err)
		}
		if m, err := srv.Metrics(); err == nil {
			res.heap0, res.stack0 = m["go_memstats_heap_inuse_bytes"], m["go_memstats_stack_inuse_bytes"]
		}
		dial := func(id string) (net.Conn, error) { return dialMQTT(srv.Addr, id) }
		if t == "gatewayws" {
			dial = func(id string) (net.Conn, error) { return dialWS(srv.WS, id) }
		}
		conns, err := openIdle(dial, *k, *active)
		if err != nil {
			r.Fatal(fmt.Errorf("%s: %w", res.name, err))
		}
		time.Sleep(*wait)
		if *profiles != "" && srv.Admin != "" {
			if err := saveProfiles(srv.Admin, *profiles); err != nil {
				r.Fatal(err)
			}
		}
		if res.after, err = srv.SettledRSS(*settle); err != nil {
			r.Fatal(err)
		}
		if m, err := srv.Metrics(); err == nil {
			res.goroutines = m["go_goroutines"]
			res.heap1, res.stack1 = m["go_memstats_heap_inuse_bytes"], m["go_memstats_stack_inuse_bytes"]
		}
		res.alive = countAlive(conns)
		for _, c := range conns {
			c.Close()
		}
		srv.Kill()
		results = append(results, res)
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tconnections\tstill open\tRSS before\tRSS after\tRSS per connection\theap/conn\tstacks/conn\tgoroutines\tgoal ≤ 20 KiB\t")
	for _, res := range results {
		per := float64(res.after-res.before) / float64(*k)
		verdict := "-"
		if strings.HasPrefix(res.name, "gateway") {
			verdict = "PASS"
			if per > 20*1024 {
				verdict = "FAIL"
			}
		}
		g, heap, stack := "n/a", "n/a", "n/a"
		if res.goroutines >= 0 {
			g = fmt.Sprintf("%.0f", res.goroutines)
			heap = fmt.Sprintf("%.1f KiB", (res.heap1-res.heap0)/float64(*k)/1024)
			stack = fmt.Sprintf("%.1f KiB", (res.stack1-res.stack0)/float64(*k)/1024)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.1f KiB\t%s\t%s\t%s\t%s\t\n", res.name, *k, res.alive,
			rig.MiB(res.before), rig.MiB(res.after), per/1024, heap, stack, g, verdict)
	}
	tw.Flush()
}

// connectPacket is an MQTT 5 CONNECT: clean start, keepalive 0 (none), no
// properties, client id id.
func connectPacket(id string) []byte {
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0}
	rem := len(vh) + 2 + len(id)
	pk := []byte{0x10}
	for { // variable byte integer
		b := byte(rem % 128)
		rem /= 128
		if rem > 0 {
			b |= 0x80
		}
		pk = append(pk, b)
		if rem == 0 {
			break
		}
	}
	pk = append(pk, vh...)
	pk = append(pk, byte(len(id)>>8), byte(len(id)))
	return append(pk, id...)
}

// openIdle opens k connections, 64 at a time, each with a CONNACK 0x00;
// with active, each then runs exercise.
func openIdle(dial func(id string) (net.Conn, error), k int, active bool) ([]net.Conn, error) {
	conns := make([]net.Conn, k)
	errs := make(chan error, k)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c, err := dial(fmt.Sprintf("idle-%d", i))
				if err == nil && active {
					if err = exercise(c, fmt.Sprintf("idle/%d", i)); err != nil {
						c.Close()
					}
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					continue
				}
				conns[i] = c
			}
		}()
	}
	for i := 0; i < k; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return conns, nil
}

// exercise subscribes c to topic at QoS 1, publishes one QoS 1 message to
// it and waits for the SUBACK, the PUBACK and the message, which it
// acknowledges: the reader and writer paths of the server have then both run.
func exercise(c net.Conn, topic string) error {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	// SUBSCRIBE id 1, no properties, options QoS 1.
	sub := append(append([]byte{0, 1, 0}, str(topic)...), 1)
	// PUBLISH QoS 1, id 2, no properties, 16-byte payload.
	pub := append(append(str(topic), 0, 2, 0), "idle-payload-16B"...)
	var out []byte
	out = append(append(out, 0x82, byte(len(sub))), sub...)
	out = append(append(out, 0x32, byte(len(pub))), pub...)
	if _, err := c.Write(out); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	var gotSuback, gotPuback, gotPublish bool
	for !gotSuback || !gotPuback || !gotPublish {
		h, err := br.ReadByte()
		if err != nil {
			return err
		}
		n, err := binary.ReadUvarint(br) // MQTT's variable byte integer reads as a uvarint
		if err != nil {
			return err
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		switch h >> 4 {
		case 9:
			gotSuback = true
		case 4:
			gotPuback = true
		case 3:
			gotPublish = true
			if h&0x06 != 0x02 {
				return fmt.Errorf("message delivered at QoS %d, want 1", (h>>1)&3)
			}
			id := body[2+int(body[0])<<8+int(body[1]):][:2]
			if _, err := c.Write([]byte{0x40, 2, id[0], id[1]}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected packet type %d", h>>4)
		}
	}
	if br.Buffered() > 0 {
		return errors.New("unexpected bytes after the message")
	}
	return nil
}

func dialMQTT(addr, id string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return connectMQTT(c, id)
}

// dialWS connects over WebSocket (subprotocol "mqtt") and sends CONNECT.
func dialWS(addr, id string) (net.Conn, error) {
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial("ws://"+addr+"/mqtt", nil)
	if err != nil {
		return nil, err
	}
	return connectMQTT(&wsConn{Conn: ws}, id)
}

// wsConn is a WebSocket connection as a byte stream: each Write is one
// binary message, Read reads messages' bytes in turn.
type wsConn struct {
	*websocket.Conn
	r io.Reader
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			_, r, err := c.NextReader()
			if err != nil {
				return 0, err
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if err == io.EOF {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// connectMQTT sends CONNECT on c and waits for a successful CONNACK.
func connectMQTT(c net.Conn, id string) (net.Conn, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(connectPacket(id)); err != nil {
		c.Close()
		return nil, err
	}
	// CONNACK: 0x20, remaining length, acknowledge flags, reason code, properties.
	br := bufio.NewReader(c)
	h, err := br.ReadByte()
	if err == nil && h != 0x20 {
		err = fmt.Errorf("expected CONNACK, got packet type %#x", h>>4)
	}
	var n int
	for shift := 0; err == nil; shift += 7 {
		var b byte
		if b, err = br.ReadByte(); err == nil {
			n |= int(b&0x7f) << shift
			if b&0x80 == 0 {
				break
			}
		}
	}
	body := make([]byte, n)
	if err == nil {
		_, err = io.ReadFull(br, body)
	}
	if err == nil && (n < 2 || body[1] != 0) {
		err = fmt.Errorf("CONNACK reason %#x", body[1])
	}
	if err == nil && br.Buffered() > 0 {
		err = errors.New("unexpected bytes after CONNACK")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// countAlive counts connections the server has not closed: a read that
// times out means open and quiet.
func countAlive(conns []net.Conn) int {
	alive := 0
	buf := make([]byte, 1)
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			alive++
		}
	}
	return alive
}

// saveProfiles writes the heap profile (after a GC) and the goroutine dump
// of the gateway whose admin API listens on admin into dir.
func saveProfiles(admin, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, path := range map[string]string{
		"heap.pprof":     "/debug/pprof/heap?gc=1",
		"goroutines.txt": "/debug/pprof/goroutine?debug=1",
	} {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		resp.Body.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
