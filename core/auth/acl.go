package auth

import (
	"strings"
)

// Action is what a client does with a topic. Subscribe covers both the
// SUBSCRIBE (or AMQP attach) and each message delivered on it.
type Action uint8

const (
	Publish Action = 1 << iota
	Subscribe
)

func (a Action) String() string {
	switch a {
	case Publish:
		return "publish"
	case Subscribe:
		return "subscribe"
	case Publish | Subscribe:
		return "both"
	}
	return "none"
}

// Decision is the answer to a SUBSCRIBE filter.
type Decision uint8

const (
	// Deny: refuse the subscription (MQTT SUBACK 0x87, AMQP
	// amqp:unauthorized-access).
	Deny Decision = iota
	// Allow: every topic the filter matches may be read; deliver without
	// further checks.
	Allow
	// AllowPartly: the filter as a whole is allowed but some topics it
	// matches are denied; the front-end must ask Allowed(…, Subscribe,
	// topic) for each message delivered on it.
	AllowPartly
)

func (d Decision) String() string {
	return [...]string{"deny", "allow", "allow-partly"}[d]
}

// rule is one ACL rule of the file.
type rule struct {
	index   int    // position in the acl list, for messages
	filter  string // as written, placeholders and all
	deny    bool
	actions Action
	users   []string
	groups  []string
	pattern bool // filter holds %u or %c: substituted per check

	// Specificity of the filter (docs/security.md, "Which rule wins"):
	// literal levels (placeholders count as literal), then no '#', then
	// fewer '+'.
	literals int
	hasHash  bool
	plus     int
}

// rank orders two candidate rules: the higher rank wins. tier is 2 for a
// rule that names the user, 1 for one that applies through a group, 0 for
// one that applies to everyone.
type rank struct {
	literals int
	noHash   bool
	plus     int
	tier     int
}

func (r rank) cmp(o rank) int {
	switch {
	case r.literals != o.literals:
		return sign(r.literals - o.literals)
	case r.noHash != o.noHash:
		if r.noHash {
			return 1
		}
		return -1
	case r.plus != o.plus:
		return sign(o.plus - r.plus) // fewer '+' is more specific
	}
	return sign(r.tier - o.tier)
}

func sign(n int) int {
	switch {
	case n > 0:
		return 1
	case n < 0:
		return -1
	}
	return 0
}

// applies returns the rule's subject tier for id, or -1 when the rule does
// not apply to id.
func (r *rule) applies(id *Identity) int {
	if len(r.users) == 0 && len(r.groups) == 0 {
		return 0
	}
	if id.User == "" {
		return -1
	}
	for _, u := range r.users {
		if u == id.User {
			return 2
		}
	}
	for _, g := range r.groups {
		for _, h := range id.Groups {
			if g == h {
				return 1
			}
		}
	}
	return -1
}

func (r *rule) rank(tier int) rank {
	return rank{literals: r.literals, noHash: !r.hasHash, plus: r.plus, tier: tier}
}

// node is a level of the rule trie. Every rule sits at the node its filter
// leads to, so a check visits the nodes a topic can match (its literal path,
// the '+' branches, the placeholder levels) and never the rest: the cost
// grows with the rules that match, not with the rules in the file.
type node struct {
	lit   map[string]*node
	plus  *node
	pats  []patNode // levels holding %u or %c, compared after substitution
	hash  []*rule   // filters ending in '#' below this node
	exact []*rule   // filters ending at this node
}

type patNode struct {
	level string
	n     *node
}

// acl is the rule set of one file.
type acl struct {
	root         node
	rules        []*rule
	defaultAllow bool
}

func (a *acl) add(r *rule) {
	a.rules = append(a.rules, r)
	n := &a.root
	for rest, more := r.filter, true; more; {
		var level string
		level, rest, more = cutLevel(rest)
		switch {
		case level == "#":
			n.hash = append(n.hash, r)
			return
		case level == "+":
			if n.plus == nil {
				n.plus = &node{}
			}
			n = n.plus
		case strings.Contains(level, "%"):
			var next *node
			for _, p := range n.pats {
				if p.level == level {
					next = p.n
				}
			}
			if next == nil {
				next = &node{}
				n.pats = append(n.pats, patNode{level, next})
			}
			n = next
		default:
			if n.lit == nil {
				n.lit = map[string]*node{}
			}
			next := n.lit[level]
			if next == nil {
				next = &node{}
				n.lit[level] = next
			}
			n = next
		}
	}
	n.exact = append(n.exact, r)
}

func cutLevel(s string) (level, rest string, more bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// substitute reports whether the placeholder level pat, with %u and %c
// replaced, equals level. A placeholder whose value is empty or holds a
// '/', '+' or '#' never matches: an anonymous client, or a user named
// "+", gets nothing from a %u rule.
func substitute(pat, level, user, client string) bool {
	for pat != "" {
		i := strings.IndexByte(pat, '%')
		if i < 0 {
			return pat == level
		}
		if !strings.HasPrefix(level, pat[:i]) || i+1 >= len(pat) {
			return false
		}
		level = level[i:]
		var v string
		switch pat[i+1] {
		case 'u':
			v = user
		case 'c':
			v = client
		default:
			return false
		}
		if v == "" || strings.ContainsAny(v, "/+#") || !strings.HasPrefix(level, v) {
			return false
		}
		level = level[len(v):]
		pat = pat[i+2:]
	}
	return level == ""
}

// verdict is the best rule found so far for one check.
type verdict struct {
	found bool
	deny  bool
	rank  rank
}

// consider folds rule r (already known to match) into v.
func (v *verdict) consider(r *rule, tier int) {
	rk := r.rank(tier)
	if !v.found {
		*v = verdict{found: true, deny: r.deny, rank: rk}
		return
	}
	switch c := rk.cmp(v.rank); {
	case c > 0:
		v.deny, v.rank = r.deny, rk
	case c == 0 && r.deny:
		v.deny = true // deny wins on ties
	}
}

// check is one Allowed evaluation; it lives on the caller's stack.
type check struct {
	id       *Identity
	clientID string
	action   Action
	best     verdict
	examined int // rules looked at, for the test that the index works
}

func (c *check) rules(rs []*rule) {
	for _, r := range rs {
		c.examined++
		if r.actions&c.action == 0 {
			continue
		}
		if tier := r.applies(c.id); tier >= 0 {
			c.best.consider(r, tier)
		}
	}
}

// walk matches the topic levels left in rest against the trie below n.
// first is true at the root, where a wildcard does not match a topic that
// starts with '$' [MQTT-4.7.2-1].
func (c *check) walk(n *node, rest string, first bool) {
	dollar := first && strings.HasPrefix(rest, "$")
	if !dollar {
		c.rules(n.hash)
	}
	level, rest, more := cutLevel(rest)
	if next := n.lit[level]; next != nil {
		c.visit(next, rest, more)
	}
	if n.plus != nil && !dollar {
		c.visit(n.plus, rest, more)
	}
	for _, p := range n.pats {
		if substitute(p.level, level, c.id.User, c.clientID) {
			c.visit(p.n, rest, more)
		}
	}
}

// visit continues at n once a level matched: the topic ends there (its
// exact rules and "x/#" rules match) or goes on.
func (c *check) visit(n *node, rest string, more bool) {
	if !more {
		c.rules(n.exact)
		c.rules(n.hash) // "a/#" matches "a" [MQTT-4.7.1-2]
		return
	}
	c.walk(n, rest, false)
}

// Allowed reports whether id, connected as clientID, may perform action on
// topic (a topic name, no wildcards): publish to it, or receive a message
// published to it. The most specific matching rule decides, deny winning a
// tie; with none, the file's default policy.
func (s *Store) Allowed(id Identity, clientID string, action Action, topic string) bool {
	c := check{id: &id, clientID: clientID, action: action}
	c.walk(&s.acl.root, topic, true)
	if !c.best.found {
		return s.acl.defaultAllow
	}
	return !c.best.deny
}
