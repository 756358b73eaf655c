package auth

import (
	"strings"

	"github.com/tolsey/tolsey/core"
)

// Subscribe decides a SUBSCRIBE filter (MQTT filter grammar, no $share
// prefix: the front-end strips it) for id connected as clientID:
//
//   - the filter's own verdict comes from the rules that cover it (match
//     every topic it matches), most specific first, deny winning ties, else
//     the default policy; a denied filter is Deny even if a narrower rule
//     allows part of it (subscribe to that part instead);
//   - an allowed filter is AllowPartly when a rule that overlaps it without
//     covering it denies subscribe and ranks at least as high as the rule
//     that allowed it: those topics are filtered message by message.
//
// The cost is that of the trie nodes the filter can reach: a filter ending
// in '#' visits the subtree below it. Subscriptions are rare next to
// deliveries, which Allowed checks.
func (s *Store) Subscribe(id Identity, clientID string, filter string) Decision {
	if core.ValidateFilter(filter) != nil || core.IsShared(filter) {
		return Deny // the front-end refuses it before asking; never grant it
	}
	o := overlap{id: &id, clientID: clientID}
	o.walk(&s.acl.root, filter, true)

	var base verdict
	for _, r := range o.found {
		if tier := r.applies(&id); tier >= 0 && covers(r, filter, &id, clientID) {
			base.consider(r, tier)
		}
	}
	if base.found && base.deny || !base.found && !s.acl.defaultAllow {
		return Deny
	}
	for _, r := range o.found {
		if !r.deny {
			continue
		}
		tier := r.applies(&id)
		if tier < 0 || covers(r, filter, &id, clientID) {
			continue
		}
		if !base.found || r.rank(tier).cmp(base.rank) >= 0 {
			return AllowPartly
		}
	}
	return Allow
}

// overlap collects the subscribe rules whose filters share at least one
// topic with a SUBSCRIBE filter.
type overlap struct {
	id       *Identity
	clientID string
	found    []*rule
}

func (o *overlap) add(rs []*rule) {
	for _, r := range rs {
		if r.actions&Subscribe != 0 {
			o.found = append(o.found, r)
		}
	}
}

// walk matches the filter levels left in rest against the trie below n;
// first as in check.walk.
func (o *overlap) walk(n *node, rest string, first bool) {
	level, rest, more := cutLevel(rest)
	// A leading wildcard in the rule or the filter never meets a '$'
	// topic [MQTT-4.7.2-1].
	dollar := first && strings.HasPrefix(level, "$")
	if !dollar {
		o.add(n.hash)
	}
	if level == "#" {
		o.subtree(n, first)
		return
	}
	if level == "+" {
		for l, next := range n.lit {
			if !(first && strings.HasPrefix(l, "$")) {
				o.visit(next, rest, more)
			}
		}
	} else if next := n.lit[level]; next != nil {
		o.visit(next, rest, more)
	}
	if n.plus != nil && !dollar {
		o.visit(n.plus, rest, more)
	}
	for _, p := range n.pats {
		if level == "+" && o.valid(p.level) || substitute(p.level, level, o.id.User, o.clientID) {
			o.visit(p.n, rest, more)
		}
	}
}

func (o *overlap) visit(n *node, rest string, more bool) {
	if !more {
		o.add(n.exact)
		o.add(n.hash)
		return
	}
	o.walk(n, rest, false)
}

// subtree adds every rule below n, and those ending exactly at n: a
// filter's '#' meets them all (but '$' topics at the root). n's own '#'
// rules the caller added already.
func (o *overlap) subtree(n *node, first bool) {
	o.add(n.exact)
	down := func(c *node) {
		o.add(c.hash)
		o.subtree(c, false)
	}
	for l, next := range n.lit {
		if !(first && strings.HasPrefix(l, "$")) {
			down(next)
		}
	}
	if n.plus != nil {
		down(n.plus)
	}
	for _, p := range n.pats {
		if o.valid(p.level) {
			down(p.n)
		}
	}
}

// valid reports whether a placeholder level can match anything for this
// client (its placeholders have usable values).
func (o *overlap) valid(pat string) bool {
	_, ok := expand(pat, o.id.User, o.clientID)
	return ok
}

// expand replaces %u and %c in s; false when a placeholder has no usable
// value (see substitute).
func expand(s, user, client string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '%')
		if i < 0 || i+1 >= len(s) {
			b.WriteString(s)
			return b.String(), true
		}
		b.WriteString(s[:i])
		var v string
		switch s[i+1] {
		case 'u':
			v = user
		case 'c':
			v = client
		}
		if v == "" || strings.ContainsAny(v, "/+#") {
			return "", false
		}
		b.WriteString(v)
		s = s[i+2:]
	}
}

// covers reports whether rule r's filter, placeholders substituted,
// matches every topic that filter matches.
func covers(r *rule, filter string, id *Identity, clientID string) bool {
	rf, ok := expand(r.filter, id.User, clientID)
	if !ok {
		return false
	}
	if (rf[0] == '+' || rf[0] == '#') && filter[0] == '$' {
		return false
	}
	for {
		rl, rrest, rmore := cutLevel(rf)
		if rl == "#" {
			return true
		}
		fl, frest, fmore := cutLevel(filter)
		switch {
		case fl == "#":
			return false
		case rl == "+":
		case rl != fl:
			return false
		}
		if !rmore || !fmore {
			if !rmore && !fmore {
				return true
			}
			return !fmore && rrest == "#" // "a/#" covers "a"
		}
		rf, filter = rrest, frest
	}
}
