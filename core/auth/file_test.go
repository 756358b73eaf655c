package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseErrorsNameThePlace(t *testing.T) {
	good, _ := HashBcrypt("pw", 4)
	cases := []struct{ file, want string }{
		{"users:\n  - {name: a, password: \"" + good + "\"}\n  - {name: b, password: \"" + good + "\"}\n  - {name: carol, password: hunter2}\n",
			`line 4: users[2].password: plain text, not a hash (use gateway passwd) (user "carol")`},
		{"users:\n  - {name: a, password: \"" + good + "\", colour: red}\n", "users[0].colour: unknown key"},
		{"users:\n  - {name: a, password: \"" + good + "\"}\n  - {name: a, password: \"" + good + "\"}\n", `users[1].name: duplicate user "a"`},
		{"users:\n  - {password: \"" + good + "\"}\n", "users[0].name: missing"},
		{"users:\n  - {name: a}\n", "users[0].password: missing"},
		{"users:\n  - {name: a, password: \"$6$salt$x\"}\n", `unsupported hash scheme "$6$"`},
		{"users:\n  - {name: a, password: \"$2a$10$short\"}\n", "users[0].password: malformed bcrypt hash"},
		{"users:\n  - {name: a, password: \"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$AAAAAAAAAAAAAAAAAAAAAA\"}\n", "m=99999999 out of range"},
		{"users:\n  - {name: a, scram: \"SCRAM-SHA-256$x\"}\n", "users[0].scram: malformed"},
		{"acl:\n  - {allow: publish, topic: a}\n  - {deny: publish, topic: \"a/#/b\"}\n", `line 3: acl[1].topic: "a/#/b"`},
		{"acl:\n  - {allow: publish, topic: \"a/%x\"}\n", "acl[0].topic"},
		{"acl:\n  - {allow: publish, topic: \"$share/g/a\"}\n", "acl[0].topic"},
		{"acl:\n  - {allow: publish, deny: subscribe, topic: a}\n", "acl[0]: want exactly one of allow or deny"},
		{"acl:\n  - {allow: [read], topic: a}\n", `acl[0].allow[0]: "read": want publish, subscribe or both`},
		{"acl:\n  - {allow: publish}\n", "acl[0].topic: missing"},
		{"acl:\n  - {allow: publish, topic: a, who: x}\n", "acl[0].who: unknown key"},
		{"default: maybe\n", `default: "maybe": want allow or deny`},
		{"usres: []\n", "usres: unknown key"},
		{"- a\n", "(top)"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.file, err, c.want)
		}
	}
	_, err := Parse([]byte("users:\n  - {name: carol, password: hunter2}\n"))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.User != "carol" || pe.Path != "users[0].password" || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a plain-text password: %v (the error must name the user and never echo the password)", err)
	}
}

func TestDefaultPolicy(t *testing.T) {
	for _, c := range []struct {
		file string
		want bool
	}{
		{"", true},
		{"users: []\n", true},
		{"acl: []\n", false},
		{"acl: []\ndefault: allow\n", true},
		{"default: deny\n", false},
	} {
		s := mustParse(t, c.file)
		if got := s.Allowed(Identity{}, "", Publish, "x"); got != c.want {
			t.Errorf("%q: %v, want %v", c.file, got, c.want)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(path, []byte(exampleFile(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Authenticate("alice", "alice-pw")
	if err != nil || id.User != "alice" || len(id.Groups) != 1 || id.Groups[0] != "devices" {
		t.Fatalf("alice (bcrypt): %v %v", id, err)
	}
	if id, err := s.Authenticate("ops", "ops-pw"); err != nil || id.User != "ops" {
		t.Fatalf("ops (argon2id): %v %v", id, err)
	}
	for _, c := range []struct{ user, pw, reason string }{
		{"alice", "wrong", "bad_password"},
		{"ops", "alice-pw", "bad_password"},
		{"mallory", "alice-pw", "unknown_user"},
		{"", "", "unknown_user"},
	} {
		id, err := s.Authenticate(c.user, c.pw)
		if Reason(err) != c.reason || id.User != "" {
			t.Errorf("%s/%s: %v %v, want reason %s", c.user, c.pw, id, err, c.reason)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestHashesRoundTrip(t *testing.T) {
	h, err := parseHash(HashArgon2id("pw"))
	if err != nil || !h.verify("pw") || h.verify("pW") {
		t.Fatalf("argon2id: %v", err)
	}
	twin := h.twin()
	if twin.memory != h.memory || twin.time != h.time || len(twin.key) != len(h.key) || twin.verify("pw") {
		t.Fatal("argon2id decoy differs in cost or accepts the password")
	}
	b, _ := HashBcrypt("pw", 5)
	h, err = parseHash(strings.Replace(b, "$2a$", "$2y$", 1))
	if err != nil || !h.verify("pw") {
		t.Fatalf("bcrypt $2y$: %v", err)
	}
	if twin := h.twin(); twin.verify("pw") || !strings.HasPrefix(string(twin.bcrypt), "$2a$05$") {
		t.Fatal("bcrypt decoy differs in cost or accepts the password")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(exampleFile(f)))
	f.Add([]byte(manyRules(20)))
	f.Add([]byte("acl:\n  - {allow: both, topic: \"c/%c/%u-x/+/#\", users: [a], groups: g}\ndefault: allow\n"))
	f.Add([]byte("users:\n  - {name: a, scram: \"SCRAM-SHA-256$4096:c2FsdA==$" + strings.Repeat("A", 43) + "=:" + strings.Repeat("A", 43) + "=\"}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		for _, id := range []Identity{{}, {User: "a", Groups: []string{"g", "devices"}}, {User: "alice"}} {
			for _, topic := range []string{"a", "devices/alice/x", "$SYS/x", "c/1/a-x/y", "public/x/y/z"} {
				s.Allowed(id, "1", Publish, topic)
				s.Allowed(id, "1", Subscribe, topic)
				if s.Subscribe(id, "1", topic) == AllowPartly {
					t.Fatalf("a topic name is partly allowed")
				}
			}
			for _, filter := range []string{"#", "+/+", "a/#", "devices/+/x", "$SYS/#", "c/+/+/#"} {
				s.Subscribe(id, "1", filter)
			}
		}
	})
}

// TestACLFile: an ACL file holds acl and default only; WithACL puts its
// rules with a users file's users, and refuses a users file that has rules
// of its own.
func TestACLFile(t *testing.T) {
	good, _ := HashBcrypt("pw", 4)
	users, err := Parse([]byte("users:\n  - {name: alice, password: \"" + good + "\", groups: [devices]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ParseACL([]byte("acl:\n  - {allow: [publish, subscribe], topic: \"devices/%u/#\", groups: [devices]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := users.WithACL(rules)
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Authenticate("alice", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Allowed(id, "c", Publish, "devices/alice/x") || st.Allowed(id, "c", Publish, "other") {
		t.Fatal("the ACL file's rules (default deny once rules exist) do not apply to the users file's users")
	}
	for file, want := range map[string]string{
		"users: []\nacl: []\n":             "users: users belong in the users file",
		"acl: []\nextra: 1\n":              "extra: unknown key (acl, default)",
		"acl:\n  - {allow: x, topic: a}\n": `acl[0].allow: "x"`,
	} {
		if _, err := ParseACL([]byte(file)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %s", file, err, want)
		}
	}
	for _, file := range []string{"acl: []\n", "default: allow\n"} {
		both, err := Parse([]byte("users:\n  - {name: alice, password: \"" + good + "\"}\n" + file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := both.WithACL(rules); err == nil || !strings.Contains(err.Error(), "keep them in one file") {
			t.Errorf("users file with %q and an ACL file: got %v, want a refusal", file, err)
		}
	}
}

// TestThrottle: the delay grows by ThrottleStep per failure from a host
// within ThrottleWindow, up to ThrottleMax, per host; a host quiet for a
// window starts again.
func TestThrottle(t *testing.T) {
	var th Throttle
	now := time.Unix(1000, 0)
	for i := 1; i <= 12; i++ {
		if d, want := th.Failed("a", now), min(time.Duration(i)*ThrottleStep, ThrottleMax); d != want {
			t.Fatalf("failure %d: %v, want %v", i, d, want)
		}
	}
	if d := th.Failed("b", now); d != ThrottleStep {
		t.Fatalf("another host: %v", d)
	}
	if d := th.Failed("a", now.Add(ThrottleWindow+time.Second)); d != ThrottleStep {
		t.Fatalf("after a quiet window: %v", d)
	}
}
