package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ScramCredential is what a server stores to check SCRAM-SHA-256 logins
// without knowing the password (RFC 5802 §3): the salt and iteration count
// the client derives SaltedPassword with, StoredKey = H(ClientKey) and
// ServerKey. A bcrypt or argon2id hash cannot serve: SCRAM needs keys
// derived from PBKDF2(password, salt, i), so users who log in with SCRAM
// carry this too (gateway passwd --scram prints it).
type ScramCredential struct {
	Iterations int
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
}

const (
	// ScramIterations is the count gateway passwd uses: RFC 7677 §4's
	// minimum, PostgreSQL's default.
	ScramIterations = 4096
	// scramMaxIterations bounds the count read from a file: the client pays
	// for it on each login, a misprint would lock them out for minutes.
	scramMaxIterations = 1 << 24
	scramSaltLen       = 16
	// scramMaxMessage bounds a client message: names, nonces and proofs
	// fit in far less; longer is an attack on the parser or memory.
	scramMaxMessage = 4096
)

// NewScramCredential derives the SCRAM-SHA-256 credential of password with
// a fresh random salt.
func NewScramCredential(password string, iterations int) (*ScramCredential, error) {
	salt := make([]byte, scramSaltLen)
	rand.Read(salt)
	return scramCredential(password, salt, iterations)
}

func scramCredential(password string, salt []byte, iterations int) (*ScramCredential, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return nil, err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	return &ScramCredential{
		Iterations: iterations,
		Salt:       salt,
		StoredKey:  stored[:],
		ServerKey:  hmacSHA256(salted, "Server Key"),
	}, nil
}

// String is the credential in PostgreSQL's format, as the users file holds
// it: SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, base64.
func (c *ScramCredential) String() string {
	b := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", c.Iterations, b(c.Salt), b(c.StoredKey), b(c.ServerKey))
}

// ParseScramCredential reads the format String writes.
func ParseScramCredential(s string) (*ScramCredential, error) {
	const prefix = "SCRAM-SHA-256$"
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil, errors.New("want SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey> (gateway passwd --scram)")
	}
	params, keys, ok := strings.Cut(rest, "$")
	it, salt, ok1 := strings.Cut(params, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok || !ok1 || !ok2 {
		return nil, errors.New("malformed: want SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>")
	}
	c := &ScramCredential{}
	var err error
	if c.Iterations, err = strconv.Atoi(it); err != nil || c.Iterations < 1 || c.Iterations > scramMaxIterations {
		return nil, fmt.Errorf("iterations %q: want 1 to %d", it, scramMaxIterations)
	}
	if c.Salt, err = base64.StdEncoding.DecodeString(salt); err != nil || len(c.Salt) == 0 || len(c.Salt) > 64 {
		return nil, errors.New("salt: want 1 to 64 bytes in base64")
	}
	if c.StoredKey, err = base64.StdEncoding.DecodeString(stored); err != nil || len(c.StoredKey) != sha256.Size {
		return nil, errors.New("StoredKey: want 32 bytes in base64")
	}
	if c.ServerKey, err = base64.StdEncoding.DecodeString(server); err != nil || len(c.ServerKey) != sha256.Size {
		return nil, errors.New("ServerKey: want 32 bytes in base64")
	}
	return c, nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// ErrScramProtocol wraps a malformed or out-of-order SCRAM message.
var ErrScramProtocol = errors.New("auth: SCRAM protocol error")

// ErrNoScramCredential is a known user whose entry has no scram field: they
// can log in with PLAIN (or MQTT's password), not SCRAM. It counts as a bad
// password.
var ErrNoScramCredential = fmt.Errorf("%w: the user has no SCRAM credential", ErrBadPassword)

// ScramServer is the server side of one SCRAM-SHA-256 exchange (RFC 5802
// §3, RFC 7677), protocol-neutral: the front-end passes each client message
// to Step and sends back what it returns (AMQP: sasl-challenge, then the
// outcome's additional-data). It is used by one goroutine, the
// connection's reader.
//
// An unknown user gets a salt derived from their name and the store's
// secret and fails at the proof, like a wrong password (RFC 5802 §9), so
// the exchange does not tell which names exist.
type ScramServer struct {
	store *Store
	nonce func() string // the server's nonce part; tests fix it

	step            int
	gs2Header       string
	clientFirstBare string
	serverFirst     string
	fullNonce       string
	cred            *ScramCredential
	user            *user
	lookupErr       error
	done            bool
}

// NewScramServer starts an exchange against the store's credentials.
func (s *Store) NewScramServer() *ScramServer {
	return &ScramServer{store: s, nonce: rand.Text}
}

// Done reports whether the exchange succeeded; Identity is then the user.
func (x *ScramServer) Done() bool { return x.done }

// Identity is the authenticated user, once Done.
func (x *ScramServer) Identity() Identity {
	if !x.done {
		return Identity{}
	}
	return x.user.identity()
}

// Step takes the client's next message and returns the server's answer:
// server-first for client-first, server-final for client-final. On an
// authentication failure it returns the server-final "e=..." message with
// ErrUnknownUser or ErrBadPassword (count by Reason); on a malformed
// message, an error wrapping ErrScramProtocol and maybe an "e=" message.
func (x *ScramServer) Step(in []byte) ([]byte, error) {
	if len(in) > scramMaxMessage {
		return nil, fmt.Errorf("%w: message of %d bytes", ErrScramProtocol, len(in))
	}
	switch x.step {
	case 0:
		x.step++
		return x.clientFirst(string(in))
	case 1:
		x.step++
		return x.clientFinal(string(in))
	}
	return nil, fmt.Errorf("%w: exchange already finished", ErrScramProtocol)
}

func protoErr(e, format string, args ...any) ([]byte, error) {
	return []byte("e=" + e), fmt.Errorf("%w: "+format, append([]any{ErrScramProtocol}, args...)...)
}

// clientFirst reads gs2-header client-first-message-bare (RFC 5802 §7):
// "n,,n=user,r=nonce" or with "y," or "a=authzid".
func (x *ScramServer) clientFirst(m string) ([]byte, error) {
	flag, rest, ok := strings.Cut(m, ",")
	if !ok {
		return protoErr("other-error", "client-first: no gs2 header")
	}
	switch {
	case flag == "n", flag == "y":
	case strings.HasPrefix(flag, "p="):
		// We offer no -PLUS mechanism, so a client asking for binding
		// is confused (RFC 5802 §6).
		return protoErr("channel-binding-not-supported", "client-first: channel binding requested")
	default:
		return protoErr("other-error", "client-first: gs2 flag %q", flag)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return protoErr("other-error", "client-first: no authzid field")
	}
	x.gs2Header = flag + "," + authz + ","
	x.clientFirstBare = bare
	attrs := strings.Split(bare, ",")
	if strings.HasPrefix(attrs[0], "m=") {
		return protoErr("extensions-not-supported", "client-first: mandatory extension")
	}
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return protoErr("other-error", "client-first: want n=...,r=...")
	}
	name, ok := decodeSaslName(attrs[0][2:])
	if !ok || name == "" {
		return protoErr("invalid-username-encoding", "client-first: user name encoding")
	}
	if authz != "" {
		a, ok := strings.CutPrefix(authz, "a=")
		if az, ok2 := decodeSaslName(a); !ok || !ok2 || az != name {
			return protoErr("other-error", "client-first: authzid other than the user")
		}
	}
	cnonce := attrs[1][2:]
	if !validNonce(cnonce) {
		return protoErr("other-error", "client-first: nonce")
	}
	x.user = x.store.users[name]
	switch {
	case x.user == nil:
		x.lookupErr = ErrUnknownUser
	case x.user.scram == nil:
		x.lookupErr = ErrNoScramCredential
	default:
		x.cred = x.user.scram
	}
	if x.cred == nil {
		x.cred = x.store.decoyScram(name)
	}
	x.fullNonce = cnonce + x.nonce()
	x.serverFirst = fmt.Sprintf("r=%s,s=%s,i=%d", x.fullNonce, base64.StdEncoding.EncodeToString(x.cred.Salt), x.cred.Iterations)
	return []byte(x.serverFirst), nil
}

// clientFinal reads "c=<gs2 header>,r=<nonce>,p=<proof>" (RFC 5802 §7) and
// checks the proof: ClientKey = proof XOR HMAC(StoredKey, AuthMessage) must
// hash to StoredKey.
func (x *ScramServer) clientFinal(m string) ([]byte, error) {
	i := strings.LastIndex(m, ",p=")
	if i < 0 {
		return protoErr("other-error", "client-final: no proof")
	}
	withoutProof, proofB64 := m[:i], m[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return protoErr("other-error", "client-final: want c=...,r=...,p=...")
	}
	if cb, err := base64.StdEncoding.DecodeString(attrs[0][2:]); err != nil || string(cb) != x.gs2Header {
		return protoErr("channel-bindings-dont-match", "client-final: channel binding data differs from the gs2 header")
	}
	if attrs[1][2:] != x.fullNonce {
		return protoErr("other-error", "client-final: nonce differs")
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != sha256.Size {
		return protoErr("invalid-encoding", "client-final: proof")
	}
	authMessage := x.clientFirstBare + "," + x.serverFirst + "," + withoutProof
	sig := hmacSHA256(x.cred.StoredKey, authMessage)
	for i := range proof {
		proof[i] ^= sig[i]
	}
	got := sha256.Sum256(proof)
	if subtle.ConstantTimeCompare(got[:], x.cred.StoredKey) != 1 || x.lookupErr != nil {
		err := x.lookupErr
		if err == nil {
			err = ErrBadPassword
		}
		return []byte("e=invalid-proof"), err
	}
	x.done = true
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacSHA256(x.cred.ServerKey, authMessage))), nil
}

// decodeSaslName undoes RFC 5802 §5.1's escaping: "=2C" is ',', "=3D" is
// '='; any other '=' is an error.
func decodeSaslName(s string) (string, bool) {
	if !strings.Contains(s, "=") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// validNonce: printable ASCII but ',' (RFC 5802 §7).
func validNonce(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}

// decoyScram is the credential an unknown user's exchange runs against: a
// salt that is stable per name (a second try must not see a new one) and
// keys nobody can prove.
func (s *Store) decoyScram(name string) *ScramCredential {
	mac := hmac.New(sha256.New, s.secret[:])
	mac.Write([]byte(name))
	sum := mac.Sum(nil)
	stored := hmacSHA256(sum, "stored")
	return &ScramCredential{Iterations: ScramIterations, Salt: sum[:scramSaltLen], StoredKey: stored, ServerKey: stored}
}

// equal reports whether c and o are the same credential (nil equals nil).
func (c *ScramCredential) equal(o *ScramCredential) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.Iterations == o.Iterations && bytes.Equal(c.Salt, o.Salt) &&
		bytes.Equal(c.StoredKey, o.StoredKey) && bytes.Equal(c.ServerKey, o.ServerKey)
}
