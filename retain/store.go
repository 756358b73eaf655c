// Package retain owns the retained-message store: one Store interface, the
// backends (embedded file store, memory, Redis) and the conformance suite
// they all pass; and the rules every front-end applies to it, written once
// (replay.go): which stored copies a late subscriber gets, the write
// time-out, what a refused retained write means to its publisher. It knows
// the core Message and the topic grammar; it must not know about
// front-ends or wire protocols.
//
// Semantics shared by every backend (docs/architecture.md, decision 1): a
// new retained message on a topic replaces the old one; an empty payload
// deletes; a message past its expiry is never returned; lookups by wildcard
// filter cost O(matches), through an in-process core.TopicIndex of retained
// topics.
package retain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tolsey/tolsey/core"
)

// Errors a Store returns. Refused (replay.go) says what each means to a
// publisher, and front-ends put that on their wire.
var (
	// ErrQuotaExceeded: the message is over Limits.MaxPayload or the store
	// already holds Limits.MaxMessages topics and this one would be new.
	ErrQuotaExceeded = errors.New("retained store quota exceeded")
	// ErrUnavailable: the backend cannot be reached (a Redis outage); the
	// write was not stored. Wrapped with the cause.
	ErrUnavailable = errors.New("retained store unavailable")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("retained store closed")
)

// Store holds at most one retained message per topic.
type Store interface {
	// Set makes m the retained message of m.Topic, replacing any other.
	// An empty payload deletes the topic's retained message. When Set
	// returns nil the message is durable as far as the backend promises
	// (embedded: fsynced; redis: acknowledged by Redis).
	Set(ctx context.Context, m *core.Message) error
	// Getter's Get reads one topic's retained message.
	Getter
	// Matcher's Match serves late subscribers.
	Matcher
	// Delete removes every retained message whose topic matches filter (an
	// exact topic or a wildcard filter) and returns how many it removed.
	Delete(ctx context.Context, filter string) (int, error)
	// Stats reports how many retained messages are held and their bytes.
	Stats() Stats
	// Close flushes and releases the store.
	Close() error
}

// Getter is the part of a Store that reads one topic's retained message:
// the NATS bridge's retained requests read through it, and, like the
// front-ends with Matcher, never write the store.
type Getter interface {
	// Get returns the retained message of topic, or nil if there is none
	// (or it has expired).
	Get(ctx context.Context, topic string) (*core.Message, error)
}

// TopicLister is implemented by stores that list the topics of their
// unexpired retained messages matching a filter from their index, reading
// no message (every store here): the admin API pages through a large
// store by topic with it (docs/admin-api.md). fn returns false to stop.
type TopicLister interface {
	MatchTopics(ctx context.Context, filter string, fn func(topic string) bool) error
}

// Stats is a Store's size.
type Stats struct {
	Count int   // retained messages held
	Bytes int64 // their Message.Size() summed
}

// Health is implemented by stores that can be unavailable (Redis). Ready
// returns nil when the store is serving, otherwise the reason.
type Health interface {
	Ready() error
}

// Limits bound what a store accepts. Zero means unlimited.
type Limits struct {
	MaxPayload  int // bytes of payload in one retained message
	MaxMessages int // retained topics held
}

// WriteTimeout bounds one retained write. The router stores a retained
// publish on its publisher's goroutine before it delivers it (so that an
// acknowledged retained publish is durable): a hung backend then delays
// that publisher, whose answer says StoreFailed, and never wedges it.
const WriteTimeout = 5 * time.Second

// Retainer adapts a Store to core.Retainer, so that core.Router can store
// retained publishes without importing this package. Every retained write
// of every front-end goes through it.
type Retainer struct{ Store Store }

// Retain implements core.Retainer: Set, within WriteTimeout.
func (r Retainer) Retain(ctx context.Context, m *core.Message) error {
	ctx, cancel := context.WithTimeout(ctx, WriteTimeout)
	defer cancel()
	return r.Store.Set(ctx, m)
}

var _ core.Retainer = Retainer{}

// ValidFilter checks a filter given to Store.Match or Store.Delete: MQTT
// filter grammar, and not a shared subscription, which gets no retained
// messages.
func ValidFilter(filter string) error {
	if err := core.ValidateFilter(filter); err != nil {
		return fmt.Errorf("retain: filter %q: %w", filter, err)
	}
	if core.IsShared(filter) {
		return fmt.Errorf("retain: filter %q: shared subscriptions get no retained messages", filter)
	}
	return nil
}
