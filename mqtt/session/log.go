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
	"sync/atomic"

	"github.com/tolsey/tolsey/core/groupcommit"
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
	// Epoch is the client's epoch in a shared store (Shared) when the op
	// was queued: the store refuses it once the client's session was
	// taken with a newer one. Ignored by the embedded store.
	Epoch uint64
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

// Maintainer is a Backend with upkeep to do between commits (the bbolt
// file's compaction): the Log calls Maintain on its committer goroutine
// after a commit's waiters are answered, so that no acknowledgement waits
// for it.
type Maintainer interface {
	Maintain()
}

// refuser is a Shared backend counting the ops it refused (Redis).
type refuser interface{ Refused() uint64 }

// Log queues writes and commits them in batches through a
// core/groupcommit loop, on a goroutine of its own. Enqueue never waits for
// the disk: the front-end calls it on client readers, where waiting would
// stall every connection behind a commit.
type Log struct {
	b    Backend
	log  *slog.Logger
	loop *groupcommit.Loop[item]

	queued  atomic.Uint64 // ops queued so far
	commits atomic.Uint64 // transactions committed: Apply calls that succeeded
	failed  atomic.Uint64 // transactions that failed

	// Owned by the loop goroutine: the ops of the batch being committed.
	ops []Op
}

// item is one entry of the loop: an op to write, or a waiter (After) to
// answer once the ops queued before it are written.
type item struct {
	op Op
	fn func(error)
}

// maxBatch bounds the ops of one transaction (a bbolt transaction holds
// its dirty pages in memory until it commits).
const maxBatch = 4096

// ErrClosed is given to waiters whose writes were queued after Close.
var ErrClosed = errors.New("session: store closed")

// NewLog starts the committer over b.
func NewLog(b Backend, logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	l := &Log{b: b, log: logger}
	l.loop = groupcommit.Start(maxBatch, l.commit)
	return l
}

// Enqueue queues ops, in order, for the next commits. After Close they are
// dropped.
func (l *Log) Enqueue(ops ...Op) {
	for _, op := range ops {
		if !l.loop.Add(item{op: op}) {
			return
		}
		l.queued.Add(1)
	}
}

// Mark is a point in the Log's history: After waits from it.
type Mark struct{ queued, failed uint64 }

// Mark returns the present point.
func (l *Log) Mark() Mark { return Mark{l.queued.Load(), l.failed.Load()} }

// ErrCommitFailed is given to a waiter when a commit failed since its
// mark: its ops may be among those lost.
var ErrCommitFailed = errors.New("session: store commit failed")

// After reports whether any op was queued since m (by the caller, or by
// another goroutine meanwhile), and if so calls fn once every op queued
// before the call is durable: nil, or ErrCommitFailed when a commit
// failed since m (the caller's ops may have been in it), or ErrClosed
// once Close has begun. fn runs on the committer's goroutine (the
// caller's for ErrClosed) and must not block. With nothing queued since
// m it returns false and fn is not called.
func (l *Log) After(m Mark, fn func(error)) bool {
	if l.queued.Load() == m.queued {
		return false
	}
	answer := func(err error) {
		if err == nil && l.failed.Load() != m.failed {
			err = ErrCommitFailed
		}
		fn(err)
	}
	if !l.loop.Add(item{fn: answer}) {
		fn(ErrClosed)
	}
	return true
}

// Commits is the number of transactions committed (each one fsync round
// on the embedded backend), for the benchmark's fsyncs per message.
func (l *Log) Commits() uint64 { return l.commits.Load() }

// commit writes the ops of batch in one transaction and answers its
// waiters; batches come in queue order, so a waiter's ops are in its own
// batch or an earlier one.
func (l *Log) commit(batch []item) {
	l.ops = l.ops[:0]
	for _, it := range batch {
		if it.fn == nil {
			l.ops = append(l.ops, it.op)
		}
	}
	var err error
	if len(l.ops) > 0 {
		rc, counts := l.b.(refuser)
		var before uint64
		if counts {
			before = rc.Refused()
		}
		if err = l.b.Apply(l.ops); err != nil {
			l.failed.Add(1)
			l.log.Error("session store: commit failed; the sessions of this batch are not durable",
				"ops", len(l.ops), "error", err)
		} else {
			l.commits.Add(1)
			if counts && rc.Refused() != before {
				l.log.Info("session store: writes refused: another gateway took their sessions (docs/cluster.md, \"Epochs\")",
					"ops", rc.Refused()-before)
			}
		}
	}
	wrote := len(l.ops) > 0
	clear(l.ops) // no reference to the values written
	for _, it := range batch {
		if it.fn != nil {
			it.fn(err) // After's answer also looks at failed: an earlier batch may hold the ops
		}
	}
	if m, ok := l.b.(Maintainer); ok && wrote {
		m.Maintain()
	}
}

// Close commits what is queued, stops the committer and closes the
// backend. Ops queued later are dropped.
func (l *Log) Close() error {
	l.loop.Close()
	return l.b.Close()
}
