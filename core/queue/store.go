package queue

import (
	"context"
	"encoding/binary"
	"errors"
	"time"

	"github.com/tolsey/tolsey/core"
)

// The storage seam (docs/queues.md, "Storage"): a Backend keeps queues'
// configurations and messages, and knows nothing of the engine's consumers,
// credit or protocols. The engine keeps in memory only a window of each
// queue (Options.Window messages) and reads the rest from its Log as
// consumers take messages, so a queue may hold far more than memory.

// Record is one stored message of a queue.
type Record struct {
	ID  uint64 // given by the Log at Append: increasing in call order, never reused
	Msg *core.Message
	// State is what a StateLog kept of the record's past deliveries; zero
	// for a record never given back, and from a Log that keeps none.
	State DeliveryState
}

// DeliveryState is what the engine keeps of a message's past deliveries
// beyond the message itself, so that a restart does not reset it
// (docs/queues.md, "What a restart keeps").
type DeliveryState struct {
	// Count is the failed deliveries (AMQP delivery-count, JMSXDeliveryCount
	// - 1): a message given back with delivery-failed, or left unsettled by
	// a consumer that went away.
	Count uint32
	// Skip names the consumers (ConsumerOptions.Name) that gave the
	// message back as undeliverable-here: it is not delivered to them again.
	Skip []string
}

// maxSkipNames bounds the marks kept per message: a message every
// consumer refuses is dead-lettered by maxDeliveries long before, and a
// decoded state cannot make the engine allocate without bound.
const maxSkipNames = 64

// AppendBinary appends s's encoding, which StateLogs store: the count as
// a big-endian uint32, then each name as a uvarint length and its bytes.
func (s DeliveryState) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, s.Count)
	for _, n := range s.Skip {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
	}
	return b, nil
}

// UnmarshalBinary reads AppendBinary's encoding.
func (s *DeliveryState) UnmarshalBinary(b []byte) error {
	if len(b) < 4 {
		return errors.New("queue: delivery state: short")
	}
	*s = DeliveryState{Count: binary.BigEndian.Uint32(b)}
	b = b[4:]
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) || len(s.Skip) == maxSkipNames {
			return errors.New("queue: delivery state: bad name")
		}
		s.Skip = append(s.Skip, string(b[k:k+int(n)]))
		b = b[k+int(n):]
	}
	return nil
}

// Backend stores durable queues: each queue's configuration and its Log.
// Implementations: memory (temporary queues, tests), the embedded bbolt
// store, Redis. Safe for concurrent use.
type Backend interface {
	// Declared returns the configuration of every queue stored, for the
	// engine to open at start.
	Declared(ctx context.Context) ([]Config, error)
	// Open stores cfg (creating the queue, or changing its configuration)
	// and returns its Log. Opening an open queue again returns the same Log.
	Open(ctx context.Context, cfg Config) (Log, error)
	// Drop deletes a queue: its configuration and every message.
	Drop(ctx context.Context, name string) error
	// Close releases the backend; Logs are unusable afterwards.
	Close() error
}

// SharedBackend is a Backend whose queues other gateways declare, change
// and drop too (Redis, in a cluster): the engine follows their
// declarations (Engine.Follow, Engine.FollowAll, Options.FollowEvery)
// without writing them back, so that the store stays the one truth.
type SharedBackend interface {
	Backend
	// Declaration reads one queue's stored configuration; ok is false
	// when the store holds none (never declared, or dropped).
	Declaration(ctx context.Context, name string) (cfg Config, ok bool, err error)
	// Create stores cfg as the queue's configuration, with what Open
	// makes for its messages, only if the store holds none, in one step
	// no other gateway's Open, Create or Drop can come between; created
	// is false when one was there, and stored is then that one (which
	// the caller follows, as Attach does), else cfg.
	Create(ctx context.Context, cfg Config) (stored Config, created bool, err error)
	// Attach returns the Log of a queue another gateway stored, without
	// storing its configuration again (an older copy must not overwrite
	// a newer one). The store holds the queue's messages before its
	// configuration (Open's order), so a configuration read means a Log
	// to read.
	Attach(ctx context.Context, cfg Config) (Log, error)
	// Forget drops what the backend keeps of name in memory, once the
	// engine no longer holds it (another gateway dropped it): a later
	// Open or Attach of that name starts afresh.
	Forget(name string)
}

// Log is the messages of one queue, in the order they were appended.
// Safe for concurrent use.
type Log interface {
	// Append stores m and calls done once it is durable (the durability of
	// the backend: fsync'd for the embedded store; acknowledged by Redis),
	// or failed, on any goroutine; done must not block for long. Records
	// appended in one sequence of calls get increasing IDs in call order,
	// and their done calls come in that order. Appends may share one write
	// (group commit): Append itself never waits for the disk.
	Append(m *core.Message, done func(id uint64, err error))
	// Read returns up to max records with an ID above after, oldest first
	// (fewer, or none, when there are no more). It does not remove them.
	// The engine reads every record it delivers through Read (never
	// straight from Append), so that a Log shared by several gateways
	// (Redis) can hand each record to one of them: such a Log ignores after
	// and returns the records no gateway has read yet, and, once, those
	// this gateway read before a restart and did not Remove, and those
	// another gateway read and left unremoved longer than its claim time.
	Read(ctx context.Context, after uint64, max int) ([]Record, error)
	// Browse returns up to max records with an ID above after, oldest
	// first, without taking them: a shared Log hands them to nobody
	// (browsers, the admin API). For a Log read by one engine it is Read.
	Browse(ctx context.Context, after uint64, max int) ([]Record, error)
	// Remove deletes records (acknowledged by a consumer, expired, dead
	// lettered). It may be batched and return before the deletion is
	// durable: a record whose removal is lost in a crash is delivered
	// again (at least once).
	Remove(ids ...uint64)
	// Stats counts the records stored and their bytes (core.Message.Size).
	Stats(ctx context.Context) (messages int, bytes int64, err error)
}

// SharedLog is a Log that other gateways append to as well (Redis): its
// new records do not all pass through this engine's Put, so the engine
// reads it every Options.Poll while the queue has consumers.
type SharedLog interface {
	Log
	Shared() bool
}

// OrderedLog is a Log, read by this engine alone, whose Append calls done
// for one queue's records one at a time, in ID order, each once its record
// is durable (the embedded store: one writer answers each commit in
// order). The engine may then put an appended message straight into its
// window when it has read every earlier record, instead of reading it back
// from the Log (docs/queues.md, "Storage"): with those three promises, a
// record whose ID is at most the highest read has been read, and one above
// it has not.
type OrderedLog interface {
	Log
	AppendsInOrder() bool
}

// BatchLog is a Log that answers its appends in batches (a group commit)
// and says when a batch's answers are done: AppendIn is Append, and after
// calling done it calls end.BatchEnd, on the same goroutine, once for
// all the appends of one end that it answered together (and after a done
// it calls at once, as when closed). The engine then takes a queue's lock
// and wakes its consumers once a batch instead of once a message, and
// the consumers, woken once, do not contend with the answers for the
// lock (docs/queues.md, "Group commit").
type BatchLog interface {
	Log
	AppendIn(m *core.Message, end BatchEnder, done func(id uint64, err error))
}

// BatchEnder is told by a BatchLog that a batch of answers has been
// given (BatchLog).
type BatchEnder interface {
	BatchEnd()
}

// StateLog is a Log that keeps records' DeliveryState, so that delivery
// counts and undeliverable-here marks survive a restart: Read fills
// Record.State from what SetState stored.
type StateLog interface {
	Log
	// SetState stores s as id's state, replacing the previous one. Like
	// Remove, it is queued and returns at once; a state lost in a crash
	// leaves the earlier one (a smaller count). Removing the record
	// removes its state. A state for a record removed already is dropped.
	SetState(id uint64, s DeliveryState)
}

// ErrUnavailable wraps a backend failure (disk, Redis down).
var ErrUnavailable = errors.New("queue store unavailable")

// Config is one queue's configuration, as in the config file's `queues:`
// list and the admin API's PUT /api/v1/queues/{name}.
type Config struct {
	Name string `json:"name"`
	// Subscriptions are filters in the grammar of core/queue/match; a
	// leading "!" marks an exception (docs/queues.md).
	Subscriptions []string `json:"subscriptions,omitempty"`
	Access        Access   `json:"access,omitempty"`
	// MaxMessages and MaxBytes bound what the queue holds; 0 takes the
	// engine's default (Limits).
	MaxMessages int   `json:"maxMessages,omitempty"`
	MaxBytes    int64 `json:"maxBytes,omitempty"`
	// TTL bounds how long a message waits in the queue; the publisher's
	// own expiry applies when it is sooner. 0: none.
	TTL Duration `json:"ttl,omitempty"`
	// DeadLetter names the queue that takes rejected messages and those
	// delivered MaxDeliveries times; "" drops (and counts) them.
	DeadLetter    string `json:"deadLetter,omitempty"`
	MaxDeliveries int    `json:"maxDeliveries,omitempty"` // 0: no limit
	// Temporary queues live in memory while their owner's connection does
	// (AMQP dynamic nodes, JMS temporary queues); never stored.
	Temporary bool   `json:"temporary,omitempty"`
	Owner     string `json:"owner,omitempty"` // the connection that owns a temporary queue
	// Selector is a JMS message selector (core/selector): a message the
	// subscriptions bring is stored only when it selects it, so that what
	// no consumer will ever take does not fill the queue (a JMS durable
	// subscription's selector). "": every message.
	Selector string `json:"selector,omitempty"`
	// NoLocal names a publisher (core.Message.Origin.Client) whose
	// messages the subscriptions do not bring (a JMS noLocal durable
	// subscription: its container id). "": none left out.
	NoLocal string `json:"noLocal,omitempty"`
	// Overflow is what a full queue does with a message its subscriptions
	// bring: OverflowRefuse refuses the publish, OverflowDrop drops the
	// message for this queue alone (counted in Counters.Refused).
	Overflow Overflow `json:"overflow,omitempty"`
}

// Overflow is a queue's answer to a message its subscriptions bring when
// it is full (Config.Overflow).
type Overflow string

const (
	// OverflowRefuse (the default): the publisher is told (MQTT 5 0x97,
	// AMQP rejected amqp:resource-limit-exceeded).
	OverflowRefuse Overflow = "refuse"
	// OverflowDrop: the message is not stored in this queue, and the
	// publisher is not held back by it (a JMS durable subscription whose
	// subscriber is away: docs/jms.md, "Durable subscriptions").
	OverflowDrop Overflow = "drop"
)

// Access says which consumers of a queue receive.
type Access string

const (
	// Exclusive: the consumer attached first receives everything; the
	// others wait as standby and take over, in attach order, when it leaves.
	Exclusive Access = "exclusive"
	// NonExclusive: deliveries spread over the consumers that have credit.
	NonExclusive Access = "non-exclusive"
)

// Duration is a time.Duration that reads and writes as text ("30s", "1h")
// in JSON.
type Duration time.Duration

// MarshalText writes d as time.Duration's String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a time.ParseDuration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
