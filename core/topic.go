package core

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxTopicLength is the longest topic name or filter MQTT can carry
// [MQTT-1.5.4-1]: a UTF-8 string is at most 65,535 bytes.
const MaxTopicLength = 65535

// Topic and filter errors. They name the MQTT rule that was broken.
var (
	ErrEmptyTopic       = errors.New("topic is empty [MQTT-4.7.3-1]")
	ErrTopicTooLong     = errors.New("topic is longer than 65535 bytes [MQTT-1.5.4-1]")
	ErrTopicUTF8        = errors.New("topic is not valid UTF-8 [MQTT-1.5.4-1]")
	ErrTopicNUL         = errors.New("topic contains U+0000 [MQTT-1.5.4-2]")
	ErrTopicWildcard    = errors.New("topic name contains a wildcard [MQTT-3.3.2-2]")
	ErrFilterHash       = errors.New("'#' must be the last level and alone in it [MQTT-4.7.1-1]")
	ErrFilterPlus       = errors.New("'+' must occupy a whole level [MQTT-4.7.1-2]")
	ErrSharedFilter     = errors.New("malformed shared subscription: want $share/{group}/{filter} [MQTT-4.8.2-1]")
	ErrSharedGroupChars = errors.New("shared subscription group must not contain '/', '+' or '#' [MQTT-4.8.2-2]")
)

// Default topic limits: the gateway's own bounds, well inside MQTT's. A
// subscription's cost in mochi's index grows with levels × length (32,767
// levels took seconds under the index's lock), and the
// embedded retained store keys messages by topic (bbolt refuses keys over
// 32 KiB). EMQX also defaults to 128 levels; 4,096 bytes is far above any
// IoT topic tree seen in practice (AWS IoT allows 256).
const (
	DefaultMaxTopicLevels = 128
	DefaultMaxTopicLength = 4096
)

// Topic limit errors: the name or filter is well formed but over the
// gateway's limits (MQTT 5 reason codes 0x8F/0x90: "not accepted by this
// Server").
var (
	ErrTopicLevels = errors.New("topic has more levels than the gateway allows")
	ErrTopicLength = errors.New("topic is longer than the gateway allows")
)

// TopicLimits bound the topic names and filters the gateway accepts, in every
// protocol: MQTT topics, AMQP addresses and bridge subjects name the same
// topic space (docs/architecture.md, decision 3), so one rule serves all. Checks cost at
// most one pass over the string, and none when it is over MaxLength.
type TopicLimits struct {
	MaxLevels int // most levels ("a/b/c" has 3); 0 = DefaultMaxTopicLevels
	MaxLength int // most bytes; 0 = DefaultMaxTopicLength
}

func (l TopicLimits) levels() int {
	if l.MaxLevels <= 0 {
		return DefaultMaxTopicLevels
	}
	return l.MaxLevels
}

func (l TopicLimits) length() int {
	if l.MaxLength <= 0 {
		return DefaultMaxTopicLength
	}
	return min(l.MaxLength, MaxTopicLength)
}

// Effective is l with its defaults filled in.
func (l TopicLimits) Effective() TopicLimits {
	return TopicLimits{MaxLevels: l.levels(), MaxLength: l.length()}
}

// CheckTopic reports whether topic is within the limits; the error wraps
// ErrTopicLength or ErrTopicLevels. It does not check the grammar.
func (l TopicLimits) CheckTopic(topic string) error {
	if max := l.length(); len(topic) > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTopicLength, len(topic), max)
	}
	if n, max := strings.Count(topic, "/")+1, l.levels(); n > max {
		return fmt.Errorf("%w: %d levels, limit %d", ErrTopicLevels, n, max)
	}
	return nil
}

// CheckFilter is CheckTopic for a subscription filter. The levels of a
// shared subscription are those of its filter: $share/{group}/ adds none.
func (l TopicLimits) CheckFilter(filter string) error {
	if max := l.length(); len(filter) > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTopicLength, len(filter), max)
	}
	if _, f, ok := SplitShared(filter); ok {
		filter = f
	}
	if n, max := strings.Count(filter, "/")+1, l.levels(); n > max {
		return fmt.Errorf("%w: %d levels, limit %d", ErrTopicLevels, n, max)
	}
	return nil
}

// ValidateTopic is CheckTopic, then the grammar (ValidateTopic).
func (l TopicLimits) ValidateTopic(topic string) error {
	if err := l.CheckTopic(topic); err != nil {
		return err
	}
	return ValidateTopic(topic)
}

// ValidateFilter is CheckFilter, then the grammar (ValidateFilter).
func (l TopicLimits) ValidateFilter(filter string) error {
	if err := l.CheckFilter(filter); err != nil {
		return err
	}
	return ValidateFilter(filter)
}

// LimitReason names the limit err broke ("levels" or "length") for a
// metric label, or "" when err is not a limit error.
func LimitReason(err error) string {
	switch {
	case errors.Is(err, ErrTopicLevels):
		return "levels"
	case errors.Is(err, ErrTopicLength):
		return "length"
	}
	return ""
}

// ShortTopic is topic cut for a log line or an error text: at most 128 bytes
// and the full length, so that a 64 KiB topic cannot make a 64 KiB log line.
func ShortTopic(topic string) string { return Shorten(topic, 128) }

// Shorten cuts s to at most keep bytes, on a rune boundary, followed by
// "…(N bytes)" giving its full length. s is returned as is when it fits.
func Shorten(s string, keep int) string {
	if len(s) <= keep {
		return s
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

func validString(s string) error {
	switch {
	case s == "":
		return ErrEmptyTopic
	case len(s) > MaxTopicLength:
		return ErrTopicTooLong
	case !utf8.ValidString(s):
		return ErrTopicUTF8
	case strings.IndexByte(s, 0) >= 0:
		return ErrTopicNUL
	}
	return nil
}

// ValidateTopic checks a topic name a message is published to.
func ValidateTopic(topic string) error {
	if err := validString(topic); err != nil {
		return err
	}
	if strings.ContainsAny(topic, "+#") {
		return ErrTopicWildcard
	}
	return nil
}

// ValidateFilter checks a subscription filter, including the shared
// subscription form $share/{group}/{filter}.
func ValidateFilter(filter string) error {
	if err := validString(filter); err != nil {
		return err
	}
	if strings.HasPrefix(filter, sharePrefix) {
		group, f, ok := SplitShared(filter)
		if !ok {
			return ErrSharedFilter
		}
		if strings.ContainsAny(group, "+#") {
			return ErrSharedGroupChars
		}
		filter = f
	}
	for i := 0; ; {
		j := strings.IndexByte(filter[i:], '/')
		last := j < 0
		level := filter[i:]
		if !last {
			level = filter[i : i+j]
		}
		if strings.IndexByte(level, '#') >= 0 && (level != "#" || !last) {
			return ErrFilterHash
		}
		if strings.IndexByte(level, '+') >= 0 && level != "+" {
			return ErrFilterPlus
		}
		if last {
			return nil
		}
		i += j + 1
	}
}

const sharePrefix = "$share/"

// SplitShared splits $share/{group}/{filter} into its group and filter.
// ok is false when filter is not a well-formed shared subscription.
func SplitShared(filter string) (group, f string, ok bool) {
	if !strings.HasPrefix(filter, sharePrefix) {
		return "", filter, false
	}
	rest := filter[len(sharePrefix):]
	i := strings.IndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", filter, false
	}
	return rest[:i], rest[i+1:], true
}

// IsShared reports whether filter is a shared subscription filter.
func IsShared(filter string) bool {
	_, _, ok := SplitShared(filter)
	return ok
}

// HasWildcard reports whether filter contains '+' or '#'.
func HasWildcard(filter string) bool {
	return strings.ContainsAny(filter, "+#")
}

// Match reports whether topic matches filter under MQTT rules: '+' matches
// one level (possibly empty), '#' the parent level and any below it, and a
// leading wildcard does not match a topic starting with '$' [MQTT-4.7.2-1].
// Both arguments are assumed valid.
func Match(filter, topic string) bool {
	if len(topic) > 0 && topic[0] == '$' && len(filter) > 0 && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := cutLevel(filter)
		if fl == "#" {
			return true
		}
		tl, trest, tmore := cutLevel(topic)
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore || !tmore {
			if !fmore && !tmore {
				return true
			}
			// "a/#" matches "a" [MQTT-4.7.1-2].
			return !tmore && frest == "#"
		}
		filter, topic = frest, trest
	}
}

// cutLevel splits off the first level of a topic or filter.
func cutLevel(s string) (level, rest string, more bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}
