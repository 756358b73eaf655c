package bridge

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tolsey/tolsey/bridge/buffer"
	"github.com/tolsey/tolsey/core"
)

// jsWindow is how many buffered messages a sender publishes before it waits
// for their acknowledgements: JetStream's async publish keeps them in
// flight together, and one buffer commit removes them all.
const jsWindow = 512

// jsShared is the NATS bridge's side of outbound JetStream: the buffer
// its JetStream rules append to, and its epoch.
type jsShared struct {
	buf    *buffer.Buffer
	epoch  string
	ownBuf bool // buf is ours to close (no NATSOptions.Shared)
}

// NATSNeedsBuffer reports whether rules hold an outbound JetStream rule,
// which needs the buffer.
func NATSNeedsBuffer(rules []Rule) bool {
	for _, r := range rules {
		if r.Direction.Outbound() && r.JetStream.Enabled {
			return true
		}
	}
	return false
}

// openJS takes the buffer when a rule needs it (the gateway's shared one,
// or its own), and builds each such rule's sender side.
func (b *NATS) openJS() error {
	if !NATSNeedsBuffer(b.opts.Rules) {
		return nil
	}
	if s := b.opts.Shared; s != nil {
		b.buf, b.epoch = s.buf, s.epoch
	} else {
		s, err := OpenSharedBuffer(b.opts.Buffer)
		if err != nil {
			return err
		}
		b.buf, b.epoch, b.ownBuf = s.buf, s.epoch, true
	}
	for _, r := range b.rules {
		if r.rule.Direction.Outbound() && r.rule.JetStream.Enabled {
			r.js = newJSOut(r)
		}
	}
	return nil
}

func (b *NATS) closeJS() error {
	if !b.ownBuf {
		return nil
	}
	return b.buf.Close()
}

// SharedBuffer is the on-disk store-and-forward buffer every bridge of a
// gateway appends to, NATS JetStream rules and remote AMQP QoS 1 rules
// alike: one bbolt file with a queue per rule (nats:<local>><remote>,
// amqp:<bridge>:<local>><remote>), so that bridge.buffer.maxBytes is one
// budget for them all. The gateway opens it and closes it after every
// bridge stopped.
type SharedBuffer struct {
	buf   *buffer.Buffer
	epoch string
}

// OpenSharedBuffer opens (creating) the buffer in o.Dir.
func OpenSharedBuffer(o BufferOptions) (*SharedBuffer, error) {
	buf, epoch, err := openBuffer(o)
	if err != nil {
		return nil, err
	}
	return &SharedBuffer{buf: buf, epoch: epoch}, nil
}

// Close closes the buffer, after every bridge using it stopped.
func (s *SharedBuffer) Close() error { return s.buf.Close() }

// openBuffer opens the bridge's buffer file and its epoch, a random id
// kept beside it. Nats-Msg-Id is MessageID(node, epoch/queue, seq), so that a buffer deleted
// and started again (sequences back at 1) cannot have its new messages
// taken for duplicates of old ones within JetStream's de-duplication
// window.
func openBuffer(o BufferOptions) (*buffer.Buffer, string, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("bridge buffer: %w", err)
	}
	epochFile := filepath.Join(o.Dir, "epoch")
	epoch, err := os.ReadFile(epochFile)
	if err != nil || len(epoch) == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		epoch = []byte(hex.EncodeToString(b[:]))
		if err := os.WriteFile(epochFile, epoch, 0o644); err != nil {
			return nil, "", fmt.Errorf("bridge buffer: %w", err)
		}
	}
	policy := buffer.RejectNew
	if o.DropOldest {
		policy = buffer.DropOldest
	}
	buf, err := buffer.Open(o.Dir, buffer.Options{MaxBytes: o.MaxBytes, Policy: policy})
	if err != nil {
		return nil, "", err
	}
	return buf, strings.TrimSpace(string(epoch)), nil
}

// jsOut is an outbound JetStream rule: Deliver appends to the rule's queue
// in the on-disk buffer, and a sender goroutine publishes the queue to
// JetStream in order, removing each record once JetStream acknowledged it.
type jsOut struct {
	r      *ruleLink
	buf    *buffer.Buffer
	queue  string
	idRule string // the rule part of Nats-Msg-Id (MessageID): epoch/queue

	up   chan struct{} // a token when the link (re)connects
	done chan struct{}
	wg   sync.WaitGroup
}

func newJSOut(r *ruleLink) *jsOut {
	b := r.b
	// The queue is named by what the rule connects, not its position, so
	// that reordering the rules keeps each one's buffered messages.
	q := "nats:" + r.rule.Local + ">" + r.rule.Remote
	return &jsOut{r: r, buf: b.buf, queue: q, idRule: b.epoch + "/" + q,
		up: make(chan struct{}, 1), done: make(chan struct{})}
}

// append is Deliver for a JetStream rule. The record takes its place in
// the rule's queue now, on the publisher's goroutine, and is written by
// the buffer's group commit without this goroutine waiting for it:
//
//   - acks non-nil (the publisher waits: a QoS 1 publish): the
//     acknowledgement is held until the record is durable, and refused
//     if the buffer refuses it (rejectNew full: the publisher sees
//     ErrFull). A front-end using Router.PublishAsync goes on reading its
//     connection meanwhile, so a window of its publishes shares a commit.
//   - acks nil (a QoS 0 publish matched the rule): nobody waits; the
//     message is buffered and sent like the others, at least once from
//     then on, but a full buffer under rejectNew drops it, counted in
//     tolsey_bridge_dropped_total{reason="buffer_full"} and the rule's
//     dropped count, and a QoS 0 publisher is never refused (at most once
//     is all it asked for).
func (j *jsOut) append(m *core.Message, acks *core.Acks) {
	r := j.r
	subj, err := r.mapng.Out(m.Topic)
	if err != nil {
		r.unmappable(m.Topic, err)
		return // at least once applies to what can be sent; counted and logged
	}
	rec := encodeRecord(r.b.toNATS(subj, m, "", time.Now()))
	appendDurable(j.buf, j.queue, rec, acks, j.refused)
}

// appendDurable appends rec to queue in buf without waiting for the disk.
// A publisher that waits (acks) is answered once the record is durable or
// refused; refused counts a refusal and words it for the publisher. With
// acks nil (a QoS 0 publish) a refusal is only counted.
func appendDurable(buf *buffer.Buffer, queue string, rec []byte, acks *core.Acks, refused func(error) error) {
	if acks == nil {
		if err := buf.AppendAsync(queue, rec, func(_ uint64, err error) {
			if err != nil {
				refused(err)
			}
		}); err != nil {
			refused(err)
		}
		return
	}
	// Before AppendAsync: its done may run before it returns.
	acks.Hold()
	if err := buf.AppendAsync(queue, rec, func(_ uint64, err error) {
		if err != nil {
			err = refused(err)
		}
		acks.Done(err)
	}); err != nil {
		acks.Done(refused(err))
	}
}

// refused counts a record the buffer did not take, and says so for the
// publisher.
func (j *jsOut) refused(err error) error {
	r := j.r
	r.dropped.Add(1)
	if errors.Is(err, buffer.ErrFull) {
		r.b.m.drop("buffer_full")
	} else {
		r.b.m.drop("buffer_error")
	}
	return fmt.Errorf("bridge %s rule %s: %w", bridgeName, r.name, err)
}

func (j *jsOut) linkUp() {
	select {
	case j.up <- struct{}{}:
	default:
	}
}

func (j *jsOut) start() {
	j.wg.Add(1)
	go j.send()
}

func (j *jsOut) stop() {
	select {
	case <-j.done:
	default:
		close(j.done)
	}
	j.wg.Wait()
}

func (j *jsOut) stats() BufferStats {
	q := j.buf.QueueStats(j.queue)
	return BufferStats{Messages: q.Records, Bytes: q.Bytes, MaxBytes: j.buf.Stats().MaxBytes, Rejected: q.Rejected, Dropped: q.Dropped}
}

// send is the sender goroutine: while connected, publish the queue's
// records in order with a window of async publishes, each with its
// Nats-Msg-Id, and remove them when acknowledged. A record JetStream
// refuses (an API error: no such stream, limits) is counted, logged and
// removed: retrying it for ever would stop the rule. A record whose publish
// timed out or lost the connection is sent again, with the same id, from
// the first one not acknowledged: JetStream de-duplicates.
func (j *jsOut) send() {
	defer j.wg.Done()
	r := j.r
	b := r.b
	js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(jsWindow*2))
	if err != nil {
		b.fail("jetstream", err)
		return
	}
	var after uint64 // last sequence sent; rewound to the first not acknowledged after a failure
	backoff := 100 * time.Millisecond
	for {
		if !b.connected.Load() {
			select {
			case <-j.up:
				continue
			case <-j.done:
				return
			}
		}
		recs, err := j.buf.Next(j.queue, after, jsWindow)
		if err != nil {
			b.fail("buffer", err)
			if !j.wait(time.Second) {
				return
			}
			continue
		}
		if len(recs) == 0 {
			select {
			case <-j.buf.Appended(j.queue, after):
			case <-j.up:
			case <-j.done:
				return
			}
			continue
		}
		start := time.Now()
		acked, retryFrom := j.publish(js, recs)
		if len(acked) > 0 {
			j.ack(acked)
		}
		if retryFrom != 0 {
			after = retryFrom - 1
			if !j.wait(backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		after = recs[len(recs)-1].Seq
		if rate := b.opts.Buffer.DrainRate; rate > 0 {
			due := time.Duration(len(recs)) * time.Second / time.Duration(rate)
			if !j.wait(due - time.Since(start)) {
				return
			}
		}
	}
}

// ack removes acknowledged records from the buffer (bridge/buffer handles
// an ack that empties a queue: see bounds in its writer.go).
func (j *jsOut) ack(seqs []uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := j.buf.Ack(ctx, j.queue, seqs...); err != nil {
		j.r.b.fail("buffer ack", err)
	}
}

// wait waits d, or until stop; false on stop.
func (j *jsOut) wait(d time.Duration) bool { return sleep(d, j.done) }

// publish sends recs as async publishes and waits for every answer. It
// returns the sequences to remove (acknowledged, or refused for good) and
// the first sequence to send again (0: none).
func (j *jsOut) publish(js jetstream.JetStream, recs []buffer.Record) (remove []uint64, retryFrom uint64) {
	r := j.r
	b := r.b
	type pending struct {
		seq uint64
		f   jetstream.PubAckFuture
	}
	fs := make([]pending, 0, len(recs))
	for _, rec := range recs {
		msg, err := decodeRecord(rec.Data)
		if err != nil {
			b.log.Error("bridge buffer record unreadable: dropped", "rule", r.name, "seq", rec.Seq, "error", err)
			b.m.drop("remote_error")
			remove = append(remove, rec.Seq)
			continue
		}
		f, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(MessageID(b.opts.Node, j.idRule, rec.Seq)))
		if err != nil {
			// Not connected, or the window is full: send it again later.
			b.fail("jetstream publish", err)
			if retryFrom == 0 {
				retryFrom = rec.Seq
			}
			break
		}
		fs = append(fs, pending{rec.Seq, f})
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for _, p := range fs {
		select {
		case <-p.f.Ok():
			r.out.Add(1)
			b.m.message(r, "out")
			if retryFrom == 0 {
				remove = append(remove, p.seq)
			}
			// After a failure, later acked ones stay in the buffer and are
			// sent again with it (JetStream drops them as duplicates).
		case err := <-p.f.Err():
			var api *jetstream.APIError
			if errors.As(err, &api) {
				r.dropped.Add(1)
				b.m.drop("remote_error")
				b.log.Warn("JetStream refused a bridged message: dropped", "rule", r.name, "subject", p.f.Msg().Subject, "error", err)
				if retryFrom == 0 {
					remove = append(remove, p.seq)
				}
				continue
			}
			b.fail("jetstream publish", err)
			if retryFrom == 0 {
				retryFrom = p.seq
			}
		case <-timeout.C:
			if retryFrom == 0 {
				retryFrom = p.seq
			}
		case <-j.done:
			if retryFrom == 0 {
				retryFrom = p.seq
			}
			return remove, retryFrom
		}
	}
	return remove, retryFrom
}

// encodeRecord lays a NATS message out for the buffer: subject, headers
// (count, then key and value pairs), data; lengths as uvarints.
func encodeRecord(msg *nats.Msg) []byte {
	n := len(msg.Subject) + len(msg.Data) + 16
	for k, vs := range msg.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	out := make([]byte, 0, n)
	out = appendString(out, msg.Subject)
	count := 0
	for _, vs := range msg.Header {
		count += len(vs)
	}
	out = binary.AppendUvarint(out, uint64(count))
	for k, vs := range msg.Header {
		for _, v := range vs {
			out = appendString(out, k)
			out = appendString(out, v)
		}
	}
	return append(out, msg.Data...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errRecord = errors.New("bad buffer record")

func decodeRecord(b []byte) (*nats.Msg, error) {
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	subj, ok := str()
	if !ok {
		return nil, errRecord
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) { // each header takes at least 2 bytes: bounds a forged count
		return nil, errRecord
	}
	b = b[k:]
	msg := nats.NewMsg(subj)
	for i := uint64(0); i < count; i++ {
		key, ok1 := str()
		val, ok2 := str()
		if !ok1 || !ok2 {
			return nil, errRecord
		}
		msg.Header.Add(key, val)
	}
	msg.Data = b
	return msg, nil
}

// startJSIn reads an inbound JetStream rule's durable consumer. The
// consumer is made (or updated) once NATS is reachable, retried with
// backoff until then; each message is acknowledged after the router took
// it (its retained copy stored), or negatively acknowledged for
// redelivery when the retained store failed.
func (r *ruleLink) startJSIn(context.Context) error {
	b := r.b
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		js, err := jetstream.New(b.nc)
		if err != nil {
			b.fail("jetstream", err)
			return
		}
		cfg := jetstream.ConsumerConfig{
			Durable:       r.rule.JetStream.Durable,
			FilterSubject: r.rule.Remote,
			AckPolicy:     jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		}
		backoff := 100 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			cons, err := js.CreateOrUpdateConsumer(ctx, r.rule.JetStream.Stream, cfg)
			cancel()
			if err == nil {
				cc, err := cons.Consume(func(jm jetstream.Msg) {
					msg := &nats.Msg{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()}
					if r.publishIn(msg, nil) {
						_ = jm.Ack()
					} else {
						_ = jm.NakWithDelay(time.Second)
					}
				}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
					b.log.Debug("JetStream consumer", "rule", r.name, "error", err)
				}))
				if err == nil {
					<-b.done
					cc.Stop()
					<-cc.Closed()
					return
				}
			}
			b.fail(fmt.Sprintf("JetStream consumer %s on stream %s", cfg.Durable, r.rule.JetStream.Stream), err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-b.done:
				t.Stop()
				return
			}
			backoff = min(backoff*2, b.opts.ReconnectMax)
		}
	}()
	return nil
}
