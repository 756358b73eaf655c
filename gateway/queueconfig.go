package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/core/queue/match"
)

// QueuesConfig is queues.*.
type QueuesConfig struct {
	Declare    []queue.Config    // queues.declare, checked
	Addresses  []queue.Alternate // queues.addresses, checked against Declare
	Backend    string            // memory | embedded | redis
	AutoCreate bool
	// V311Full is what the MQTT front-end does with a 3.1.1 publish that
	// a matching queue refuses: "disconnect" or "drop".
	V311Full string
	Limits   queue.Limits
	Window   int
	// MaxLog is queues.embedded.maxLog: the embedded store's log not yet
	// applied while its checkpoints fail, beyond which appends are refused.
	MaxLog int64
}

// buildQueuesConfig reads queues.*; every declared queue is checked here,
// so that a mistake stops the gateway at start naming the key down to the
// field (queues.declare[2].access).
func buildQueuesConfig(c *Config, get func(string) string, num func(string) int64) error {
	q := &c.Queues
	q.Backend = get("queues.backend")
	q.AutoCreate = get("queues.autoCreate") == "true"
	q.V311Full = get("queues.v311Full")
	q.Limits = queue.Limits{
		MaxQueues:    int(num("queues.maxQueues")),
		MaxTemporary: int(num("queues.maxTemporary")),
		MaxMessages:  int(num("queues.maxMessages")),
		MaxBytes:     num("queues.maxBytes"),
	}
	q.Window = int(num("queues.window"))
	if q.MaxLog = num("queues.embedded.maxLog"); q.MaxLog < 1<<20 {
		return &ConfigError{Key: "queues.embedded.maxLog", Msg: "must be at least 1MiB"}
	}
	declare := get("queues.declare")
	// 0 would mean "the engine's default" to queue.Limits: refused, so that
	// a value given is the value used.
	for _, k := range []struct {
		key string
		v   int64
	}{
		{"queues.maxQueues", int64(q.Limits.MaxQueues)}, {"queues.maxTemporary", int64(q.Limits.MaxTemporary)},
		{"queues.maxMessages", int64(q.Limits.MaxMessages)}, {"queues.maxBytes", q.Limits.MaxBytes},
		{"queues.window", int64(q.Window)},
	} {
		if k.v < 1 {
			return &ConfigError{Key: k.key, Msg: "must be at least 1"}
		}
	}
	limits := core.TopicLimits{MaxLevels: c.MQTT.MaxTopicLevels, MaxLength: c.MQTT.MaxTopicLength}
	var err error
	if q.Declare, err = parseQueueList(declare, limits); err != nil {
		return err
	}
	if len(q.Declare) > q.Limits.MaxQueues {
		return &ConfigError{Key: "queues.declare", Msg: fmt.Sprintf("%d queues, more than queues.maxQueues (%d)", len(q.Declare), q.Limits.MaxQueues)}
	}
	q.Addresses, err = parseAddresses(get("queues.addresses"), q.Declare, limits)
	return err
}

// parseAddresses reads queues.addresses: a JSON array of {prefix,
// alternate}. An alternate must be a queue of queues.declare, since at
// start nothing else is known to exist; two entries may not name the same
// prefix ("orders" and "orders/" are the same one).
func parseAddresses(s string, declared []queue.Config, limits core.TopicLimits) ([]queue.Alternate, error) {
	const key = "queues.addresses"
	raw, err := objectList(key, s, "{prefix, alternate} objects")
	if raw == nil || err != nil {
		return nil, err
	}
	out := make([]queue.Alternate, 0, len(raw))
	prefixes := map[string]int{}
	for i, o := range raw {
		bad := func(field, format string, a ...any) error {
			return &ConfigError{Key: fmt.Sprintf("%s[%d].%s", key, i, field), Msg: fmt.Sprintf(format, a...)}
		}
		var a queue.Alternate
		for _, k := range []string{"alternate", "prefix"} {
			var v string
			if raw, ok := o[k]; !ok || json.Unmarshal(raw, &v) != nil || v == "" {
				return nil, bad(k, "is required: a string")
			}
			if k == "prefix" {
				a.Prefix = v
			} else {
				a.Queue = v
			}
		}
		for k := range o {
			if k != "prefix" && k != "alternate" {
				return nil, bad(k, "unknown field (prefix, alternate)")
			}
		}
		p := strings.TrimSuffix(a.Prefix, "/")
		if p == "" || core.HasWildcard(p) || core.ValidateTopic(p) != nil {
			return nil, bad("prefix", "%q is not a topic prefix of whole levels without wildcards (like orders/)", a.Prefix)
		}
		if err := limits.CheckTopic(p); err != nil {
			return nil, bad("prefix", "%q: %v (mqtt.maxTopicLevels, mqtt.maxTopicLength)", a.Prefix, err)
		}
		if j, dup := prefixes[p]; dup {
			return nil, bad("prefix", "%q is given already, at %s[%d]", a.Prefix, key, j)
		}
		prefixes[p] = i
		if !slices.ContainsFunc(declared, func(c queue.Config) bool { return c.Name == a.Queue }) {
			return nil, bad("alternate", "queue %q is not declared in queues.declare", a.Queue)
		}
		out = append(out, a)
	}
	return out, nil
}

// objectList reads a kindJSON key that holds a list of objects (what
// names them in the error); nil for an empty value.
func objectList(key, s, what string) ([]map[string]json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		return nil, nil
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, &ConfigError{Key: key, Msg: "must be a list of " + what + " (a YAML list, or a JSON array in env/flags): " + err.Error()}
	}
	return raw, nil
}

// parseQueueList reads queues.declare: a JSON array (the configuration's
// form of the YAML list) of queue objects. A dead-letter queue must be
// one of the list, since at start nothing else is known to exist.
func parseQueueList(s string, limits core.TopicLimits) ([]queue.Config, error) {
	const key = "queues.declare"
	raw, err := objectList(key, s, "queue objects")
	if raw == nil || err != nil {
		return nil, err
	}
	out := make([]queue.Config, 0, len(raw))
	names := map[string]int{}
	for i, o := range raw {
		cfg, ferr := parseQueueObject(o, limits)
		if ferr == nil && cfg.Name == "" {
			ferr = &queueFieldError{Field: "name", Msg: "is required"}
		}
		if ferr != nil {
			return nil, &ConfigError{Key: fmt.Sprintf("%s[%d]%s", key, i, ferr.path()), Msg: ferr.Msg}
		}
		if j, dup := names[cfg.Name]; dup {
			return nil, &ConfigError{Key: fmt.Sprintf("%s[%d].name", key, i), Msg: fmt.Sprintf("%q is declared already, at %s[%d]", cfg.Name, key, j)}
		}
		names[cfg.Name] = i
		out = append(out, cfg)
	}
	for i, cfg := range out {
		if _, ok := names[cfg.DeadLetter]; cfg.DeadLetter != "" && !ok {
			return nil, &ConfigError{Key: fmt.Sprintf("%s[%d].deadLetter", key, i), Msg: fmt.Sprintf("queue %q is not declared in %s", cfg.DeadLetter, key)}
		}
	}
	return out, nil
}

// queueFieldError is a bad field of a queue object: Field names it
// ("access", "subscriptions[1]"), "" for the object as a whole.
type queueFieldError struct {
	Field string
	Msg   string
}

func (e *queueFieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func (e *queueFieldError) path() string {
	if e.Field == "" {
		return ""
	}
	return "." + e.Field
}

// parseQueueObject reads one queue's configuration, as written in
// queues.declare and in the body of PUT /api/v1/queues/{name}: every field
// is checked here, with the rules the engine applies (queue.ValidName,
// match.Parse) and the gateway's topic limits, so that both say which
// field is wrong. maxBytes takes a number or a size ("10MiB"), ttl a
// duration ("30s") or 0.
func parseQueueObject(o map[string]json.RawMessage, limits core.TopicLimits) (queue.Config, *queueFieldError) {
	var c queue.Config
	bad := func(field, format string, a ...any) (queue.Config, *queueFieldError) {
		return queue.Config{}, &queueFieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error named is the same every run
	for _, k := range keys {
		v := o[k]
		switch k {
		case "name", "deadLetter":
			var s string
			if json.Unmarshal(v, &s) != nil {
				return bad(k, "must be a string")
			}
			if err := queue.ValidName(s); err != nil && (k == "name" || s != "") {
				return bad(k, "%s", strings.TrimPrefix(err.Error(), queue.ErrInvalid.Error()+": "))
			}
			if k == "name" {
				c.Name = s
			} else {
				c.DeadLetter = s
			}
		case "subscriptions":
			if json.Unmarshal(v, &c.Subscriptions) != nil {
				return bad(k, "must be a list of filters")
			}
			for i, f := range c.Subscriptions {
				field := fmt.Sprintf("%s[%d]", k, i)
				if _, err := match.Parse(f); err != nil {
					return bad(field, "%v", err)
				}
				if err := limits.CheckFilter(strings.TrimPrefix(f, "!")); err != nil {
					return bad(field, "%q: %v (mqtt.maxTopicLevels, mqtt.maxTopicLength)", f, err)
				}
			}
		case "access":
			var s string
			if json.Unmarshal(v, &s) != nil || (s != string(queue.Exclusive) && s != string(queue.NonExclusive)) {
				return bad(k, "%s is not exclusive or non-exclusive", v)
			}
			c.Access = queue.Access(s)
		case "maxMessages", "maxDeliveries":
			var n int
			if json.Unmarshal(v, &n) != nil || n < 0 {
				return bad(k, "%s is not a non-negative whole number", v)
			}
			if k == "maxMessages" {
				c.MaxMessages = n
			} else {
				c.MaxDeliveries = n
			}
		case "maxBytes":
			var n int64
			if json.Unmarshal(v, &n) != nil || n < 0 {
				var s string
				var err error
				if json.Unmarshal(v, &s) != nil {
					return bad(k, "%s is not a byte count (a number, or a size such as 10MiB)", v)
				}
				if n, err = parseBytes(strings.TrimSpace(s)); err != nil {
					return bad(k, "%s is not a byte count (a number, or a size such as 10MiB)", v)
				}
			}
			c.MaxBytes = n
		case "ttl":
			var s string
			if json.Unmarshal(v, &s) != nil {
				var n int
				if json.Unmarshal(v, &n) != nil || n != 0 {
					return bad(k, "%s is not a duration (like 30s, 5m, 24h)", v)
				}
				s = "0s"
			}
			d, err := time.ParseDuration(normDuration(strings.TrimSpace(s)))
			if err != nil || d < 0 {
				return bad(k, "%s is not a duration (like 30s, 5m, 24h)", v)
			}
			c.TTL = queue.Duration(d)
		default:
			return bad(k, "unknown field (name, subscriptions, access, maxMessages, maxBytes, ttl, deadLetter, maxDeliveries)")
		}
	}
	if c.Access == "" {
		c.Access = queue.NonExclusive
	}
	if c.DeadLetter != "" && c.DeadLetter == c.Name {
		return bad("deadLetter", "a queue cannot be its own dead-letter queue")
	}
	return c, nil
}
