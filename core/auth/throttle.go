package auth

import (
	"sync"
	"time"
)

// Failed logins from one host are answered after a delay that grows with
// the failures of the last ThrottleWindow (ThrottleStep each, at most
// ThrottleMax), to slow password guessing. Each front-end spends the delay
// on the failing connection's own goroutine: nobody else waits, and a
// guesser gets one answer per connection however many it opens.
const (
	ThrottleStep   = 100 * time.Millisecond
	ThrottleMax    = time.Second
	ThrottleWindow = time.Minute
	throttleHosts  = 4096 // hosts remembered; the oldest are forgotten beyond
)

// Throttle counts failed logins per source host, across connections and
// protocols (Live.Failures serves MQTT and AMQP alike, so a guesser gains
// nothing by switching). The zero value is ready; any goroutine may use it.
type Throttle struct {
	mu    sync.Mutex
	hosts map[string]*hostFailures
}

type hostFailures struct {
	n    int
	last time.Time
}

// Failed notes a failure from host and returns how long to wait before
// answering it.
func (d *Throttle) Failed(host string, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts == nil {
		d.hosts = map[string]*hostFailures{}
	}
	if len(d.hosts) >= throttleHosts {
		for h, f := range d.hosts {
			if now.Sub(f.last) > ThrottleWindow {
				delete(d.hosts, h)
			}
		}
		if len(d.hosts) >= throttleHosts {
			clear(d.hosts) // a flood of hosts: start again rather than grow
		}
	}
	f := d.hosts[host]
	if f == nil || now.Sub(f.last) > ThrottleWindow {
		f = &hostFailures{}
		d.hosts[host] = f
	}
	f.n++
	f.last = now
	return min(time.Duration(f.n)*ThrottleStep, ThrottleMax)
}
