package bridge

import (
	"math/rand/v2"
	"time"
)

// backoff is the wait before reconnect attempt n (from 0) of a bridge:
// exponential from 50 ms up to most, with up to 50 % jitter, so that
// gateways cut off together do not come back in step. Both links use it.
func backoff(attempt int, most time.Duration) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 16)
	if d > most || d <= 0 {
		d = most
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d, or until done is closed; false when done was. The links'
// goroutines wait this way so that Stop does not wait out a backoff.
func sleep(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
