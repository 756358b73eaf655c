package bridge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tolsey/tolsey/core"
)

// The topic ⇄ subject mapping is the one the NATS server's MQTT support
// uses (nats-server v2.15.2, server/mqtt.go, mqttToNATSSubjectConversion
// and natsSubjectToMQTTTopic), so that a topic published here and the same
// topic published on NATS's own MQTT listener land on one subject. NATS
// states its rules a character at a time; they come to this, one MQTT
// level ⇄ one NATS token:
//
//	level separator '/'     ⇄ token separator '.'
//	'.' inside a level      ⇄ "//" inside a token   (spBv1.0 ⇄ spBv1//0)
//	an empty level          ⇄ the token "/"          (/a ⇄ /.a, a//b ⇄ a./.b, a/ ⇄ a./)
//	'+' level (filters)     ⇄ '*' token
//	'#' level (filters)     ⇄ '>' token, and "a/#" subscribes to "a.>" and "a"
//
// Where NATS accepts a name but the other side would read it differently,
// we refuse it (ErrUnmappable) instead of following NATS; docs/bridge.md
// lists each case and subject_nats_test.go shows what NATS does with it.

// MaxSubjectLength is the longest subject a Mapping sends. A NATS server
// closes a client connection whose protocol line is longer than its
// max_control_line (4,096 bytes by default; parser.go,
// overMaxControlLineLimit): one oversized subject would cut the bridge's
// connection and every message in flight on it. The line also carries the
// reply subject and two sizes, hence the margin.
const MaxSubjectLength = 3840

// Errors of the mapping. Each refusal is a *MappingError that errors.Is
// matches with ErrUnmappable; a name outside a rule is ErrOutsideRule.
var (
	// ErrUnmappable: the topic, filter or subject has no form the other
	// side would read back as the same name. The message is not sent
	// (counted as dropped, reason "unmappable").
	ErrUnmappable = errors.New("bridge: no faithful mapping between MQTT topic and NATS subject")
	// ErrOutsideRule: the topic does not match the rule's local filter, or
	// the subject its remote pattern.
	ErrOutsideRule = errors.New("bridge: name outside the rule")
)

// MappingError says which name could not be mapped, and why.
type MappingError struct {
	Name   string // the topic, filter or subject as given
	Reason string
	Err    error // the core topic error behind Reason, if there is one
}

func (e *MappingError) Error() string {
	return fmt.Sprintf("bridge: cannot map %q: %s", core.ShortTopic(e.Name), e.Reason)
}

// Is makes every MappingError match ErrUnmappable.
func (e *MappingError) Is(target error) bool { return target == ErrUnmappable }

// Unwrap returns the core topic error, if any (core.ErrTopicWildcard, …).
func (e *MappingError) Unwrap() error { return e.Err }

func unmappable(name, reason string, err error) error {
	return &MappingError{Name: name, Reason: reason, Err: err}
}

// TopicToSubject maps an MQTT topic name to the NATS subject NATS's own
// MQTT support publishes it on.
func TopicToSubject(topic string) (string, error) {
	return toSubject(topic, false)
}

// FilterToSubjects maps an MQTT topic filter to the NATS subjects that
// together match what it matches, as NATS's MQTT support subscribes them
// (processSubs): a filter ending in "/#" also matches its parent level
// [MQTT-4.7.1-2], which NATS's '>' does not, so "a/#" gives "a.>" and "a".
func FilterToSubjects(filter string) ([]string, error) {
	s, err := toSubject(filter, true)
	if err != nil {
		return nil, err
	}
	// NATS refuses MQTT subscriptions to its own MQTT state (processSubs:
	// "$MQTT.msgs.*" would bypass subscription permissions).
	if strings.HasPrefix(s, "$MQTT.") {
		return nil, unmappable(filter, "NATS keeps $MQTT. for its own MQTT state and refuses subscriptions to it", nil)
	}
	// mqttNeedSubForLevelUp: more than one token and ending in ".>".
	if len(s) >= 3 && strings.HasSuffix(s, ".>") {
		return []string{s, s[:len(s)-2]}, nil
	}
	return []string{s}, nil
}

// SubjectToTopic maps a NATS subject to the MQTT topic that TopicToSubject
// maps to it. A subject TopicToSubject never produces (a lone '/' inside a
// token, a wildcard token, an empty token) has no topic: NATS's own MQTT
// support would deliver it under a different name ("a/b" as topic "ab",
// natsSubjectToMQTTTopic), we refuse it.
func SubjectToTopic(subject string) (string, error) {
	return fromSubject(subject, false)
}

// SubjectToFilter maps a NATS subject pattern ('*', '>') to the MQTT filter
// FilterToSubjects maps to it.
func SubjectToFilter(pattern string) (string, error) {
	return fromSubject(pattern, true)
}

// badSubjectByte reports why c cannot be in a subject, or "".
func badSubjectByte(c byte) string {
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
		// mqttToNATSSubjectConversion refuses these: they would split the
		// NATS protocol line.
		return "whitespace has no place in a NATS subject"
	case c == 0x7f:
		// Refused by NATS too (its SubjectTree uses DEL internally).
		return "DEL (U+007F) is refused by NATS"
	case c < 0x20:
		// NATS lets these through (the test shows one), but MQTT says a
		// string SHOULD NOT hold them (MQTT 5 §1.5.4), and a subject with
		// one cannot be typed, logged or matched by eye: refused here.
		return fmt.Sprintf("control character U+%04X", c)
	}
	return ""
}

// toSubject maps a topic (filter false) or a filter (filter true).
func toSubject(name string, filter bool) (string, error) {
	if filter {
		if err := core.ValidateFilter(name); err != nil {
			return "", unmappable(name, "not an MQTT topic filter: "+err.Error(), err)
		}
		if core.IsShared(name) {
			return "", unmappable(name, "a shared subscription is the gateway's own: NATS has no such subject", nil)
		}
	} else if err := core.ValidateTopic(name); err != nil {
		return "", unmappable(name, "not an MQTT topic name: "+err.Error(), err)
	}
	plain := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if why := badSubjectByte(c); why != "" {
			return "", unmappable(name, why, nil)
		}
		if c == '/' || c == '.' || c == '+' || c == '#' {
			plain = false
		}
	}
	if plain && name != "*" && name != ">" {
		// One level, nothing to convert: the subject is the topic, and no
		// copy is made (as in mqttToNATSSubjectConversion).
		return name, nil
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	if err := appendSubject(&b, name, name); err != nil {
		return "", err
	}
	return b.String(), nil
}

// appendSubject writes the subject of levels, a valid topic or filter (or
// the part of one after a prefix; "" is then one empty level) whose bytes
// have been checked; name is the whole name, for errors.
func appendSubject(b *strings.Builder, levels, name string) error {
	for rest, more := levels, true; more; {
		var level string
		level, rest, more = cut(rest, '/')
		switch level {
		case "":
			b.WriteByte('/')
		case "+":
			b.WriteByte('*')
		case "#":
			b.WriteByte('>')
		case "*", ">":
			// NATS's MQTT support passes these through, and the subject
			// becomes a wildcard: an MQTT filter "a/*", which matches the
			// one topic "a/*", would match every "a/x" there.
			return unmappable(name, fmt.Sprintf("the level %q would be a NATS wildcard", level), nil)
		default:
			for {
				i := strings.IndexByte(level, '.')
				if i < 0 {
					b.WriteString(level)
					break
				}
				b.WriteString(level[:i])
				b.WriteString("//")
				level = level[i+1:]
			}
		}
		if more {
			b.WriteByte('.')
		}
	}
	return nil
}

// fromSubject maps a subject (pattern false) or a subject pattern.
func fromSubject(subject string, pattern bool) (string, error) {
	if subject == "" {
		return "", unmappable(subject, "empty subject", nil)
	}
	plain := true
	for i := 0; i < len(subject); i++ {
		c := subject[i]
		if why := badSubjectByte(c); why != "" {
			return "", unmappable(subject, why, nil)
		}
		if c == '.' || c == '/' || c == '+' || c == '#' {
			plain = false
		}
	}
	if plain && subject != "*" && subject != ">" {
		if err := core.ValidateTopic(subject); err != nil {
			return "", unmappable(subject, "not an MQTT topic name: "+err.Error(), err)
		}
		return subject, nil
	}
	var b strings.Builder
	b.Grow(len(subject))
	if err := appendTopic(&b, subject, subject, pattern); err != nil {
		return "", err
	}
	topic := b.String()
	var err error
	if pattern {
		err = core.ValidateFilter(topic)
	} else {
		err = core.ValidateTopic(topic)
	}
	if err != nil {
		return "", unmappable(subject, fmt.Sprintf("its topic %q is not valid MQTT: %v", core.ShortTopic(topic), err), err)
	}
	return topic, nil
}

// appendTopic writes the topic (or filter, when pattern) of tokens, a
// subject or the part of one after a prefix, whose bytes have been
// checked; name is the whole subject, for errors. It accepts exactly the
// subjects appendSubject writes.
func appendTopic(b *strings.Builder, tokens, name string, pattern bool) error {
	for rest, more := tokens, true; more; {
		var tok string
		tok, rest, more = cut(rest, '.')
		switch tok {
		case "":
			return unmappable(name, "empty token (NATS refuses it)", nil)
		case "/":
			// An empty level.
		case "*":
			if !pattern {
				return unmappable(name, "'*' is a wildcard: a message subject has none", nil)
			}
			b.WriteByte('+')
		case ">":
			if !pattern {
				return unmappable(name, "'>' is a wildcard: a message subject has none", nil)
			}
			if more {
				return unmappable(name, "'>' must be the last token (NATS refuses it elsewhere)", nil)
			}
			b.WriteByte('#')
		default:
			if strings.IndexByte(tok, '/') < 0 && strings.IndexByte(tok, '+') < 0 && strings.IndexByte(tok, '#') < 0 {
				b.WriteString(tok)
				break
			}
			for i := 0; i < len(tok); i++ {
				switch c := tok[i]; c {
				case '/':
					if i+1 == len(tok) || tok[i+1] != '/' {
						// natsSubjectToMQTTTopic drops such a '/' ("a/b"
						// reaches MQTT as "ab"): no topic maps here.
						return unmappable(name, "a '/' that is not part of \"//\" (a '.' in the topic) or a token \"/\" (an empty level)", nil)
					}
					b.WriteByte('.')
					i++
				case '+', '#':
					// A literal here; as a topic level it would be a
					// wildcard, or make the topic invalid.
					return unmappable(name, fmt.Sprintf("%q is an MQTT wildcard character", c), nil)
				default:
					b.WriteByte(c)
				}
			}
		}
		if more {
			b.WriteByte('/')
		}
	}
	return nil
}

// cut splits s at the first sep; more reports whether there was one.
func cut(s string, sep byte) (head, tail string, more bool) {
	if i := strings.IndexByte(s, sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// Mapping is one bridge rule's pair of names, built once per rule: an MQTT
// filter in our topic space (local) and a NATS subject pattern (remote)
// whose literal prefixes may differ and whose rest, from the first
// wildcard on, is the same name mapped as above. With local "sensors/#" and
// remote "iot.sensors.>", topic "sensors/room1/temp" is subject
// "iot.sensors.room1.temp", and "sensors" (which "#" also matches) is
// "iot.sensors". Without wildcards it is one topic ⇄ one subject.
//
// A Mapping is immutable and safe for concurrent use.
type Mapping struct {
	local, remote string
	// lpre and rpre are the literal levels and tokens before the first
	// wildcard, with the separator that follows them ("sensors/",
	// "iot.sensors."); "" when the name starts with a wildcard. The
	// separator tells "/#" (prefix: one empty level) from "#" (none).
	lpre, rpre string
	exact      bool     // no wildcards: lpre and rpre are unused
	subjects   []string // what an inbound rule subscribes to
}

// NewMapping checks a rule's local filter and remote subject pattern and
// builds their Mapping. The error says which side is wrong and why, for
// the configuration error that names the rule's key.
func NewMapping(local, remote string) (*Mapping, error) {
	if err := core.ValidateFilter(local); err != nil {
		return nil, fmt.Errorf("local filter %q: %w", local, err)
	}
	if core.IsShared(local) {
		return nil, fmt.Errorf("local filter %q: a bridge rule cannot be a shared subscription", local)
	}
	if err := validPattern(remote); err != nil {
		return nil, fmt.Errorf("remote subject %q: %w", remote, err)
	}
	if first, _, _ := cut(remote, '.'); first == "$MQTT" {
		return nil, fmt.Errorf("remote subject %q: $MQTT. holds NATS's own MQTT state; a rule must not read or write it", remote)
	}
	m := &Mapping{local: local, remote: remote}

	// ValidateFilter made every '+' and '#' a whole level.
	lwild := strings.IndexAny(local, "+#")
	rwild := -1
	for i := 0; i < len(remote); i++ {
		if (remote[i] == '*' || remote[i] == '>') && (i == 0 || remote[i-1] == '.') &&
			(i+1 == len(remote) || remote[i+1] == '.') {
			rwild = i
			break
		}
	}
	if lwild < 0 {
		if rwild >= 0 {
			return nil, fmt.Errorf("remote subject %q has a wildcard and local filter %q has none", remote, local)
		}
		if _, err := TopicToSubject(local); err != nil {
			return nil, fmt.Errorf("local filter %q: %w", local, err)
		}
		m.exact = true
		m.subjects = []string{remote}
		return m, nil
	}
	tail, err := toSubject(local[lwild:], true)
	if err != nil {
		return nil, fmt.Errorf("local filter %q: %w", local, err)
	}
	if rwild < 0 || remote[rwild:] != tail {
		return nil, fmt.Errorf("remote subject %q does not fit local filter %q: from the first wildcard on, the remote must be %q (only the literal prefixes may differ)", remote, local, tail)
	}
	m.lpre, m.rpre = local[:lwild], remote[:rwild]
	if m.lpre != "" {
		// The prefix's levels must map too ("a/*/#" must not).
		if _, err := toSubject(m.lpre+"x", false); err != nil {
			return nil, fmt.Errorf("local filter %q: %w", local, err)
		}
	}
	m.subjects = []string{remote}
	// As FilterToSubjects: "a/#" matches "a", which NATS's "x.a.>" does
	// not. Not for "/#": its parent would be the empty topic.
	if strings.HasSuffix(local, "/#") && len(local) > 2 && strings.HasSuffix(remote, ".>") {
		m.subjects = append(m.subjects, remote[:len(remote)-2])
	}
	return m, nil
}

// validPattern checks NATS subject syntax: non-empty tokens, no whitespace
// or control bytes, '>' only last.
func validPattern(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	for i := 0; i < len(s); i++ {
		if why := badSubjectByte(s[i]); why != "" {
			return errors.New(why)
		}
	}
	for rest, more := s, true; more; {
		var tok string
		tok, rest, more = cut(rest, '.')
		if tok == "" {
			return errors.New("empty token")
		}
		if tok == ">" && more {
			return errors.New("'>' must be the last token")
		}
	}
	return nil
}

// Local is the rule's local MQTT filter.
func (m *Mapping) Local() string { return m.local }

// Remote is the rule's remote NATS subject pattern.
func (m *Mapping) Remote() string { return m.remote }

// Subjects are the NATS subjects an inbound rule subscribes to: the remote
// pattern, and its parent when the local filter ends in "/#" (see
// FilterToSubjects). The slice is shared: do not modify it.
func (m *Mapping) Subjects() []string { return m.subjects }

// Out maps a topic under the local filter to its subject under the remote
// pattern. It fails with ErrOutsideRule when the filter does not match the
// topic, and with an ErrUnmappable *MappingError when the subject would not
// come back as the topic (TopicToSubject), when a local "a/#" meets a
// remote ">" and the topic is "a" (no subject left), when an empty remote
// prefix would put the topic's tail in NATS's '$' namespace ($JS.API…,
// $SYS…: reached only by a rule that names it), or when the subject is
// longer than MaxSubjectLength.
func (m *Mapping) Out(topic string) (string, error) {
	if !core.Match(m.local, topic) {
		return "", fmt.Errorf("%w: topic %q is not under %q", ErrOutsideRule, core.ShortTopic(topic), m.local)
	}
	if m.exact {
		return m.remote, nil
	}
	if err := core.ValidateTopic(topic); err != nil {
		return "", unmappable(topic, "not an MQTT topic name: "+err.Error(), err)
	}
	for i := 0; i < len(topic); i++ {
		if why := badSubjectByte(topic[i]); why != "" {
			return "", unmappable(topic, why, nil)
		}
	}
	// The filter matched: the topic starts with lpre, or it is lpre without
	// its '/', the parent level a trailing "#" matches [MQTT-4.7.1-2].
	if !strings.HasPrefix(topic, m.lpre) {
		if m.rpre == "" {
			return "", unmappable(topic, fmt.Sprintf("the parent level of %q has no subject under %q", m.local, m.remote), nil)
		}
		return m.rpre[:len(m.rpre)-1], nil
	}
	tail := topic[len(m.lpre):]
	if m.rpre == "" && strings.HasPrefix(tail, "$") {
		return "", unmappable(topic, "its subject would be in NATS's '$' namespace, which only a rule naming it may reach", nil)
	}
	var b strings.Builder
	b.Grow(len(m.rpre) + len(tail) + 8)
	b.WriteString(m.rpre)
	if err := appendSubject(&b, tail, topic); err != nil {
		return "", err
	}
	if b.Len() > MaxSubjectLength {
		return "", unmappable(topic, fmt.Sprintf("its subject is %d bytes, over MaxSubjectLength (%d)", b.Len(), MaxSubjectLength), nil)
	}
	return b.String(), nil
}

// In maps a subject under the remote pattern to its topic under the local
// filter: the inverse of Out. It fails with ErrOutsideRule when the subject
// is not under the pattern (NATS's '$' subjects are under an empty remote
// prefix only if the rule names them), and with an ErrUnmappable
// *MappingError when no topic maps to the subject (SubjectToTopic).
func (m *Mapping) In(subject string) (string, error) {
	outside := func() error {
		return fmt.Errorf("%w: subject %q is not under %q", ErrOutsideRule, core.ShortTopic(subject), m.remote)
	}
	if m.exact {
		if subject != m.remote {
			return "", outside()
		}
		return m.local, nil
	}
	var b strings.Builder
	switch {
	case m.rpre == "" && strings.HasPrefix(subject, "$"):
		return "", outside()
	case strings.HasPrefix(subject, m.rpre):
		tail := subject[len(m.rpre):]
		if tail == "" {
			return "", unmappable(subject, "empty token (NATS refuses it)", nil)
		}
		for i := 0; i < len(tail); i++ {
			if why := badSubjectByte(tail[i]); why != "" {
				return "", unmappable(subject, why, nil)
			}
		}
		b.Grow(len(m.lpre) + len(tail))
		b.WriteString(m.lpre)
		if err := appendTopic(&b, tail, subject, false); err != nil {
			return "", err
		}
	case m.rpre != "" && subject == m.rpre[:len(m.rpre)-1] && m.lpre != "":
		// The parent: "iot.sensors" for "iot.sensors.>" is "sensors".
		b.WriteString(m.lpre[:len(m.lpre)-1])
	default:
		return "", outside()
	}
	topic := b.String()
	if err := core.ValidateTopic(topic); err != nil {
		return "", unmappable(subject, fmt.Sprintf("its topic %q is not valid MQTT: %v", core.ShortTopic(topic), err), err)
	}
	if !core.Match(m.local, topic) {
		return "", outside()
	}
	return topic, nil
}
