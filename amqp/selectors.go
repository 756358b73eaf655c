package amqp

import (
	"fmt"
	"unicode/utf8"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue/match"
	"github.com/tolsey/tolsey/core/selector"
)

// JMS message selectors (docs/jms.md, "Selectors"): the source filter
// Qpid JMS sends for a consumer created with a selector (key
// "jms-selector"), a string in the SQL-92 subset of Jakarta Messaging 3.1
// §3.8.1.1 (core/selector). It is parsed once at attach and applied to
// every message the link would deliver: on a topic (plain, durable or
// shared subscription; live messages, what a durable subscription stores,
// retained copies, parked alternates) and on a queue, where a message the
// selector does not select stays for the queue's other consumers
// (queue.ConsumerOptions.Select). An applied selector is echoed in the
// attach answer's source; one that does not parse, or is longer than
// Options.MaxSelectorLength, refuses the link with amqp:invalid-field,
// which Qpid JMS raises as InvalidSelectorException.
const (
	selectorFilterName encoding.Symbol = "apache.org:selector-filter:string"
	selectorFilterCode uint64          = 0x0000468C00000004
)

// sourceFilters is what a source's filter-set asks of the gateway.
type sourceFilters struct {
	kept    encoding.Fields // the entries applied, echoed in the attach answer [3.5.3]
	noLocal bool
	except  []match.Filter
	sel     *selector.Selector // nil: every message
	selKey  encoding.Symbol    // the filter-set key the selector came under
}

// parseFilters reads a source's filter-set: the entries the gateway
// applies (no-local, except, selector) are kept; others are left out of
// the answer, so the client knows they are not applied (AMQP 1.0 part 3
// §3.5.3). An except filter or selector that is not valid is an error.
func (s *Server) parseFilters(f encoding.Fields) (sourceFilters, error) {
	var out sourceFilters
	for _, e := range f {
		d, ok := e.Value.(encoding.Described)
		switch {
		case !ok:
		case d.Descriptor == noLocalFilterName || d.Descriptor == noLocalFilterCode:
			out.kept = append(out.kept, e)
			out.noLocal = true
		case d.Descriptor == exceptFilterName:
			exc, err := parseExceptFilter(d.Value)
			if err != nil {
				return sourceFilters{}, err
			}
			out.kept = append(out.kept, e)
			out.except = append(out.except, exc...)
		case d.Descriptor == selectorFilterName || d.Descriptor == selectorFilterCode:
			if out.selKey != "" {
				continue // one selector: a second is left out, not applied
			}
			text, ok := d.Value.(string)
			if !ok {
				return sourceFilters{}, fmt.Errorf("%s: a value of type %T, want a string", selectorFilterName, d.Value)
			}
			sel, err := selector.Parse(text, selector.Limits{MaxLength: s.opts.MaxSelectorLength})
			if err != nil {
				return sourceFilters{}, fmt.Errorf("%s %q: %w", selectorFilterName, clip(text), err)
			}
			out.kept = append(out.kept, e)
			out.sel, out.selKey = sel, e.Key
		}
	}
	return out, nil
}

// queueKept is the part of kept that applies to a queue: the selector.
// No-local and except filters are about topics; left out of the answer.
func (f *sourceFilters) queueKept() encoding.Fields {
	for _, e := range f.kept {
		if f.sel != nil && e.Key == f.selKey {
			return encoding.Fields{e}
		}
	}
	return nil
}

// selectFunc is the engine's Select for a selector: nil for none, so that
// a consumer without one is not selective (queue.ConsumerOptions).
func selectFunc(sel *selector.Selector) func(*core.Message) bool {
	if sel == nil {
		return nil
	}
	return sel.MatchMessage
}

// clip shortens a selector quoted in an error: it may be
// MaxSelectorLength long, and an error description should not be.
func clip(s string) string {
	n := 100
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// sameSelector reports whether a and b are the same selector: a durable
// subscription reattached with another is a changed subscription (JMS
// replaces it).
func sameSelector(a, b *selector.Selector) bool { return a.String() == b.String() }
