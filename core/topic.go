package core

import (
	"errors"
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
