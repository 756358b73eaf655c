package auth

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tolsey/tolsey/core"
)

// exampleFile is the example users file of docs/security.md, with real hashes.
func exampleFile(t testing.TB) string {
	t.Helper()
	alice, err := HashBcrypt("alice-pw", 4)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
users:
  - {name: alice, password: %q, groups: [devices]}
  - {name: ops, password: %q, groups: [admin]}
  - {name: bob, password: %q}
acl:
  - {allow: [publish, subscribe], topic: "devices/%%u/#", groups: [devices]}
  - {deny: [subscribe], topic: "test/nosubscribe"}             # applies to everyone
  - {allow: [subscribe], topic: "public/#"}
  - {allow: [publish, subscribe], topic: "#", users: [ops]}
default: deny
`, alice, testArgon2id("ops-pw"), alice)
}

// testArgon2id is a cheap argon2id hash (m=64 KiB, t=1) for tests.
func testArgon2id(pw string) string {
	h := &hash{time: 1, memory: 64, threads: 1, salt: []byte("saltsalt"), key: nil}
	return h.phc(pw)
}

func mustParse(t testing.TB, file string) *Store {
	t.Helper()
	s, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIssueExampleRules(t *testing.T) {
	s := mustParse(t, exampleFile(t))
	alice, _ := s.Lookup("alice")
	ops, _ := s.Lookup("ops")
	bob, _ := s.Lookup("bob")
	anon := Identity{}
	cases := []struct {
		who    string
		id     Identity
		action Action
		topic  string
		want   bool
	}{
		{"alice", alice, Publish, "devices/alice/temp", true},
		{"alice", alice, Subscribe, "devices/alice/temp", true},
		{"alice", alice, Publish, "devices/alice", true}, // "a/#" matches "a"
		{"alice", alice, Publish, "devices/bob/temp", false},
		{"alice", alice, Subscribe, "devices/bob/temp", false},
		{"bob (not in devices)", bob, Publish, "devices/bob/temp", false},
		{"alice", alice, Subscribe, "test/nosubscribe", false},
		{"ops", ops, Subscribe, "test/nosubscribe", false}, // more specific than ops's "#"
		{"anonymous", anon, Subscribe, "test/nosubscribe", false},
		{"ops", ops, Publish, "test/nosubscribe", true}, // the deny is for subscribe only
		{"alice", alice, Publish, "test/nosubscribe", false},
		{"alice", alice, Subscribe, "public/news", true},
		{"anonymous", anon, Subscribe, "public/news", true},
		{"alice", alice, Publish, "public/news", false},
		{"ops", ops, Publish, "anything/at/all", true},
		{"ops", ops, Subscribe, "devices/alice/temp", true},
		{"ops", ops, Publish, "$SYS/broker", false}, // '#' does not match '$' topics
		{"bob", bob, Publish, "other", false},       // default deny
		{"anonymous", anon, Publish, "devices//x", false},
	}
	for _, c := range cases {
		if got := s.Allowed(c.id, "c1", c.action, c.topic); got != c.want {
			t.Errorf("%s %s %q: %v, want %v", c.who, c.action, c.topic, got, c.want)
		}
	}

	subs := []struct {
		who    string
		id     Identity
		filter string
		want   Decision
	}{
		{"alice", alice, "devices/alice/#", Allow},
		{"alice", alice, "devices/alice/+", Allow},
		{"alice", alice, "devices/+/temp", Deny}, // no rule covers it: default
		{"alice", alice, "devices/bob/#", Deny},
		{"alice", alice, "test/nosubscribe", Deny},
		{"alice", alice, "#", Deny},
		{"anonymous", anon, "public/#", Allow},
		{"anonymous", anon, "public/+/x", Allow},
		{"anonymous", anon, "test/nosubscribe", Deny},
		{"ops", ops, "test/nosubscribe", Deny},
		{"ops", ops, "#", AllowPartly},      // but test/nosubscribe
		{"ops", ops, "test/+", AllowPartly}, // the same
		{"ops", ops, "+/nosubscribe", AllowPartly},
		{"ops", ops, "devices/#", Allow},
		{"ops", ops, "test/other", Allow},
	}
	for _, c := range subs {
		if got := s.Subscribe(c.id, "c1", c.filter); got != c.want {
			t.Errorf("%s SUBSCRIBE %q: %v, want %v", c.who, c.filter, got, c.want)
		}
	}
}

func TestWhichRuleWins(t *testing.T) {
	s := mustParse(t, `
acl:
  - {allow: both, topic: "a/#"}
  - {deny: publish, topic: "a/b/#"}                  # more literal levels beat a/#
  - {allow: publish, topic: "a/b/c", groups: [g]}    # and a/b/c beats a/b/#
  - {deny: publish, topic: "x/+"}
  - {allow: publish, topic: "x/#"}                   # same literals: no '#' wins, so x/+ decides x/y
  - {allow: publish, topic: "p/+/+"}
  - {deny: publish, topic: "p/+/#"}                  # p/+/+ (no '#') beats it on p/1/2
  - {deny: publish, topic: "q/+/+"}
  - {allow: publish, topic: "q/+/z"}                 # more literals beat fewer '+'
  - {deny: publish, topic: "t/1", groups: [g]}
  - {allow: publish, topic: "t/1", users: [u]}       # a user rule beats a group rule
  - {allow: publish, topic: "tie"}
  - {deny: publish, topic: "tie"}                    # deny wins a full tie
  - {allow: publish, topic: "c/%c/in"}
  - {allow: subscribe, topic: "u/%u-data/x"}
default: allow
`)
	u := Identity{User: "u", Groups: []string{"g"}}
	v := Identity{User: "v"}
	cases := []struct {
		id     Identity
		action Action
		topic  string
		want   bool
	}{
		{v, Publish, "a/x", true},
		{v, Publish, "a/b/x", false},
		{v, Subscribe, "a/b/x", true},
		{u, Publish, "a/b/c", true},
		{v, Publish, "a/b/c", false},
		{v, Publish, "x/y", false},
		{v, Publish, "x/y/z", true},
		{v, Publish, "p/1/2", true},
		{v, Publish, "p/1/2/3", false},
		{v, Publish, "q/1/z", true},
		{v, Publish, "q/1/y", false},
		{u, Publish, "t/1", true},
		{Identity{User: "w", Groups: []string{"g"}}, Publish, "t/1", false},
		{v, Publish, "tie", false},
	}
	for _, c := range cases {
		if got := s.Allowed(c.id, "cid", c.action, c.topic); got != c.want {
			t.Errorf("%v %s %q: %v, want %v", c.id, c.action, c.topic, got, c.want)
		}
	}
	s2 := mustParse(t, `
acl:
  - {allow: publish, topic: "c/%c/in"}
  - {allow: subscribe, topic: "u/%u-data/x"}
`)
	if !s2.Allowed(v, "dev1", Publish, "c/dev1/in") || s2.Allowed(v, "dev1", Publish, "c/dev2/in") {
		t.Errorf("a %%c rule did not match the client id")
	}
	if !s2.Allowed(v, "", Subscribe, "u/v-data/x") || s2.Allowed(u, "", Subscribe, "u/v-data/x") {
		t.Errorf("a %%u inside a level did not match the user name")
	}
	if s2.Allowed(v, "", Publish, "c//in") || s2.Allowed(Identity{}, "x", Subscribe, "u/-data/x") {
		t.Error("an empty placeholder value matched")
	}
	if s2.Allowed(Identity{User: "+"}, "", Subscribe, "u/+-data/x") {
		t.Error("a user name with a wildcard matched a placeholder")
	}
}

// TestAllowedAgreesWithEveryRule checks the trie against the definition:
// every rule looked at in turn with core.Match, the best one deciding. The
// Subscribe decision of a topic name must agree with Allowed.
func TestAllowedAgreesWithEveryRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	levels := []string{"a", "b", "$s", "%u", "%c", "+", "#"}
	ids := []Identity{{}, {User: "a"}, {User: "b", Groups: []string{"g"}}}
	for round := range 200 {
		var b strings.Builder
		b.WriteString("acl:\n")
		for range 1 + rng.IntN(12) {
			var f []string
			for n := 1 + rng.IntN(4); len(f) < n; {
				l := levels[rng.IntN(len(levels))]
				if l == "#" && len(f) < n-1 || l == "$s" && len(f) > 0 {
					continue
				}
				f = append(f, l)
			}
			eff := []string{"allow", "deny"}[rng.IntN(2)]
			act := []string{"publish", "subscribe", "both"}[rng.IntN(3)]
			who := []string{"", ", users: [a]", ", groups: [g]"}[rng.IntN(3)]
			fmt.Fprintf(&b, "  - {%s: %s, topic: %q%s}\n", eff, act, strings.Join(f, "/"), who)
		}
		fmt.Fprintf(&b, "default: %s\n", []string{"allow", "deny"}[round%2])
		s := mustParse(t, b.String())
		for range 50 {
			var tl []string
			for n := 1 + rng.IntN(4); len(tl) < n; {
				l := []string{"a", "b", "$s", ""}[rng.IntN(4)]
				if l == "$s" && len(tl) > 0 {
					continue
				}
				tl = append(tl, l)
			}
			topic := strings.Join(tl, "/")
			if topic == "" {
				continue
			}
			id := ids[rng.IntN(len(ids))]
			for _, act := range []Action{Publish, Subscribe} {
				want := bruteForce(s, id, "b", act, topic)
				if got := s.Allowed(id, "b", act, topic); got != want {
					t.Fatalf("rules:\n%s%v %s %q: %v, want %v", b.String(), id, act, topic, got, want)
				}
			}
			want := Deny
			if bruteForce(s, id, "b", Subscribe, topic) {
				want = Allow
			}
			if got := s.Subscribe(id, "b", topic); got != want {
				t.Fatalf("rules:\n%s%v SUBSCRIBE %q: %v, want %v", b.String(), id, topic, got, want)
			}
		}
	}
}

func bruteForce(s *Store, id Identity, clientID string, action Action, topic string) bool {
	var v verdict
	for _, r := range s.acl.rules {
		if r.actions&action == 0 {
			continue
		}
		tier := r.applies(&id)
		if tier < 0 {
			continue
		}
		f, ok := expand(r.filter, id.User, clientID)
		if !ok || !core.Match(f, topic) {
			continue
		}
		v.consider(r, tier)
	}
	if !v.found {
		return s.acl.defaultAllow
	}
	return !v.deny
}

// manyRules is a file of n rules: one per device user, a few per group, a
// placeholder rule and denies, as a large fleet's file looks.
func manyRules(n int) string {
	var b strings.Builder
	b.WriteString("acl:\n")
	b.WriteString("  - {allow: both, topic: \"devices/%u/#\", groups: [devices]}\n")
	b.WriteString("  - {deny: subscribe, topic: \"devices/+/secret\"}\n")
	b.WriteString("  - {allow: subscribe, topic: \"public/#\"}\n")
	for i := 3; i < n; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "  - {allow: publish, topic: \"plant/%d/line/+/telemetry\", users: [u%d]}\n", i, i)
		case 1:
			fmt.Fprintf(&b, "  - {deny: both, topic: \"plant/%d/line/%d/cmd\", groups: [g%d]}\n", i-1, i, i%50)
		case 2:
			fmt.Fprintf(&b, "  - {allow: subscribe, topic: \"site/%d/#\", users: [u%d]}\n", i, i)
		default:
			fmt.Fprintf(&b, "  - {allow: both, topic: \"devices/u%d/%d/#\", users: [u%d]}\n", i, i, i)
		}
	}
	b.WriteString("default: deny\n")
	return b.String()
}

// TestCheckCostFollowsMatchingRules: with 10,000 rules a check looks at the
// handful whose filters match the topic, not at the file.
func TestCheckCostFollowsMatchingRules(t *testing.T) {
	s := mustParse(t, manyRules(10000))
	id := Identity{User: "u4", Groups: []string{"devices"}}
	c := check{id: &id, clientID: "c", action: Publish}
	c.walk(&s.acl.root, "plant/4/line/7/telemetry", true)
	if !c.best.found || c.best.deny || c.examined > 3 {
		t.Fatalf("verdict %+v after looking at %d rules", c.best, c.examined)
	}
	c = check{id: &id, clientID: "c", action: Subscribe}
	c.walk(&s.acl.root, "devices/u4/x", true)
	if !c.best.found || c.best.deny || c.examined > 3 {
		t.Fatalf("verdict %+v after looking at %d rules", c.best, c.examined)
	}
	// devices/+/secret (no '#') outranks devices/%u/# on devices/u4/secret.
	if s.Subscribe(id, "c", "devices/u4/#") != AllowPartly || s.Subscribe(id, "c", "devices/+/secret") != Deny {
		t.Fatal("subscribe decisions")
	}
}

func BenchmarkAllowed(b *testing.B) {
	s := mustParse(b, manyRules(10000))
	id := Identity{User: "u4", Groups: []string{"devices", "g7"}}
	topics := []string{"plant/4/line/7/telemetry", "devices/u4/temp", "site/6/x/y", "nowhere/at/all"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Allowed(id, "c", Publish, topics[i%len(topics)])
	}
}

func BenchmarkSubscribe(b *testing.B) {
	s := mustParse(b, manyRules(10000))
	id := Identity{User: "u4", Groups: []string{"devices"}}
	b.ReportAllocs()
	for b.Loop() {
		s.Subscribe(id, "c", "devices/u4/#")
	}
}
