package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
)

// AMQPBridge is one remote AMQP 1.0 broker (bridge.amqp[i]): where it is,
// how to log in, and its rules.
type AMQPBridge struct {
	Name     string
	URL      string // amqp:// or amqps://; may hold user:password
	User     string // from the fields, else the URL
	Password string
	SASL     string // plain or anonymous; "" = plain when a user is given
	TLSCA    string
	TLSCert  string
	TLSKey   string
	Rules    []AMQPRule
	// WriterStall (writerStall) is how long a publisher's QoS 0 message
	// may wait for room in a rule's full queue before it is dropped and
	// counted (queue_full), as the NATS bridge's bridge.nats.writerStall:
	// 0 is DefaultWriterStall, negative no wait (the configuration's "0").
	WriterStall time.Duration
}

// AMQPRule carries messages between a local MQTT filter and one address of
// the remote broker. Outbound, Remote is the target address every matching
// message is sent to (the topic travels in the subject); inbound, Remote
// is the source address read (a queue, or on another Tolsey gateway a
// topic or filter).
type AMQPRule struct {
	Direction Direction // out or in
	Local     string
	Remote    string
	QoS       byte
}

// Name is how metrics and the admin API name the rule.
func (r *AMQPRule) Name(i int) string { return fmt.Sprintf("%d:%s", i, r.Local) }

// AMQPConfigError is a bad bridge.amqp value: Path is the part of the key
// after bridge.amqp ("[0].rules[1].local"), so that the configuration can
// name the key exactly.
type AMQPConfigError struct {
	Path string
	Msg  string
}

func (e *AMQPConfigError) Error() string { return "bridge.amqp" + e.Path + ": " + e.Msg }

// ParseAMQPBridges reads bridge.amqp: a JSON array (the configuration's
// form of the YAML list) of bridge objects, each checked. "" is none.
func ParseAMQPBridges(s string) ([]AMQPBridge, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		return nil, nil
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, &AMQPConfigError{Msg: "must be a list of bridge objects (YAML list, or a JSON array in env/flags): " + err.Error()}
	}
	out := make([]AMQPBridge, 0, len(raw))
	names := map[string]bool{}
	for i, o := range raw {
		b, err := parseAMQPBridge(i, o)
		if err != nil {
			return nil, err
		}
		if names[b.Name] {
			return nil, &AMQPConfigError{Path: fmt.Sprintf("[%d].name", i), Msg: fmt.Sprintf("%q is used by another bridge", b.Name)}
		}
		names[b.Name] = true
		out = append(out, b)
	}
	return out, nil
}

func sortedKeys(o map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error named is the same every run
	return keys
}

func parseAMQPBridge(i int, o map[string]json.RawMessage) (AMQPBridge, error) {
	var b AMQPBridge
	bad := func(field, format string, a ...any) (AMQPBridge, error) {
		return AMQPBridge{}, &AMQPConfigError{Path: fmt.Sprintf("[%d].%s", i, field), Msg: fmt.Sprintf(format, a...)}
	}
	for _, k := range sortedKeys(o) {
		var s string
		isStr := json.Unmarshal(o[k], &s) == nil
		switch k {
		case "name", "url", "user", "password", "sasl":
			if !isStr {
				return bad(k, "must be a string")
			}
			switch k {
			case "name":
				b.Name = s
			case "url":
				b.URL = s
			case "user":
				b.User = s
			case "password":
				b.Password = s
			case "sasl":
				b.SASL = s
			}
		case "tls":
			var t map[string]json.RawMessage
			if err := json.Unmarshal(o[k], &t); err != nil {
				return bad(k, "must be {ca, cert, key}")
			}
			for _, tk := range sortedKeys(t) {
				var v string
				if err := json.Unmarshal(t[tk], &v); err != nil {
					return bad("tls."+tk, "must be a string")
				}
				switch tk {
				case "ca":
					b.TLSCA = v
				case "cert":
					b.TLSCert = v
				case "key":
					b.TLSKey = v
				default:
					return bad("tls."+tk, "unknown field (ca, cert, key)")
				}
			}
		case "rules":
			var rs []map[string]json.RawMessage
			if err := json.Unmarshal(o[k], &rs); err != nil {
				return bad(k, "must be a list of rule objects")
			}
			for j, ro := range rs {
				r, err := parseAMQPRule(ro)
				if err != nil {
					var re *RuleError
					if errors.As(err, &re) {
						return bad(fmt.Sprintf("rules[%d].%s", j, re.Field), "%s", re.Msg)
					}
					return bad(fmt.Sprintf("rules[%d]", j), "%v", err)
				}
				b.Rules = append(b.Rules, r)
			}
		case "writerStall":
			var n float64
			if json.Unmarshal(o[k], &n) == nil && n == 0 {
				b.WriterStall = -1 // 0: no stall
				continue
			}
			d, err := time.ParseDuration(s)
			if !isStr || err != nil || d < 0 {
				return bad(k, "%s is not a duration (like 5ms, 100ms; 0 = drop at once)", o[k])
			}
			if b.WriterStall = d; d == 0 {
				b.WriterStall = -1
			}
		default:
			return bad(k, "unknown field (name, url, user, password, sasl, tls, rules, writerStall)")
		}
	}
	if b.Name == "" {
		return bad("name", "is required (it names the bridge in metrics and /api/v1/bridges)")
	}
	if strings.ContainsAny(b.Name, " \t\r\n,:\"") {
		return bad("name", "%q: letters, digits, '-', '_' and '.' only", b.Name)
	}
	if b.URL == "" {
		return bad("url", "is required (amqp://host:5672 or amqps://host:5671)")
	}
	u, err := url.Parse(b.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return bad("url", "%q is not an amqp:// or amqps:// URL with a host", redactURL(b.URL))
	}
	if b.User == "" && u.User != nil {
		b.User = u.User.Username()
		b.Password, _ = u.User.Password()
	}
	switch b.SASL {
	case "":
		if b.User != "" {
			b.SASL = "plain"
		} else {
			b.SASL = "anonymous"
		}
	case "plain":
		if b.User == "" {
			return bad("sasl", "plain needs a user (field user, or user:password@ in the URL)")
		}
	case "anonymous":
	default:
		return bad("sasl", "%q is not plain or anonymous", b.SASL)
	}
	if (b.TLSCert == "") != (b.TLSKey == "") {
		return bad("tls.cert", "tls.cert and tls.key go together")
	}
	if u.Scheme == "amqp" && (b.TLSCA != "" || b.TLSCert != "") {
		return bad("tls", "set for an amqp:// URL: use amqps:// for TLS")
	}
	if len(b.Rules) == 0 {
		return bad("rules", "none: a bridge needs at least one rule")
	}
	return b, nil
}

func parseAMQPRule(o map[string]json.RawMessage) (AMQPRule, error) {
	var r AMQPRule
	bad := func(field, format string, a ...any) (AMQPRule, error) {
		return AMQPRule{}, &RuleError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	for _, k := range sortedKeys(o) {
		var s string
		isStr := json.Unmarshal(o[k], &s) == nil
		switch k {
		case "direction", "local", "remote":
			if !isStr {
				return bad(k, "must be a string")
			}
			switch k {
			case "direction":
				r.Direction = Direction(s)
			case "local":
				r.Local = s
			case "remote":
				r.Remote = s
			}
		case "qos":
			var q int
			if err := json.Unmarshal(o[k], &q); err != nil || q < 0 || q > 1 {
				return bad(k, "%s is not 0 or 1", o[k])
			}
			r.QoS = byte(q)
		default:
			return bad(k, "unknown field (direction, local, remote, qos)")
		}
	}
	switch r.Direction {
	case Out, In:
	case "":
		return bad("direction", "is required: out or in")
	default:
		return bad("direction", "%q is not out or in", r.Direction)
	}
	if err := checkLocal(r.Local, "telemetry/#"); err != nil {
		return AMQPRule{}, err
	}
	if r.Remote == "" {
		return bad("remote", "is required (an address of the remote broker)")
	}
	for _, c := range r.Remote {
		if c < 0x20 || c == 0x7f {
			return bad("remote", "%q holds a control character", r.Remote)
		}
	}
	if r.Direction == Out && hasWildcard(r.Remote) {
		return bad("remote", "%q: an outbound rule sends to one address, without + or # levels", r.Remote)
	}
	return r, nil
}

// hasWildcard reports whether an address has an MQTT wildcard level.
func hasWildcard(addr string) bool {
	for _, l := range strings.Split(addr, "/") {
		if l == "+" || l == "#" {
			return true
		}
	}
	return false
}
