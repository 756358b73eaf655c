// Package queue is the gateway's queue engine (docs/queues.md): named
// queues that collect the messages of their topic subscriptions until a
// consumer takes them, with credit-driven delivery, acknowledgement,
// redelivery and dead-lettering. It knows no protocol and no storage
// technology: the front-ends consume queues through Consumer, and storage
// backends implement Backend and Log.
package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue/match"
)

// Errors the engine returns; wrapped with the queue's name and the limit.
var (
	// ErrFull: a queue's maxMessages or maxBytes would be exceeded. The
	// publisher is told (MQTT 5 0x97, AMQP rejected
	// amqp:resource-limit-exceeded).
	ErrFull = errors.New("queue full")
	// ErrNotFound: no queue of that name.
	ErrNotFound = errors.New("queue not found")
	// ErrTooMany: the engine's MaxQueues, or an owner's MaxTemporary.
	ErrTooMany = errors.New("too many queues")
	// ErrInvalid: a bad name or configuration.
	ErrInvalid = errors.New("invalid queue configuration")
)

// Limits bound the engine and give the defaults of a queue's limits.
type Limits struct {
	MaxQueues    int   // queues in all, durable and temporary; default 10,000
	MaxTemporary int   // temporary queues per owner (connection); default 100
	MaxMessages  int   // a queue's default maxMessages; default 100,000
	MaxBytes     int64 // a queue's default maxBytes; default 64 MiB
}

func (l Limits) withDefaults() Limits {
	if l.MaxQueues <= 0 {
		l.MaxQueues = 10_000
	}
	if l.MaxTemporary <= 0 {
		l.MaxTemporary = 100
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = 100_000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 64 << 20
	}
	return l
}

// Options configure an Engine.
type Options struct {
	// Router, when set, feeds the queues: the engine subscribes to every
	// topic while some queue has a subscription.
	Router *core.Router
	// Backend stores durable queues; a memory backend when nil.
	Backend Backend
	Limits  Limits
	// Window is how many messages of one queue are kept in memory for
	// delivery; the rest wait in the Log. Default 1,000.
	Window int
	// Poll is how often a queue whose Log is shared with other gateways
	// (SharedLog) is read for their records while it has consumers.
	// Default 200 ms.
	Poll time.Duration
	// LocalOnly feeds the queues only messages that entered this gateway
	// (core.SubOptions.LocalOnly): in a cluster whose gateways share the
	// Backend (Redis), the gateway a message entered puts it into the
	// shared queue, and every other gateway that receives it from the
	// cluster would put it in again (docs/cluster.md, "Queues").
	LocalOnly bool
	// Changed, when set, is called with a durable queue's name after this
	// engine stored its declaration (Declare) or dropped it (Delete), on
	// the caller's goroutine, so that the other gateways sharing the
	// Backend can follow (Follow). Not called for what Follow applies.
	Changed func(name string)
	// FollowEvery is how often every declaration of a SharedBackend is
	// read again (FollowAll), so that a change whose Changed news was
	// lost still reaches this engine. Default 30 s; negative: never.
	FollowEvery time.Duration
	Now         func() time.Time
	Logger      *slog.Logger
}

// Engine holds the queues. Safe for concurrent use.
type Engine struct {
	opts Options
	temp *Memory // temporary queues
	idx  *match.Index[*Queue]
	wg   sync.WaitGroup // loaders

	stop chan struct{} // closed by Close: the poller ends

	// declMu orders the changes of declarations, this engine's own
	// (Declare, Delete) and those it follows (Follow, FollowAll), each
	// with its store round trips: what Follow reads and applies is not
	// passed by a change of this engine in between.
	declMu sync.Mutex
	kick   chan struct{} // FollowSoon: FollowAll now

	feed altFeed                  // the alternates' router subscriber
	alts atomic.Pointer[altTable] // read lock-free by the feed

	mu      sync.Mutex
	queues  map[string]*Queue
	sub     *core.Subscription   // on the router while idx has filters
	altSubs []*core.Subscription // the alternates' prefixes on the router
	closed  bool
}

// New opens the engine and every queue the backend holds.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if opts.Backend == nil {
		opts.Backend = NewMemory()
	}
	if opts.Window <= 0 {
		opts.Window = 1000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.FollowEvery == 0 {
		opts.FollowEvery = 30 * time.Second
	}
	e := &Engine{opts: opts, temp: NewMemory(), idx: &match.Index[*Queue]{}, queues: map[string]*Queue{},
		stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	e.feed.e = e
	cfgs, err := opts.Backend.Declared(ctx)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	_, shared := opts.Backend.(SharedBackend)
	for _, cfg := range cfgs {
		err := e.check(&cfg)
		if err == nil {
			// A shared store's queue is attached to, not written again:
			// another gateway may have changed it since it was read.
			_, err = e.declare(ctx, cfg, !shared)
		}
		if err != nil {
			return nil, fmt.Errorf("queues: stored queue %q: %w", cfg.Name, err)
		}
	}
	e.wg.Add(1)
	go e.poll()
	if _, ok := opts.Backend.(SharedBackend); ok && opts.FollowEvery > 0 {
		e.wg.Add(1)
		go e.follow()
	}
	return e, nil
}

// poll reads the shared Logs of queues with consumers, for the records
// other gateways appended, and retries a Read that failed. Every
// resyncEvery ticks it also takes a shared queue's counts from its Log,
// which other gateways' appends and acknowledgements change.
func (e *Engine) poll() {
	defer e.wg.Done()
	t := time.NewTicker(e.opts.Poll)
	defer t.Stop()
	const resyncEvery = 25
	for tick := 1; ; tick++ {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.mu.Lock()
		due := make([]*Queue, 0, 8)
		for _, q := range e.queues {
			q.mu.Lock()
			if q.retry || q.shared() {
				due = append(due, q)
			}
			q.mu.Unlock()
		}
		e.mu.Unlock()
		for _, q := range due {
			shared := q.shared()
			if shared && tick%resyncEvery == 0 {
				q.resync()
			}
			q.mu.Lock()
			wanted := (q.retry || shared) && len(q.cons) > 0 && !q.deleted
			q.retry = false
			if wanted {
				q.more = true
			}
			q.mu.Unlock()
			if wanted {
				q.fill()
			}
		}
	}
}

// Close stops the engine: it leaves the router, and waits for its loaders.
// The backend is the caller's to close.
func (e *Engine) Close() {
	e.mu.Lock()
	if !e.closed {
		close(e.stop)
	}
	e.closed = true
	if e.sub != nil {
		e.opts.Router.Unsubscribe(e.sub)
		e.sub = nil
	}
	for _, s := range e.altSubs {
		e.opts.Router.Unsubscribe(s)
	}
	e.altSubs = nil
	e.mu.Unlock()
	e.wg.Wait()
}

// ValidName checks a queue name: 1 to 255 bytes of UTF-8 without control
// characters or wildcards ('#', '+', '*', '>').
func ValidName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty queue name", ErrInvalid)
	case len(name) > 255:
		return fmt.Errorf("%w: queue name longer than 255 bytes", ErrInvalid)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: queue name is not UTF-8", ErrInvalid)
	case strings.ContainsAny(name, "#+*>"):
		return fmt.Errorf("%w: queue name %q contains a wildcard character", ErrInvalid, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: queue name %q contains a control character", ErrInvalid, name)
		}
	}
	return nil
}

func (e *Engine) check(cfg *Config) error {
	if err := ValidName(cfg.Name); err != nil {
		return err
	}
	switch cfg.Access {
	case "":
		cfg.Access = NonExclusive
	case Exclusive, NonExclusive:
	default:
		return fmt.Errorf("%w: access %q: want exclusive or non-exclusive", ErrInvalid, cfg.Access)
	}
	if cfg.MaxMessages < 0 || cfg.MaxBytes < 0 || cfg.TTL < 0 || cfg.MaxDeliveries < 0 {
		return fmt.Errorf("%w: negative limit", ErrInvalid)
	}
	if cfg.DeadLetter == cfg.Name {
		return fmt.Errorf("%w: queue %q is its own dead-letter queue", ErrInvalid, cfg.Name)
	}
	for _, f := range cfg.Subscriptions {
		if _, err := match.Parse(f); err != nil {
			return fmt.Errorf("%w: subscription %q: %w", ErrInvalid, f, err)
		}
	}
	_, err := compileIntake(cfg)
	return err
}

// Declare creates a queue, or changes an existing one's configuration
// (its messages stay). A temporary queue lives in memory.
func (e *Engine) Declare(ctx context.Context, cfg Config) (*Queue, error) {
	if err := e.check(&cfg); err != nil {
		return nil, err
	}
	e.declMu.Lock()
	q, err := e.declare(ctx, cfg, true)
	e.declMu.Unlock()
	if err == nil && !cfg.Temporary && e.opts.Changed != nil {
		e.opts.Changed(cfg.Name)
	}
	return q, err
}

// declare applies cfg, checked; store: this engine's own declaration,
// written to the backend; otherwise one read from a SharedBackend
// (Follow), only attached to. declMu is held.
func (e *Engine) declare(ctx context.Context, cfg Config, store bool) (*Queue, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("queues: engine closed")
	}
	q := e.queues[cfg.Name]
	if q == nil {
		if len(e.queues) >= e.opts.Limits.MaxQueues {
			return nil, fmt.Errorf("%w: %d queues, the most allowed (queues.maxQueues)", ErrTooMany, e.opts.Limits.MaxQueues)
		}
		if cfg.Temporary && e.ownedLocked(cfg.Owner) >= e.opts.Limits.MaxTemporary {
			return nil, fmt.Errorf("%w: %d temporary queues on this connection, the most allowed", ErrTooMany, e.opts.Limits.MaxTemporary)
		}
	} else if q.cfg().Temporary != cfg.Temporary {
		return nil, fmt.Errorf("%w: queue %q exists and is %s", ErrInvalid, cfg.Name, kind(q.cfg().Temporary))
	}
	b := Backend(e.temp)
	if !cfg.Temporary {
		b = e.opts.Backend
	}
	var log Log
	var err error
	switch {
	case store:
		log, err = b.Open(ctx, cfg)
	case q == nil:
		log, err = b.(SharedBackend).Attach(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("queue %q: %w", cfg.Name, err)
	}
	in, _ := compileIntake(&cfg) // checked above
	if q == nil {
		q = newQueue(e, cfg, log)
		n, bytes, err := log.Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("queue %q: %w", cfg.Name, err)
		}
		q.messages, q.bytes, q.more = n, bytes, n > 0
		e.queues[cfg.Name] = q
	} else {
		q.mu.Lock()
		q.config = cfg
		wake := q.wakeLocked() // exclusive to non-exclusive: the standbys may take now
		q.mu.Unlock()
		notify(wake)
	}
	q.intake.Store(in)
	e.idx.RemoveKey(q)
	for _, f := range cfg.Subscriptions {
		if err := e.idx.Add(q, f); err != nil { // checked above
			return nil, fmt.Errorf("queue %q: subscription %q: %w", cfg.Name, f, err)
		}
	}
	e.syncSubLocked()
	q.fill()
	return q, nil
}

// Ensure returns the queue named cfg.Name as this engine or, with a
// SharedBackend, the store holds it (another gateway created it and this
// one has not followed yet), or declares it with cfg when neither does:
// a queue made on first use (queues.autoCreate) never overwrites the
// configuration another gateway gave it.
func (e *Engine) Ensure(ctx context.Context, cfg Config) (*Queue, error) {
	if q, ok := e.Queue(cfg.Name); ok {
		return q, nil
	}
	if err := e.check(&cfg); err != nil {
		return nil, err
	}
	e.declMu.Lock()
	if q, ok := e.Queue(cfg.Name); ok {
		e.declMu.Unlock()
		return q, nil
	}
	store := true
	if sb, ok := e.opts.Backend.(SharedBackend); ok && !cfg.Temporary {
		// Create, not a read then a declare: another gateway's Declare
		// between the two would be overwritten with cfg's defaults.
		stored, created, err := sb.Create(ctx, cfg)
		if err != nil {
			e.declMu.Unlock()
			return nil, fmt.Errorf("queue %q: %w", cfg.Name, err)
		}
		if !created {
			err := e.applyLocked(ctx, sb, cfg.Name, stored, true)
			q, ok := e.Queue(cfg.Name)
			e.declMu.Unlock()
			if err != nil || !ok {
				return nil, fmt.Errorf("queue %q: %w", cfg.Name, err)
			}
			return q, nil
		}
		store = false // stored by Create: attach to it
	}
	q, err := e.declare(ctx, cfg, store)
	e.declMu.Unlock()
	if err == nil && !cfg.Temporary && e.opts.Changed != nil {
		e.opts.Changed(cfg.Name)
	}
	return q, err
}

// Follow reads the declaration of the queue named name from a
// SharedBackend and makes this engine's queue what the store holds:
// created (attached to its Log), changed, or removed with its consumers
// told (ConsumerOptions.Deleted), without writing the store. Another
// gateway declared, changed or dropped it (docs/cluster.md, "Queues").
// A temporary queue of that name is left alone. Without a SharedBackend
// it does nothing.
func (e *Engine) Follow(ctx context.Context, name string) error {
	sb, ok := e.opts.Backend.(SharedBackend)
	if !ok {
		return nil
	}
	e.declMu.Lock()
	defer e.declMu.Unlock()
	cfg, found, err := sb.Declaration(ctx, name)
	if err != nil {
		return fmt.Errorf("queues: following %q: %w", name, err)
	}
	return e.applyLocked(ctx, sb, name, cfg, found)
}

// applyLocked makes the queue name what the store holds (cfg, or none
// when !found); declMu is held.
func (e *Engine) applyLocked(ctx context.Context, sb SharedBackend, name string, cfg Config, found bool) error {
	q, have := e.Queue(name)
	if have && q.cfg().Temporary {
		return nil
	}
	if !found {
		if have {
			e.remove(name)
			sb.Forget(name)
			e.opts.Logger.Info("queue dropped by another gateway: removed here", "queue", name)
		}
		return nil
	}
	if err := e.check(&cfg); err != nil {
		return fmt.Errorf("queues: following %q: %w", name, err)
	}
	if have && sameConfig(q.cfg(), cfg) {
		return nil
	}
	if _, err := e.declare(ctx, cfg, false); err != nil {
		return fmt.Errorf("queues: following %q: %w", name, err)
	}
	e.opts.Logger.Info("queue declared by another gateway: followed here", "queue", name, "created", !have)
	return nil
}

// sameConfig compares two configurations as stored.
func sameConfig(a, b Config) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// FollowAll is Follow for every queue: those the SharedBackend holds, and
// the durable ones this engine holds that it no longer does.
func (e *Engine) FollowAll(ctx context.Context) error {
	sb, ok := e.opts.Backend.(SharedBackend)
	if !ok {
		return nil
	}
	e.declMu.Lock()
	defer e.declMu.Unlock()
	cfgs, err := sb.Declared(ctx)
	if err != nil {
		return fmt.Errorf("queues: following: %w", err)
	}
	stored := make(map[string]bool, len(cfgs))
	var errs []error
	for _, cfg := range cfgs {
		stored[cfg.Name] = true
		if err := e.applyLocked(ctx, sb, cfg.Name, cfg, true); err != nil {
			errs = append(errs, err)
		}
	}
	for _, q := range e.Queues() {
		if !stored[q.name] && !q.cfg().Temporary {
			errs = append(errs, e.applyLocked(ctx, sb, q.name, Config{}, false))
		}
	}
	return errors.Join(errs...)
}

// FollowSoon asks for a FollowAll on the engine's own goroutine, at once
// (the news of changes may have been lost: the cluster's connection came
// back). Without a SharedBackend it does nothing.
func (e *Engine) FollowSoon() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// follow runs FollowAll every FollowEvery and when FollowSoon asks.
func (e *Engine) follow() {
	defer e.wg.Done()
	t := time.NewTicker(e.opts.FollowEvery)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		case <-e.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.FollowEvery)
		if err := e.FollowAll(ctx); err != nil {
			e.opts.Logger.Warn("queues: reading the declarations of the shared store", "error", err)
		}
		cancel()
	}
}

func kind(temporary bool) string {
	if temporary {
		return "temporary"
	}
	return "durable"
}

func (e *Engine) ownedLocked(owner string) int {
	n := 0
	for _, q := range e.queues {
		if c := q.cfg(); c.Temporary && c.Owner == owner {
			n++
		}
	}
	return n
}

// syncSubLocked keeps the engine on the router exactly while some queue
// has a subscription, so that a gateway without queue subscriptions pays
// nothing per publish (Router.Wants stays false).
func (e *Engine) syncSubLocked() {
	r := e.opts.Router
	if r == nil {
		return
	}
	switch {
	case e.idx.Len() > 0 && e.sub == nil:
		sub, err := r.Subscribe("#", e, core.SubOptions{QoS: 2, LocalOnly: e.opts.LocalOnly})
		if err != nil {
			e.opts.Logger.Error("queues: subscribing to the router", "error", err)
			return
		}
		e.sub = sub
	case e.idx.Len() == 0 && e.sub != nil:
		r.Unsubscribe(e.sub)
		e.sub = nil
	}
}

// Queue returns the queue named name.
func (e *Engine) Queue(name string) (*Queue, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q, ok := e.queues[name]
	return q, ok
}

// Queues returns every queue, by name.
func (e *Engine) Queues() []*Queue {
	e.mu.Lock()
	out := make([]*Queue, 0, len(e.queues))
	for _, q := range e.queues {
		out = append(out, q)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Totals counts the queues and the messages they hold, as Queues and
// each one's Info would, without Queues' copy and sort: GET
// /api/v1/stats, which the console polls every 2 s, needs only the sums.
func (e *Engine) Totals() (queues, messages int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, q := range e.queues { // e.mu, then q.mu: as poll
		q.mu.Lock()
		messages += q.messages
		q.mu.Unlock()
	}
	return len(e.queues), messages
}

// Delete removes a queue with its subscriptions and messages; its
// consumers are told (ConsumerOptions.Deleted).
func (e *Engine) Delete(ctx context.Context, name string) error {
	e.declMu.Lock()
	q := e.remove(name)
	if q == nil {
		e.declMu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	b := Backend(e.temp)
	durable := !q.cfg().Temporary
	if durable {
		b = e.opts.Backend
	}
	err := b.Drop(ctx, name)
	e.declMu.Unlock()
	if err == nil && durable && e.opts.Changed != nil {
		e.opts.Changed(name)
	}
	return err
}

// remove takes the queue named name out of the engine, its consumers told;
// nil when there is none. declMu is held.
func (e *Engine) remove(name string) *Queue {
	e.mu.Lock()
	q := e.queues[name]
	if q == nil {
		e.mu.Unlock()
		return nil
	}
	delete(e.queues, name)
	e.idx.RemoveKey(q)
	e.syncSubLocked()
	e.mu.Unlock()
	gone := q.delete()
	for _, c := range gone {
		if c.opts.Deleted != nil {
			c.opts.Deleted()
		}
	}
	return q
}

// DeleteOwned deletes the temporary queues of owner (its connection closed).
func (e *Engine) DeleteOwned(ctx context.Context, owner string) {
	var names []string
	e.mu.Lock()
	for name, q := range e.queues {
		if c := q.cfg(); c.Temporary && c.Owner == owner {
			names = append(names, name)
		}
	}
	e.mu.Unlock()
	for _, n := range names {
		_ = e.Delete(ctx, n) // a memory backend cannot fail
	}
}

var matchPool = sync.Pool{New: func() any { s := make([]*Queue, 0, 8); return &s }}

// Deliver implements core.Subscriber: m goes into every queue whose
// subscriptions match its topic and whose exceptions do not. With d.Acks
// (the publisher waits), each queue holds the acknowledgement until m is
// durable in it, and a queue that cannot take m refuses the publish
// (docs/queues.md, "Publisher feedback").
func (e *Engine) Deliver(m *core.Message, d core.Delivery) error {
	mp := matchPool.Get().(*[]*Queue)
	qs := e.idx.AppendMatches((*mp)[:0], m.Topic)
	for _, q := range qs {
		in := q.intake.Load()
		if !in.wants(m) {
			continue
		}
		in.put(q, m, d.Acks, func(err error) {
			if err != nil {
				e.opts.Logger.Debug("queued message refused", "queue", q.name, "topic", m.Topic, "error", err)
			}
		})
	}
	clear(qs)
	*mp = qs[:0]
	matchPool.Put(mp)
	return nil // refusals reach the publisher through d.Acks
}

// Put stores m in the queue named name (a publish straight to a queue:
// AMQP queue://name, MQTT $queue/name); done as for Queue.Put.
func (e *Engine) Put(name string, m *core.Message, done func(error)) {
	q, ok := e.Queue(name)
	if !ok {
		done(fmt.Errorf("%w: %q", ErrNotFound, name))
		return
	}
	q.Put(m, done)
}

// MatchingQueues returns the names of the queues a message on topic would
// go to.
func (e *Engine) MatchingQueues(topic string) []string {
	var out []string
	e.idx.Match(topic, func(q *Queue) { out = append(out, q.name) })
	sort.Strings(out)
	return out
}
