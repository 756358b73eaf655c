package bridge

import (
	"sync"
	"testing"
)

// The writer's queue holds at most max messages, counting the burst the
// writer has in hand, and tells the writer when it turns non-empty.
func TestWriteQueue(t *testing.T) {
	q := newWriteQueue[queued](3)
	m := queued{}
	for i := 0; i < 3; i++ {
		if !q.put(m) {
			t.Fatalf("put %d refused below the bound", i)
		}
	}
	if q.put(m) {
		t.Fatal("put beyond the bound accepted")
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no token after the first put")
	}
	burst := q.take(nil)
	if len(burst) != 3 {
		t.Fatalf("took %d, want 3", len(burst))
	}
	if q.put(m) {
		t.Fatal("put accepted while the writer holds a full burst")
	}
	clear(burst)
	burst = q.take(burst) // the writer done with its burst: empty, nothing held
	if len(burst) != 0 || !q.put(m) {
		t.Fatal("put refused once the writer's burst was written")
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no token when the queue turned non-empty again")
	}
}

// Every message put reaches the writer, whichever goroutines put them.
func TestWriteQueueNoLostWakeup(t *testing.T) {
	const puts, per = 4, 20000
	q := newWriteQueue[queued](1 << 30)
	var wg sync.WaitGroup
	for i := 0; i < puts; i++ {
		wg.Go(func() {
			for k := 0; k < per; k++ {
				q.put(queued{})
			}
		})
	}
	got := 0
	var burst []queued
	for got < puts*per {
		<-q.ready
		for {
			burst = q.take(burst)
			if len(burst) == 0 {
				break
			}
			got += len(burst)
			clear(burst)
		}
	}
	wg.Wait()
	if got != puts*per {
		t.Fatalf("got %d, want %d", got, puts*per)
	}
}
