package embedded

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/queuetest"
)

// ender is a queue.BatchEnder that checks, at each BatchEnd, that every
// answer of its appends it was waiting for has come, and counts them.
type ender struct {
	mu             sync.Mutex
	answered, ends int
	answeredAtEnds []int
	ended          chan struct{} // closed at the first BatchEnd
}

func (e *ender) done(t *testing.T) func(uint64, error) {
	return func(_ uint64, err error) {
		if err != nil && !errors.Is(err, queue.ErrUnavailable) {
			t.Error(err)
		}
		e.mu.Lock()
		e.answered++
		e.mu.Unlock()
	}
}

func (e *ender) BatchEnd() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ends++
	e.answeredAtEnds = append(e.answeredAtEnds, e.answered)
	if e.ends == 1 {
		close(e.ended)
	}
}

// TestBatchEndOncePerCommit: appends of two queues, each with its own
// BatchEnder, interleaved and queued while the writer cannot commit,
// share one commit (two, if the writer took the first few with the lone
// append before it blocked); each ender is told once a commit, after
// every answer of its appends in it. An AppendIn after Close answers with the
// refusal and tells its ender too.
func TestBatchEndOncePerCommit(t *testing.T) {
	ctx := context.Background()
	b := open(t, filepath.Join(t.TempDir(), FileName))
	l1, err := b.Open(ctx, queue.Config{Name: "q1"})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := b.Open(ctx, queue.Config{Name: "q2"})
	if err != nil {
		t.Fatal(err)
	}
	e1, e2 := &ender{ended: make(chan struct{})}, &ender{ended: make(chan struct{})}
	// One append alone first: the writer takes it and blocks on the log's
	// lock, so that the rest wait for the next commit together.
	first := &ender{ended: make(chan struct{})}
	b.walMu.Lock()
	l1.(*qlog).AppendIn(queuetest.Msg("t", 0), first, first.done(t))
	const n = 50
	for i := range n {
		l1.(*qlog).AppendIn(queuetest.Msg("t", i), e1, e1.done(t))
		l2.(*qlog).AppendIn(queuetest.Msg("t", i), e2, e2.done(t))
		l1.(*qlog).AppendIn(queuetest.Msg("t", i), e1, e1.done(t))
	}
	b.walMu.Unlock()
	<-e1.ended
	<-e2.ended
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		e    *ender
		want int
	}{"q1": {e1, 2 * n}, "q2": {e2, n}} {
		c.e.mu.Lock()
		// The writer may have taken the first few appends with the
		// lone one before it blocked: two commits then, two ends.
		if c.e.answered != c.want || c.e.ends > 2 || c.e.answeredAtEnds[len(c.e.answeredAtEnds)-1] != c.want {
			t.Errorf("%s: %d answers, %d batch ends (answers at each: %v); want %d answers, the last end after all of them, at most two ends",
				name, c.e.answered, c.e.ends, c.e.answeredAtEnds, c.want)
		}
		c.e.mu.Unlock()
	}

	closed := &ender{ended: make(chan struct{})}
	l1.(*qlog).AppendIn(queuetest.Msg("t", 0), closed, closed.done(t))
	if closed.answered != 1 || closed.ends != 1 || closed.answeredAtEnds[0] != 1 {
		t.Fatalf("after Close: %d answers, %d batch ends; want the refusal, then the end", closed.answered, closed.ends)
	}
}
