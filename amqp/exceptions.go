package amqp

import (
	"fmt"
	"slices"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/core/queue/match"
)

// Exceptions for topic receivers (docs/queues.md, "Exceptions for topic
// subscribers"; docs/mapping.md, "Source filters"): a source filter whose
// descriptor is exceptFilterName holds one filter (a string) or several (a
// list or array of strings) in the queue grammar (core/queue/match); a
// message whose topic one of them matches is not delivered on the link.
// The MQTT front-end offers the same as a SUBSCRIBE user property
// (mqtt/exceptions.go).
//
// The descriptor is a symbol only: the gateway has no registered domain
// for a numeric one (AMQP 1.0 part 1 §1.5). go-amqp's
// NewLinkFilter(name, 0, value) writes the name as key and descriptor.
const exceptFilterName encoding.Symbol = "tolsey:except-filter"

// parseExceptFilter returns the exceptions an except filter's value holds.
// A leading `!` is optional (the descriptor already says they are
// exceptions), so `!!a` is the exception for topic `!a`, as in a queue's
// subscriptions.
func parseExceptFilter(value any) ([]match.Filter, error) {
	var ss []string
	switch v := value.(type) {
	case string:
		ss = []string{v}
	case []any:
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%s: a list of %T, want strings", exceptFilterName, x)
			}
			ss = append(ss, s)
		}
	case encoding.Array:
		for _, x := range v.Values {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%s: an array of %T, want strings", exceptFilterName, x)
			}
			ss = append(ss, s)
		}
	default:
		return nil, fmt.Errorf("%s: a value of type %T, want a string or a list of strings", exceptFilterName, value)
	}
	if len(ss) == 0 {
		return nil, fmt.Errorf("%s: no filter", exceptFilterName)
	}
	out, err := match.ParseAll(ss)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exceptFilterName, err)
	}
	return out, nil
}

// sameExceptions reports whether a and b are the same exceptions, in the
// same order: a durable subscription reattached with others is a changed
// subscription (JMS replaces it).
func sameExceptions(a, b []match.Filter) bool {
	return slices.EqualFunc(a, b, func(x, y match.Filter) bool { return x.String() == y.String() })
}
