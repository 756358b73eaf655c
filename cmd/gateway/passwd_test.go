package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/tolsey/tolsey/gateway"
)

func TestPasswdPrintsHashes(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := gateway.Passwd([]string{"--cost=4", "--scram"}, strings.NewReader("s3cret\r\n"), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || bcrypt.CompareHashAndPassword([]byte(lines[0]), []byte("s3cret")) != nil {
		t.Fatalf("output %q: want a bcrypt hash of the line without its ending, then the SCRAM credential", out.String())
	}
	if !strings.HasPrefix(lines[1], "SCRAM-SHA-256$4096:") || strings.Count(lines[1], "$") != 2 {
		t.Fatalf("scram line %q", lines[1])
	}

	out.Reset()
	if err := gateway.Passwd([]string{"--argon2id"}, strings.NewReader("s3cret"), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "$argon2id$v=19$m=65536,t=3,p=4$") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("argon2id output %q", out.String())
	}

	out.Reset()
	if err := gateway.Passwd([]string{"--token"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	tok, hash, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	sum := sha256.Sum256([]byte(tok))
	if len(tok) < 40 || hash != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("token output %q", out.String())
	}

	for _, c := range []struct {
		args []string
		in   string
	}{{nil, ""}, {nil, "\n"}, {[]string{"extra"}, "pw"}, {[]string{"--nope"}, "pw"}} {
		if err := gateway.Passwd(c.args, strings.NewReader(c.in), &out, &errOut); err == nil {
			t.Errorf("%v with %q: no error", c.args, c.in)
		}
	}
}

// TestPasswdSubcommand runs the binary as a user would, password on a pipe.
func TestPasswdSubcommand(t *testing.T) {
	bin := buildGateway(t)
	cmd := exec.Command(bin, "passwd", "--cost=4")
	cmd.Stdin = strings.NewReader("s3cret\n")
	out, err := cmd.Output()
	if err != nil || bcrypt.CompareHashAndPassword(bytes.TrimSpace(out), []byte("s3cret")) != nil {
		t.Fatalf("gateway passwd: %q %v", out, err)
	}
	cmd = exec.Command(bin, "passwd")
	cmd.Stdin = strings.NewReader("")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "empty password") {
		t.Fatalf("empty password: %v %q", err, stderr.String())
	}
}
