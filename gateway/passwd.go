package gateway

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/tolsey/tolsey/core/auth"
)

// Passwd is `gateway passwd`: it reads a password on in (without echo when
// in is a terminal, asked twice) and prints what the users file stores
// (docs/security.md, "gateway passwd"): a bcrypt hash, or an argon2id one
// with --argon2id, then with --scram the SCRAM-SHA-256 credential on a
// second line. --token reads nothing and prints a random bearer token and
// its sha256: hash for admin.tokens. It lives here, not in cmd, because cmd
// imports gateway only (docs/architecture.md, rule 8).
func Passwd(args []string, in io.Reader, out, errOut io.Writer) error {
	fs := pflag.NewFlagSet("gateway passwd", pflag.ContinueOnError)
	fs.SetOutput(errOut)
	argon := fs.Bool("argon2id", false, "print an argon2id hash instead of bcrypt")
	scram := fs.Bool("scram", false, "also print the SCRAM-SHA-256 credential (the users file's scram field)")
	token := fs.Bool("token", false, "print a new bearer token and its sha256: hash for admin.tokens; reads nothing")
	cost := fs.Int("cost", 0, "bcrypt cost (default 10)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("passwd: unexpected argument %q (the password is read on stdin)", fs.Arg(0))
	}
	if *token {
		t := rand.Text() + rand.Text() // 2 × 128 bits, base32
		sum := sha256.Sum256([]byte(t))
		_, err := fmt.Fprintf(out, "%s\nsha256:%s\n", t, hex.EncodeToString(sum[:]))
		return err
	}
	pw, err := readPassword(in, errOut)
	if err != nil {
		return err
	}
	var h string
	if *argon {
		h = auth.HashArgon2id(pw)
	} else if h, err = auth.HashBcrypt(pw, *cost); err != nil {
		return fmt.Errorf("passwd: %w", err)
	}
	fmt.Fprintln(out, h)
	if *scram {
		c, err := auth.NewScramCredential(pw, auth.ScramIterations)
		if err != nil {
			return fmt.Errorf("passwd: %w", err)
		}
		fmt.Fprintln(out, c)
	}
	return nil
}

// readPassword reads one password: from a terminal without echo, asked
// twice so a typo does not lock the user out; else the first line of in
// (a pipe, a file), without its line ending.
func readPassword(in io.Reader, prompt io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "Password: ")
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprint(prompt, "\nAgain: ")
		if err != nil {
			return "", err
		}
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", err
		}
		if string(a) != string(b) {
			return "", errors.New("passwd: the passwords differ")
		}
		return nonEmpty(string(a))
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return nonEmpty(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"))
}

func nonEmpty(pw string) (string, error) {
	if pw == "" {
		return "", errors.New("passwd: empty password")
	}
	return pw, nil
}
