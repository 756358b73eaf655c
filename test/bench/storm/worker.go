package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolsey/tolsey/test/internal/mqttlean"
)

// workerResult is what a worker process reports after the reconnect; the
// coordinator adds them up. Times are Unix nanoseconds (one machine, one
// clock).
type workerResult struct {
	Clients        int   `json:"clients"`
	Reconnected    int   `json:"reconnected"`
	SessionPresent int   `json:"sessionPresent"`
	Retries        int   `json:"retries"` // connect attempts that failed and were tried again
	LastConnack    int64 `json:"lastConnack"`
	Received       int   `json:"received"` // distinct queued messages
	Duplicates     int   `json:"duplicates"`
	LastMessage    int64 `json:"lastMessage"`
	Missing        []int `json:"missing,omitempty"` // clients short of messages (the first few)
}

// worker runs clients [from, to): it connects them with persistent
// sessions, each subscribed at QoS 1 to storm/<i>, says "connected", says
// "dropped" once the gateway has closed every connection, then waits for
// "reconnect <start> <window>" on stdin, reconnects each client at its own
// moment in the window, and prints "result <json>" once every client has
// its msgs messages or deliverWait has passed.
func worker(addr string, from, to, msgs, sources int, deliverWait time.Duration) error {
	n := to - from
	say := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	src := func(i int) net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%sources))} }

	// Phase 1: connect and subscribe, 32 at a time.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failed  []string
		dropped atomic.Int64
	)
	alive := make(chan struct{}, n)
	sem := make(chan struct{}, 32)
	for i := from; i < to; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: clientID(i), KeepAlive: 600, LocalAddr: src(i)})
			if err == nil {
				err = c.Subscribe(1, 1, nil, topic(i))
				if err != nil {
					c.Close()
				}
			}
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", clientID(i), err))
				mu.Unlock()
				return
			}
			go func() { // until the gateway goes away
				for {
					if _, err := c.ReadPacket(); err != nil {
						c.Close()
						if dropped.Add(1) == int64(n) {
							close(alive)
						}
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d clients failed to connect, first: %s", len(failed), n, failed[0])
	}
	say("connected %d", n)
	<-alive
	say("dropped %d", n)

	// Phase 2: reconnect when told.
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for reconnect: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "reconnect" {
		return fmt.Errorf("bad command %q", line)
	}
	start, _ := strconv.ParseInt(f[1], 10, 64)
	window, _ := strconv.ParseInt(f[2], 10, 64)

	type slot struct {
		i  int
		at time.Time
	}
	slots := make([]slot, 0, n)
	for i := from; i < to; i++ {
		slots = append(slots, slot{i, time.Unix(0, start+int64(spread(i)*float64(window)))})
	}
	slices.SortFunc(slots, func(a, b slot) int { return a.at.Compare(b.at) })

	var (
		res     = workerResult{Clients: n}
		got     = make([]uint64, n) // bit k: message k of client i arrived
		conns   []*mqttlean.Conn
		allDone = make(chan struct{})
		short   = n // clients still short of messages
	)
	deadline := time.Unix(0, start+window).Add(deliverWait)
	for _, s := range slots {
		time.Sleep(time.Until(s.at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *mqttlean.Conn
			for {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				var err error
				c, err = mqttlean.Dial(ctx, addr, mqttlean.Options{ClientID: clientID(s.i), KeepAlive: 600, LocalAddr: src(s.i)})
				cancel()
				if err == nil {
					break
				}
				mu.Lock()
				res.Retries++
				mu.Unlock()
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(100 * time.Millisecond) // a device's reconnect backoff
			}
			mu.Lock()
			res.Reconnected++
			if c.SessionPresent {
				res.SessionPresent++
			}
			res.LastConnack = max(res.LastConnack, time.Now().UnixNano())
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetReadDeadline(deadline)
			for {
				p, err := c.ReadPacket()
				if err != nil {
					return
				}
				if p.Type != mqttlean.PUBLISH {
					continue
				}
				if p.QoS() > 0 {
					_ = c.Puback(p.ID)
				}
				var who, k int
				if _, err := fmt.Sscanf(string(p.Payload), "%d:%d", &who, &k); err != nil || who != s.i || k < 0 || k >= msgs {
					continue
				}
				mu.Lock()
				bit := uint64(1) << k
				if got[s.i-from]&bit != 0 {
					res.Duplicates++
				} else {
					got[s.i-from] |= bit
					res.Received++
					res.LastMessage = max(res.LastMessage, time.Now().UnixNano())
					if got[s.i-from] == 1<<msgs-1 {
						if short--; short == 0 {
							close(allDone)
						}
					}
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-allDone:
	case <-time.After(time.Until(deadline)):
	}
	mu.Lock()
	for i, g := range got {
		if g != 1<<msgs-1 && len(res.Missing) < 10 {
			res.Missing = append(res.Missing, from+i)
		}
	}
	b, _ := json.Marshal(res)
	for _, c := range conns {
		_ = c.Disconnect()
	}
	mu.Unlock()
	say("result %s", b)
	wg.Wait()
	return nil
}

func clientID(i int) string { return "storm-" + strconv.Itoa(i) }
func topic(i int) string    { return "storm/" + strconv.Itoa(i) }

// spread places client i in [0, 1) of the reconnect window, the same for
// every run, evenly over many clients and interleaved between workers (a
// splitmix64 step: neighbours land far apart).
func spread(i int) float64 {
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}
