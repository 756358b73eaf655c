// Package match is the topic matching of queue subscriptions: the filter
// grammar endpoints accept (MQTT's `+` and `#`, and the Solace-style `*`,
// `prefix*` and `>` that users bring from other brokers), exceptions written
// with a leading `!`, and Index, the one trie over every endpoint's filters
// that says which endpoints a published topic goes to (docs/queues.md,
// "Filter grammar and exceptions"; docs/architecture.md, decision 5).
//
// It knows no queue, protocol or store: an endpoint is any comparable key,
// so queues, and later topic subscribers with exceptions, share one matcher.
// It imports only the standard library and core (for the MQTT topic rules
// and their errors).
package match

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tolsey/tolsey/core"
)

// Kind is what one level of a filter matches.
type Kind uint8

const (
	// Literal matches a topic level equal to its text. `*` inside a level
	// (`a*b`), `>` anywhere but alone in the last level, and a leading `$`
	// are literal characters.
	Literal Kind = iota
	// Plus is `+`: exactly one level, whatever it holds, empty included
	// [MQTT-4.7.1-2].
	Plus
	// Star is `*` alone in a level: exactly one level, as Plus (Solace).
	Star
	// Prefix is `text*` at the end of a level: a level that begins with text,
	// followed by any characters or none (`f*` matches `f`, `fox`, `frog`).
	Prefix
	// Hash is `#` as the last level: the parent level and any number of
	// levels below it [MQTT-4.7.1-1] (`a/#` matches `a`, `a/b`, `a/b/c`).
	Hash
	// Tail is `>` alone as the last level: one level or more below the
	// parent, never the parent itself (`a/>` matches `a/b`, not `a`).
	Tail
)

// Level is one level of a parsed filter.
type Level struct {
	Kind Kind
	// Text is the level for Literal and the text before `*` for Prefix
	// (never empty: `*` alone is Star); empty for the other kinds.
	Text string
}

// Filter is a parsed subscription filter.
type Filter struct {
	// Exception: the filter was written with a leading `!`; a topic it
	// matches is kept out of the endpoint whatever else matches.
	Exception bool
	Levels    []Level // at least one
}

// Filter errors. Those MQTT defines (a misplaced `#` or `+`, a string MQTT
// cannot carry) are core's, so errors.Is finds the same sentinel whichever
// grammar refused the filter.
var (
	ErrEmpty  = errors.New("filter is empty [MQTT-4.7.3-1]")
	ErrShared = errors.New("a shared subscription ($share/...) cannot be an endpoint subscription: the endpoint itself shares its messages among its consumers")
)

// FilterError says which filter was refused, where, and why; Err is one of
// ErrEmpty, ErrShared, core.ErrFilterHash, core.ErrFilterPlus,
// core.ErrTopicTooLong, core.ErrTopicUTF8 or core.ErrTopicNUL.
type FilterError struct {
	Filter string // as given, `!` included
	Level  int    // the level at fault, from 1; 0 when the whole filter is
	Err    error
}

func (e *FilterError) Error() string {
	// Shortened: a filter may be 64 KiB, and this text goes to logs and to
	// the admin API's answer.
	if e.Level > 0 {
		return fmt.Sprintf("invalid filter %q, level %d: %v", core.ShortTopic(e.Filter), e.Level, e.Err)
	}
	return fmt.Sprintf("invalid filter %q: %v", core.ShortTopic(e.Filter), e.Err)
}

func (e *FilterError) Unwrap() error { return e.Err }

const sharePrefix = "$share/"

// Parse checks s against the grammar and returns its levels. A leading `!`
// marks an exception and is not part of the filter; a `!` anywhere else is a
// literal character (so `!!a` is the exception for topic `!a`, and a filter
// for a topic whose first level starts with `!` must use a wildcard there).
//
// Parse does not apply the gateway's topic limits (core.TopicLimits): the
// caller checks them against its own configuration.
func Parse(s string) (Filter, error) {
	var f Filter
	body := s
	if strings.HasPrefix(body, "!") {
		f.Exception, body = true, body[1:]
	}
	fail := func(level int, err error) (Filter, error) {
		return Filter{}, &FilterError{Filter: s, Level: level, Err: err}
	}
	switch {
	case body == "":
		return fail(0, ErrEmpty)
	case len(body) > core.MaxTopicLength:
		return fail(0, core.ErrTopicTooLong)
	case !utf8.ValidString(body):
		return fail(0, core.ErrTopicUTF8)
	case strings.IndexByte(body, 0) >= 0:
		return fail(0, core.ErrTopicNUL)
	case strings.HasPrefix(body, sharePrefix):
		return fail(0, ErrShared)
	}
	n := strings.Count(body, "/") + 1
	f.Levels = make([]Level, 0, n)
	for i := 1; ; i++ {
		level, rest, more := cutLevel(body)
		l, err := parseLevel(level, !more)
		if err != nil {
			return fail(i, err)
		}
		f.Levels = append(f.Levels, l)
		if !more {
			return f, nil
		}
		body = rest
	}
}

// parseLevel classifies one level; last says it is the filter's last.
func parseLevel(level string, last bool) (Level, error) {
	switch {
	case strings.IndexByte(level, '#') >= 0:
		if level != "#" || !last {
			return Level{}, core.ErrFilterHash
		}
		return Level{Kind: Hash}, nil
	case strings.IndexByte(level, '+') >= 0:
		if level != "+" {
			return Level{}, core.ErrFilterPlus
		}
		return Level{Kind: Plus}, nil
	case level == "*":
		return Level{Kind: Star}, nil
	case level == ">" && last:
		return Level{Kind: Tail}, nil
	case len(level) > 1 && level[len(level)-1] == '*':
		// Only the last `*` is the wildcard: `a**` is the prefix `a*`.
		return Level{Kind: Prefix, Text: level[:len(level)-1]}, nil
	}
	return Level{Kind: Literal, Text: level}, nil
}

// String is the filter as written: Parse(f.String()) gives f back, and for a
// filter Parse returned, String returns the string it was given.
func (f Filter) String() string {
	var b strings.Builder
	if f.Exception {
		b.WriteByte('!')
	}
	for i, l := range f.Levels {
		if i > 0 {
			b.WriteByte('/')
		}
		switch l.Kind {
		case Literal:
			b.WriteString(l.Text)
		case Plus:
			b.WriteByte('+')
		case Star:
			b.WriteByte('*')
		case Prefix:
			b.WriteString(l.Text)
			b.WriteByte('*')
		case Hash:
			b.WriteByte('#')
		case Tail:
			b.WriteByte('>')
		}
	}
	return b.String()
}

// wildcard reports whether a filter starting with l may not match a topic
// starting with `$` [MQTT-4.7.2-1]. A Prefix is never empty, and only
// matches a `$` topic when it starts with `$` itself, so it needs no rule.
func (l Level) wildcard() bool {
	return l.Kind == Plus || l.Kind == Star || l.Kind == Hash || l.Kind == Tail
}

// Matches reports whether topic matches f, ignoring f.Exception (whether a
// match keeps the topic in or out is the caller's business). It is the
// single-filter form of Index.Match, for a caller with one filter at hand.
func (f Filter) Matches(topic string) bool {
	if len(f.Levels) == 0 {
		return false
	}
	if len(topic) > 0 && topic[0] == '$' && f.Levels[0].wildcard() {
		return false // [MQTT-4.7.2-1]
	}
	for i, l := range f.Levels {
		level, rest, more := cutLevel(topic)
		switch l.Kind {
		case Hash, Tail:
			// Tail needs one level or more, and level is one.
			return true
		case Literal:
			if level != l.Text {
				return false
			}
		case Prefix:
			if !strings.HasPrefix(level, l.Text) {
				return false
			}
		}
		if i == len(f.Levels)-1 {
			return !more
		}
		if !more {
			// The topic ends before the filter: only "#" next matches
			// the parent level [MQTT-4.7.1-2].
			return i == len(f.Levels)-2 && f.Levels[i+1].Kind == Hash
		}
		topic = rest
	}
	return false
}

// cutLevel splits off the first level of a topic or filter.
func cutLevel(s string) (level, rest string, more bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// ParseAll parses each of ss (a list of exceptions, say), stopping at the
// first that is refused.
func ParseAll(ss []string) ([]Filter, error) {
	out := make([]Filter, 0, len(ss))
	for _, s := range ss {
		f, err := Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// AnyMatches reports whether one of fs matches topic.
func AnyMatches(fs []Filter, topic string) bool {
	for i := range fs {
		if fs[i].Matches(topic) {
			return true
		}
	}
	return false
}
