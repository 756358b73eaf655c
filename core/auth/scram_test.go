package auth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tolsey/tolsey/core/auth/scramtest"
)

// The exchange of RFC 7677 §3: user "user", password "pencil".
const (
	rfcSalt        = "W22ZaJ0SNY7soEsUEjb6gQ=="
	rfcClientFirst = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
	rfcServerNonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	rfcServerFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
	rfcClientFinal = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	rfcServerFinal = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
)

func rfcStore(t testing.TB) *Store {
	salt, _ := base64.StdEncoding.DecodeString(rfcSalt)
	cred, err := scramCredential("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := HashBcrypt("pencil", 4)
	return mustParse(t, fmt.Sprintf("users:\n  - {name: user, scram: %q, groups: [g]}\n  - {name: plain, password: %q}\n", cred, pw))
}

func TestScramRFC7677Vector(t *testing.T) {
	s := rfcStore(t)
	x := s.NewScramServer()
	x.nonce = func() string { return rfcServerNonce }
	out, err := x.Step([]byte(rfcClientFirst))
	if err != nil || string(out) != rfcServerFirst {
		t.Fatalf("server-first %q %v, want %q", out, err, rfcServerFirst)
	}
	out, err = x.Step([]byte(rfcClientFinal))
	if err != nil || string(out) != rfcServerFinal {
		t.Fatalf("server-final %q %v, want %q", out, err, rfcServerFinal)
	}
	if !x.Done() || x.Identity().User != "user" || x.Identity().Groups[0] != "g" {
		t.Fatalf("done %v identity %v", x.Done(), x.Identity())
	}
	if _, err := x.Step([]byte(rfcClientFinal)); !errors.Is(err, ErrScramProtocol) {
		t.Fatalf("a third message: %v", err)
	}
}

func exchange(s *Store, user, password string) (*ScramServer, bool, error) {
	c := &scramtest.Client{User: user, Password: password, Nonce: "fyko+d2lbbFgONRv9qkxdawL"}
	x := s.NewScramServer()
	sf, err := x.Step([]byte(c.First()))
	if err != nil {
		return x, false, err
	}
	cf, err := c.Final(string(sf))
	if err != nil {
		return x, false, err
	}
	fin, err := x.Step([]byte(cf))
	if err != nil {
		if string(fin) != "e=invalid-proof" {
			return x, false, fmt.Errorf("server-final %q with %w", fin, err)
		}
		return x, false, err
	}
	return x, c.Verify(string(fin)), nil
}

func TestScramExchange(t *testing.T) {
	s := rfcStore(t)
	x, verified, err := exchange(s, "user", "pencil")
	if err != nil || !verified || !x.Done() || x.Identity().User != "user" {
		t.Fatalf("good password: verified %v, %v", verified, err)
	}
	x, _, err = exchange(s, "user", "pencils")
	if !errors.Is(err, ErrBadPassword) || x.Done() || x.Identity().User != "" {
		t.Fatalf("wrong password: %v", err)
	}
	if _, _, err = exchange(s, "nobody", "pencil"); !errors.Is(err, ErrUnknownUser) || Reason(err) != "unknown_user" {
		t.Fatalf("unknown user: %v", err)
	}
	if _, _, err = exchange(s, "plain", "pencil"); !errors.Is(err, ErrNoScramCredential) || Reason(err) != "bad_password" {
		t.Fatalf("a user without a SCRAM credential: %v", err)
	}
	// An unknown user sees the same salt each time, as a known one would.
	a, b := s.NewScramServer(), s.NewScramServer()
	sa, _ := a.Step([]byte("n,,n=nobody,r=abc"))
	sb, _ := b.Step([]byte("n,,n=nobody,r=abc"))
	if strings.Split(string(sa), ",")[1] != strings.Split(string(sb), ",")[1] {
		t.Fatalf("decoy salts differ: %s / %s", sa, sb)
	}
}

func TestScramMalformed(t *testing.T) {
	s := rfcStore(t)
	for _, m := range []string{
		"", "n", "x,,n=user,r=a", "p=tls-unique,,n=user,r=a", "n,,r=a,n=user", "n,,n=user",
		"n,,n=us=er,r=a", "n,,n=user,r=", "n,,n=user,r=a b", "n,a=other,n=user,r=a", "n,,m=ext,n=user,r=a",
		strings.Repeat("n", 5000),
	} {
		if _, err := s.NewScramServer().Step([]byte(m)); !errors.Is(err, ErrScramProtocol) {
			t.Errorf("client-first %q: %v", m, err)
		}
	}
	for _, m := range []string{
		"c=biws,r=abc", "c=biws,r=wrong,p=AAAA", "c=eSws,r=%s,p=" + strings.Repeat("A", 44), "c=biws,r=%s,p=!!", "r=%s,c=biws,p=AAAA",
	} {
		x := s.NewScramServer()
		x.nonce = func() string { return "srv" }
		if _, err := x.Step([]byte("n,,n=user,r=cli")); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Step([]byte(strings.ReplaceAll(m, "%s", "clisrv"))); !errors.Is(err, ErrScramProtocol) {
			t.Errorf("client-final %q: %v", m, err)
		}
	}
}

func FuzzScram(f *testing.F) {
	f.Add([]byte(rfcClientFirst), []byte(rfcClientFinal))
	f.Add([]byte("y,a=user,n=user,r=x"), []byte("c=eSxhPXVzZXIs,r=x"+rfcServerNonce+",p=AAAA"))
	s := rfcStore(f)
	f.Fuzz(func(t *testing.T, first, final []byte) {
		x := s.NewScramServer()
		x.nonce = func() string { return rfcServerNonce }
		if _, err := x.Step(first); err != nil {
			return
		}
		_, err := x.Step(final)
		if err == nil && (!x.Done() || x.Identity().User != "user") {
			t.Fatalf("accepted %q %q as %v", first, final, x.Identity())
		}
		if err == nil && string(final) != rfcClientFinal && string(first) == rfcClientFirst {
			t.Fatalf("a forged proof passed: %q", final)
		}
	})
}

func TestScramCredentialFormat(t *testing.T) {
	c, err := NewScramCredential("pw", ScramIterations)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseScramCredential(c.String())
	if err != nil || p.String() != c.String() {
		t.Fatalf("round trip: %v %v", p, err)
	}
	for _, bad := range []string{"", "SCRAM-SHA-1$4096:c2FsdA==$a:b", "SCRAM-SHA-256$0:c2FsdA==$" + strings.Repeat("A", 43) + "=:" + strings.Repeat("A", 43) + "=",
		"SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA"} {
		if _, err := ParseScramCredential(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
