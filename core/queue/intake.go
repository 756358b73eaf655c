package queue

import (
	"errors"
	"fmt"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/selector"
)

// intake is what a queue asks of a message its subscriptions bring
// (Engine.Deliver), beyond matching them: Config.Selector, NoLocal and
// Overflow, compiled once at Declare. Read without the queue's lock
// (Queue.intake), so a publish pays one atomic load per matched queue.
type intake struct {
	sel     *selector.Selector // nil: every message
	noLocal string
	drop    bool
}

// maxStoredSelector bounds Config.Selector: the front-ends apply their
// own, smaller limit (amqp.maxSelectorLength) before they declare one.
const maxStoredSelector = 64 << 10

// compileIntake checks cfg's intake fields; nil when there is nothing to
// ask (the common queue).
func compileIntake(cfg *Config) (*intake, error) {
	switch cfg.Overflow {
	case "", OverflowRefuse, OverflowDrop:
	default:
		return nil, fmt.Errorf("%w: overflow %q: want refuse or drop", ErrInvalid, cfg.Overflow)
	}
	if cfg.Selector == "" && cfg.NoLocal == "" && cfg.Overflow != OverflowDrop {
		return nil, nil
	}
	in := &intake{noLocal: cfg.NoLocal, drop: cfg.Overflow == OverflowDrop}
	if cfg.Selector != "" {
		sel, err := selector.Parse(cfg.Selector, selector.Limits{MaxLength: maxStoredSelector})
		if err != nil {
			return nil, fmt.Errorf("%w: selector: %w", ErrInvalid, err)
		}
		in.sel = sel
	}
	return in, nil
}

// wants reports whether m goes into the queue.
func (in *intake) wants(m *core.Message) bool {
	if in == nil {
		return true
	}
	if in.noLocal != "" && in.noLocal == m.Origin.Client {
		return false
	}
	return in.sel == nil || in.sel.MatchMessage(m)
}

// put stores m in q for Deliver: with acks (the publisher waits), the
// acknowledgement is held until m is durable, and a refusal reaches the
// publisher, but for a full OverflowDrop queue, which drops m and does not
// refuse the publish.
func (in *intake) put(q *Queue, m *core.Message, acks *core.Acks, log func(error)) {
	drop := in != nil && in.drop
	if acks == nil {
		q.Put(m, log)
		return
	}
	acks.Hold()
	if !drop {
		q.Put(m, acks.Done)
		return
	}
	q.Put(m, func(err error) {
		if errors.Is(err, ErrFull) {
			log(err)
			err = nil
		}
		acks.Done(err)
	})
}
