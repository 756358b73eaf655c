package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tolsey/tolsey/core"
)

// Direction says which way a rule carries messages.
type Direction string

// The directions a rule can take.
const (
	Out  Direction = "out"  // our topics → the remote
	In   Direction = "in"   // the remote → our topics
	Both Direction = "both" // both ways (loop prevention keeps each message to one hop)
)

// Outbound reports whether the rule sends our messages to the remote.
func (d Direction) Outbound() bool { return d == Out || d == Both }

// Inbound reports whether the rule brings the remote's messages in.
func (d Direction) Inbound() bool { return d == In || d == Both }

// JetStream is a rule's JetStream setting. Outbound, Enabled alone is
// enough (publish with ack and Nats-Msg-Id de-duplication; the stream on the
// subjects is the operator's). Inbound needs Stream and Durable: a durable
// consumer, acknowledged after our router took each message.
type JetStream struct {
	Enabled bool
	Stream  string
	Durable string
}

// UnmarshalJSON takes `true`/`false` or `{"stream": S, "durable": D}`, as
// the configuration writes it.
func (j *JetStream) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case "true", "false":
		*j = JetStream{Enabled: string(b) == "true"}
		return nil
	case "null":
		*j = JetStream{}
		return nil
	}
	var o map[string]json.RawMessage
	if err := json.Unmarshal(b, &o); err != nil {
		return fmt.Errorf("must be true, false or {stream, durable}")
	}
	*j = JetStream{Enabled: true}
	for k, v := range o {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("%s must be a string", k)
		}
		switch k {
		case "stream":
			j.Stream = s
		case "durable":
			j.Durable = s
		default:
			return fmt.Errorf("unknown field %q (stream, durable)", k)
		}
	}
	return nil
}

// Rule is one bridge rule: messages on Local (an MQTT filter in our topic
// space) travel to and from Remote (a NATS subject pattern), their prefixes
// remapped both ways.
type Rule struct {
	Direction Direction
	Local     string
	Remote    string
	QoS       byte
	JetStream JetStream
}

// Name is how metrics and the admin API name the rule: its position and
// local filter, stable as long as the configuration is.
func (r *Rule) Name(i int) string { return fmt.Sprintf("%d:%s", i, r.Local) }

// RuleError is a bad rule: Index is its position in the list, Field the
// rule field at fault ("" for the rule as a whole), so that configuration
// errors can name the key exactly (bridge.nats.rules[2].local).
type RuleError struct {
	Index int
	Field string
	Msg   string
}

func (e *RuleError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("rules[%d]: %s", e.Index, e.Msg)
	}
	return fmt.Sprintf("rules[%d].%s: %s", e.Index, e.Field, e.Msg)
}

// ParseRules reads a JSON array of rule objects (the configuration's form of
// the YAML list) and checks each rule. An empty string is no rules.
func ParseRules(s string) ([]Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, &RuleError{Index: -1, Msg: "must be a list of rule objects (YAML list, or a JSON array in env/flags): " + err.Error()}
	}
	rules := make([]Rule, 0, len(raw))
	for i, o := range raw {
		r, err := parseRule(i, o)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(i int, o map[string]json.RawMessage) (Rule, error) {
	r := Rule{QoS: 0}
	bad := func(field, format string, a ...any) (Rule, error) {
		return Rule{}, &RuleError{Index: i, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error named is the same every run
	str := func(k string) (string, error) {
		var s string
		if err := json.Unmarshal(o[k], &s); err != nil {
			return "", fmt.Errorf("must be a string")
		}
		return s, nil
	}
	for _, k := range keys {
		switch k {
		case "direction":
			s, err := str(k)
			if err != nil {
				return bad(k, "%v", err)
			}
			r.Direction = Direction(s)
		case "local":
			s, err := str(k)
			if err != nil {
				return bad(k, "%v", err)
			}
			r.Local = s
		case "remote":
			s, err := str(k)
			if err != nil {
				return bad(k, "%v", err)
			}
			r.Remote = s
		case "qos":
			var q int
			if err := json.Unmarshal(o[k], &q); err != nil || q < 0 || q > 1 {
				return bad(k, "%s is not 0 or 1", o[k])
			}
			r.QoS = byte(q)
		case "jetstream":
			if err := r.JetStream.UnmarshalJSON(o[k]); err != nil {
				return bad(k, "%v", err)
			}
		default:
			return bad(k, "unknown field (direction, local, remote, qos, jetstream)")
		}
	}
	if err := r.check(); err != nil {
		var re *RuleError
		if errors.As(err, &re) {
			re.Index = i
		}
		return Rule{}, err
	}
	return r, nil
}

// check is the rule's own consistency.
func (r *Rule) check() error {
	bad := func(field, format string, a ...any) error {
		return &RuleError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	switch r.Direction {
	case Out, In, Both:
	case "":
		return bad("direction", "is required: out, in or both")
	default:
		return bad("direction", "%q is not out, in or both", r.Direction)
	}
	if err := checkLocal(r.Local, "sensors/#"); err != nil {
		return err
	}
	if r.Remote == "" {
		return bad("remote", "is required (a NATS subject such as iot.sensors.>)")
	}
	if err := checkSubjectPattern(r.Remote); err != nil {
		return bad("remote", "%q is not a NATS subject: %v", r.Remote, err)
	}
	if wildcards(r.Local) != wildcardsSubject(r.Remote) {
		return bad("remote", "%q must have the same wildcards in the same order as local %q (+ as *, # as >)", r.Remote, r.Local)
	}
	// The mapping's own checks ($MQTT., what has no subject) name the side.
	if _, err := NewMapping(r.Local, r.Remote); err != nil {
		field := "remote"
		if strings.HasPrefix(err.Error(), "local") {
			field = "local"
		}
		return bad(field, "%v", err)
	}
	js := r.JetStream
	if js.Enabled && r.QoS == 0 {
		return bad("jetstream", "needs qos: 1 (JetStream is at least once; qos 0 rules are core NATS, at most once)")
	}
	if js.Enabled && r.Direction.Inbound() && (js.Stream == "" || js.Durable == "") {
		return bad("jetstream", "an inbound JetStream rule needs {stream, durable}: the durable consumer it reads")
	}
	if r.Direction == Both && js.Enabled {
		return bad("direction", "a JetStream rule is out or in, not both (the stream would feed back what it stores)")
	}
	return nil
}

// checkSubjectPattern checks the NATS subject grammar: dot-separated
// non-empty tokens without white space, "*" a whole token, ">" a whole last
// token.
func checkSubjectPattern(s string) error {
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("empty token")
		case strings.ContainsAny(t, " \t\r\n"):
			return fmt.Errorf("white space in token %q", t)
		case t == ">" && i != len(toks)-1:
			return fmt.Errorf("> must be the last token")
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("wildcard inside token %q", t)
		}
	}
	return nil
}

// wildcards is the sequence of wildcards of an MQTT filter, as subject
// wildcards, so a rule's two sides can be compared.
func wildcards(filter string) string {
	var b strings.Builder
	for _, l := range strings.Split(filter, "/") {
		switch l {
		case "+":
			b.WriteByte('*')
		case "#":
			b.WriteByte('>')
		}
	}
	return b.String()
}

func wildcardsSubject(subject string) string {
	var b strings.Builder
	for _, t := range strings.Split(subject, ".") {
		if t == "*" || t == ">" {
			b.WriteString(t)
		}
	}
	return b.String()
}

// checkLocal checks a rule's local filter (NATS and AMQP rules alike);
// example goes in the message for a missing one.
func checkLocal(local, example string) error {
	bad := func(format string, a ...any) error {
		return &RuleError{Field: "local", Msg: fmt.Sprintf(format, a...)}
	}
	switch {
	case local == "":
		return bad("is required (an MQTT filter such as %s)", example)
	case core.ValidateFilter(local) != nil:
		return bad("%q is not an MQTT filter: %v", local, core.ValidateFilter(local))
	case core.IsShared(local):
		return bad("%q: a shared subscription cannot be bridged", local)
	}
	return nil
}
