// Package session keeps the MQTT front-end's persistent sessions on disk
// (docs/mqtt-frontend.md, "Persistent sessions"): a client's record, its
// subscriptions and its in-flight messages, as opaque values the front-end
// encodes. Writes go through a Log, which commits whatever has queued up
// in one transaction (one fsync for many messages, a group commit) and
// tells each waiter once its writes are durable. The backend knows no
// MQTT: it stores keyed bytes in three tables. It must not import mochi or
// the rest of the front-end.
package session

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Kind is what an Op does.
type Kind uint8

const (
	PutClient      Kind = iota + 1 // Client, Value: the client's record
	DeleteSession                  // Client: the record, every subscription and in-flight message
	PutSub                         // Client, Key (the filter), Value
	DeleteSub                      // Client, Key
	PutInflight                    // Client, Key (the packet id, 2 bytes), Value
	DeleteInflight                 // Client, Key
)

// Op is one write to the session store. Ops are applied in the order they
// were queued.
type Op struct {
	Kind   Kind
	Client string
	Key    []byte
	Value  []byte
}

// Backend is where sessions are kept: the embedded bbolt file (Open) or,
// in time, Redis. Apply and Load are called by one goroutine at a time.
type Backend interface {
	// Apply makes ops durable, all or none: when it returns nil they
	// survive a kill -9 (and, for a file, a power cut after the fsync).
	Apply(ops []Op) error
	// Load calls fn for every stored entry: clients first, then
	// subscriptions, then in-flight messages (key nil for a client).
	Load(fn func(kind Kind, client string, key, value []byte) error) error
	Close() error
}

// Log queues writes and commits them in batches on a goroutine of its
// own. Enqueue never waits for the disk: the front-end calls it on client
// readers, where waiting would stall every connection behind a commit.
type Log struct {
	b   Backend
	log *slog.Logger

	mu      sync.Mutex
	ops     []Op     // guarded by mu: queued, not yet taken by the committer
	seq     uint64   // guarded by mu: the number of ops ever queued
	waiters []waiter // guarded by mu
	closing bool     // guarded by mu

	committed atomic.Uint64 // ops durable (a prefix of seq)
	commits   atomic.Uint64 // transactions committed: Apply calls that succeeded
	failed    atomic.Uint64 // transactions that failed

	kick chan struct{} // cap 1: something was queued
	done chan struct{} // closed when the committer has drained and stopped
}

type waiter struct {
	seq uint64
	fn  func(error)
}

// ErrClosed is given to waiters whose writes were queued after Close.
var ErrClosed = errors.New("session: store closed")

// NewLog starts the committer over b.
func NewLog(b Backend, logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	l := &Log{b: b, log: logger, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go l.run()
	return l
}

// Enqueue queues ops and returns the sequence number of the last, which
// After waits on. After Close, or with no ops, nothing is queued and 0 is
// returned.
func (l *Log) Enqueue(ops ...Op) uint64 {
	if len(ops) == 0 {
		return 0
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return 0
	}
	l.ops = append(l.ops, ops...)
	l.seq += uint64(len(ops))
	seq := l.seq
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return seq
}

// Queued is the sequence number of the last op queued: waiting on it
// covers every op queued before the call.
func (l *Log) Queued() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// After calls fn once every op up to seq is durable (nil) or its commit
// failed; at once, on the caller's goroutine, when it already is, else on
// the committer's. fn must not block.
func (l *Log) After(seq uint64, fn func(error)) {
	if seq <= l.committed.Load() {
		fn(nil)
		return
	}
	l.mu.Lock()
	if seq <= l.committed.Load() {
		l.mu.Unlock()
		fn(nil)
		return
	}
	l.waiters = append(l.waiters, waiter{seq, fn})
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Commits is the number of transactions committed (each one fsync round
// on the embedded backend), for the benchmark's fsyncs per message.
func (l *Log) Commits() uint64 { return l.commits.Load() }

// run is the committer: it takes everything queued, applies it in one
// transaction, and answers the waiters it covers. While it commits, new
// ops queue up for the next round: the batch grows with the load, with
// no timer.
func (l *Log) run() {
	defer close(l.done)
	for range l.kick {
		for {
			l.mu.Lock()
			ops, seq, closing := l.ops, l.seq, l.closing
			l.ops = nil
			l.mu.Unlock()
			var err error
			if len(ops) > 0 {
				if err = l.b.Apply(ops); err != nil {
					l.failed.Add(1)
					l.log.Error("session store: commit failed; the sessions of this batch are not durable",
						"ops", len(ops), "error", err)
				} else {
					l.commits.Add(1)
				}
			}
			l.committed.Store(seq)
			l.answer(seq, err)
			if len(ops) == 0 {
				if closing {
					return
				}
				break
			}
		}
	}
}

// answer calls the waiters whose ops are in the batch that ended at seq.
func (l *Log) answer(seq uint64, err error) {
	l.mu.Lock()
	var due []waiter
	keep := l.waiters[:0]
	for _, w := range l.waiters {
		if w.seq <= seq {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	clear(l.waiters[len(keep):])
	l.waiters = keep
	l.mu.Unlock()
	for _, w := range due {
		w.fn(err)
	}
}

// Close commits what is queued, stops the committer and closes the
// backend. Ops queued later are dropped.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closing = true
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	<-l.done
	l.mu.Lock()
	rest := l.waiters
	l.waiters = nil
	l.mu.Unlock()
	for _, w := range rest {
		w.fn(ErrClosed)
	}
	return l.b.Close()
}
