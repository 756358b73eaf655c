package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/tolsey/tolsey/bridge/buffer"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/auth"
)

// Deliver implements core.Subscriber for an outbound rule, on the
// publisher's goroutine. QoS 0: queued for the rule's sender (when the
// queue is full the publisher waits up to the bridge's WriterStall for the sender to
// free room, as for the NATS bridge's writer), dropped and counted when
// the queue stays full or the remote is down (at most once).
// QoS 1: written to the on-disk buffer before it returns, so the
// publisher's acknowledgement follows the durable write.
func (r *amqpRule) Deliver(m *core.Message, d core.Delivery) error {
	b := r.b
	if !b.opts.Identity.allowed(auth.Subscribe, b.client, m.Topic) {
		r.dropped.Add(1)
		b.m.drop("denied")
		return nil
	}
	path := pathOf(m)
	if len(path) >= MaxHops || slices.Contains(path, b.opts.Node) || (b.remoteNode() != "" && slices.Contains(path, b.remoteNode())) {
		// Been here, or been there: the second loop guard.
		r.dropped.Add(1)
		b.m.drop("loop")
		return nil
	}
	if r.queue != nil {
		if !b.connected.Load() {
			r.dropped.Add(1)
			b.m.drop("remote_down")
			return nil
		}
		if !r.queue.putStall(m, b.opts.Bridge.WriterStall, b.done) {
			r.dropped.Add(1)
			b.m.drop(fullOrStopping(b.done))
		}
		return nil
	}
	am := toAMQP(m, append(path, b.opts.Node), time.Now())
	rec, err := am.MarshalBinary()
	if err != nil {
		r.dropped.Add(1)
		b.m.drop("unmappable")
		b.log.Warn("message not bridged: cannot encode", "topic", m.Topic, "rule", r.name, "error", err)
		return nil
	}
	appendDurable(b.buf, r.bq, rec, d.Acks, r.refused)
	return nil
}

// refused counts a record the buffer did not take, and says so for the
// publisher.
func (r *amqpRule) refused(err error) error {
	b := r.b
	r.dropped.Add(1)
	if errors.Is(err, buffer.ErrFull) {
		b.m.drop("buffer_full")
	} else {
		b.m.drop("buffer_error")
	}
	return fmt.Errorf("bridge amqp %s rule %s: %w", b.opts.Bridge.Name, r.name, err)
}

// sendQoS0 sends queued messages presettled, a burst at a time, until the
// link fails.
func (r *amqpRule) sendQoS0(sess *goamqp.Session) error {
	b := r.b
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	snd, err := sess.NewSender(ctx, r.rule.Remote, &goamqp.SenderOptions{SettlementMode: goamqp.SenderSettleModeSettled.Ptr()})
	cancel()
	if err != nil {
		return fmt.Errorf("attach sender to %s: %w", r.rule.Remote, err)
	}
	defer closeLink(snd.Close)
	chunk := r.queue.chunk()
	for {
		if r.sent == len(r.burst) {
			clear(r.burst) // the sender keeps no message alive
			r.burst, r.sent = r.queue.take(r.burst), 0
			if len(r.burst) == 0 {
				select {
				case <-r.queue.ready:
					continue
				case <-b.done:
					r.discardOnStop()
					return nil
				}
			}
		}
		select {
		case <-b.done:
			r.discardOnStop()
			return nil
		default:
		}
		m := r.burst[r.sent]
		r.sent++
		if r.sent%chunk == 0 {
			r.queue.release(chunk) // stalled publishers go on
		}
		am := toAMQP(m, append(pathOf(m), b.opts.Node), time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := snd.Send(ctx, am, nil)
		cancel()
		if err != nil {
			r.dropped.Add(1)
			b.m.drop("remote_error")
			return fmt.Errorf("send to %s: %w", r.rule.Remote, err)
		}
		r.out.Add(1)
		b.m.message(r, "out")
	}
}

// discardOnStop counts what the QoS 0 sender had taken or was queued and
// not sent when the bridge stopped (reason stopping): the sender does not
// wait on a remote at Stop.
func (r *amqpRule) discardOnStop() {
	rest := len(r.burst) - r.sent
	clear(r.burst)
	r.burst, r.sent = r.queue.takeLast(r.burst), 0 // nothing comes after: Deliver counts it stopping
	rest += len(r.burst)
	clear(r.burst)
	r.burst = r.burst[:0]
	r.queue.release(rest)
	r.dropped.Add(uint64(rest))
	for range rest {
		r.b.m.drop("stopping")
	}
}

func closeLink(close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = close(ctx)
}

// sendQoS1 sends the rule's buffered records in order, unsettled, a window
// at a time, and removes each once the remote settled it: accepted, or
// rejected (counted, logged, dropped: retrying it for ever would stop the
// rule). Released and modified records, and those whose outcome was lost
// with the link, are sent again from the first of them; a record released
// or modified amqpMaxRetries times in a row, or modified with
// undeliverable-here, is dropped and counted. bridge.buffer.drainRate
// paces the windows.
func (r *amqpRule) sendQoS1(sess *goamqp.Session) error {
	b := r.b
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	snd, err := sess.NewSender(ctx, r.rule.Remote, &goamqp.SenderOptions{SettlementMode: goamqp.SenderSettleModeUnsettled.Ptr()})
	cancel()
	if err != nil {
		return fmt.Errorf("attach sender to %s: %w", r.rule.Remote, err)
	}
	defer closeLink(snd.Close)
	window := amqpWindow
	if rate := b.opts.Buffer.DrainRate; rate > 0 {
		// Windows of a tenth of a second's worth, so that the pace is
		// even rather than a burst of 64 and a long pause.
		window = min(amqpWindow, max(1, rate/10))
	}
	var after uint64     // last sequence done with
	var paceAt time.Time // drainRate: when the records sent so far are due
	for {
		recs, err := b.buf.Next(r.bq, after, window)
		if err != nil {
			return fmt.Errorf("buffer: %w", err)
		}
		if len(recs) == 0 {
			select {
			case <-b.buf.Appended(r.bq, after):
				continue
			case <-b.done:
				return nil
			}
		}
		start := time.Now()
		remove, retry, err := r.sendWindow(snd, recs)
		if len(remove) > 0 {
			if aerr := r.ack(remove); aerr != nil {
				return fmt.Errorf("buffer ack: %w", aerr)
			}
		}
		if err != nil {
			return err
		}
		if retry != nil {
			// Released or modified: the remote may take it later. The
			// rule's loop backs off and attaches again.
			return retry
		}
		after = recs[len(recs)-1].Seq
		if rate := b.opts.Buffer.DrainRate; rate > 0 {
			// A schedule, not a pause per window, so that the time the
			// windows take does not slow the pace below the rate; after
			// a pause of more than a second it starts again from now
			// rather than catch up in a burst.
			if time.Since(paceAt) > time.Second {
				paceAt = start
			}
			paceAt = paceAt.Add(time.Duration(len(recs)) * time.Second / time.Duration(rate))
			if !b.wait(time.Until(paceAt)) {
				return nil
			}
		}
	}
}

// ack removes records from the buffer.
func (r *amqpRule) ack(seqs []uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.b.buf.Ack(ctx, r.bq, seqs...)
	return err
}

// amqpMaxRetries is how many times in a row a record the remote released
// or modified is sent before it is dropped (counted, logged): the remote
// may be out of room for a while (released), but a record it never takes
// must not stop the rule for ever. With the rule's backoff between
// attempts (50 ms doubling up to ReconnectMax, 10 s, halved by jitter at
// worst) that is 20 to 40 s of trying.
const amqpMaxRetries = 10

// sendWindow sends recs and waits for their outcomes. It returns the
// sequences to remove, why the first record to send again must be sent
// again (nil: none), and the link's error.
func (r *amqpRule) sendWindow(snd *goamqp.Sender, recs []buffer.Record) (remove []uint64, retry, err error) {
	b := r.b
	type pending struct {
		seq uint64
		rc  goamqp.SendReceipt
	}
	ps := make([]pending, 0, len(recs))
	for _, rec := range recs {
		var am goamqp.Message
		if uerr := am.UnmarshalBinary(rec.Data); uerr != nil {
			b.log.Error("bridge buffer record unreadable: dropped", "rule", r.name, "seq", rec.Seq, "error", uerr)
			r.dropped.Add(1)
			b.m.drop("buffer_error")
			remove = append(remove, rec.Seq)
			continue
		}
		if am.Properties == nil {
			am.Properties = &goamqp.MessageProperties{}
		}
		// The same id every time this record is sent (after a lost link,
		// a release, a kill -9), and never another record's: a remote or
		// a consumer can de-duplicate on it.
		am.Properties.MessageID = MessageID(b.opts.Node, b.epoch+"/"+r.bq, rec.Seq)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rc, serr := snd.SendWithReceipt(ctx, &am, nil)
		cancel()
		if serr != nil {
			err = fmt.Errorf("send to %s: %w", r.rule.Remote, serr)
			break
		}
		ps = append(ps, pending{rec.Seq, rc})
	}
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, werr := p.rc.Wait(ctx)
		cancel()
		if werr != nil {
			if err == nil {
				err = fmt.Errorf("outcome from %s: %w", r.rule.Remote, werr)
			}
			return remove, retry, err
		}
		if retry != nil {
			continue // sent again with the first released one, in order
		}
		switch s := st.(type) {
		case *goamqp.StateAccepted:
			r.out.Add(1)
			b.m.message(r, "out")
			remove = append(remove, p.seq)
			r.retries = 0
		case *goamqp.StateRejected:
			r.dropped.Add(1)
			b.m.drop("rejected")
			b.log.Warn("remote rejected a bridged message: dropped", "rule", r.name, "address", r.rule.Remote, "error", s.Error)
			remove = append(remove, p.seq)
			r.retries = 0
		case *goamqp.StateReleased:
			retry = r.notTaken(p.seq, "released", false, &remove)
		case *goamqp.StateModified:
			retry = r.notTaken(p.seq, "modified", s.UndeliverableHere, &remove)
		default:
			// Presettled by the remote or an unknown outcome: taken.
			r.out.Add(1)
			b.m.message(r, "out")
			remove = append(remove, p.seq)
			r.retries = 0
		}
	}
	return remove, retry, err
}

// notTaken handles a record the remote released or modified: it is sent
// again (the error says why), unless it was amqpMaxRetries times already
// or the remote said not to send it here again (undeliverable-here), when
// it is dropped (added to remove) and nil is returned.
func (r *amqpRule) notTaken(seq uint64, outcome string, undeliverable bool, remove *[]uint64) error {
	b := r.b
	b.m.drop(outcome)
	if r.retrySeq != seq {
		r.retrySeq, r.retries = seq, 0
	}
	r.retries++
	if !undeliverable && r.retries < amqpMaxRetries {
		return fmt.Errorf("%s %s message %d (attempt %d of %d): sent again", r.rule.Remote, outcome, seq, r.retries, amqpMaxRetries)
	}
	r.dropped.Add(1)
	why := fmt.Sprintf("%s %d times", outcome, r.retries)
	if undeliverable {
		why = outcome + " with undeliverable-here"
	}
	b.log.Warn("remote did not take a bridged message: dropped", "rule", r.name, "address", r.rule.Remote, "why", why)
	*remove = append(*remove, seq)
	r.retries = 0
	return nil
}
