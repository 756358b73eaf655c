package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// hash is a parsed password hash: bcrypt (kept whole, the library parses it)
// or argon2id (parsed once at load so a login does not parse).
type hash struct {
	bcrypt []byte // the whole "$2a$..." string, when bcrypt

	// argon2id
	time, memory uint32
	threads      uint8
	salt, key    []byte
}

// Bounds on argon2id parameters read from the file: a typo of one zero too
// many in m= would otherwise make every login allocate gigabytes.
const (
	argonMaxMemory  = 4 << 20 // KiB: 4 GiB
	argonMaxTime    = 64
	argonMaxSaltLen = 64
	argonMinKeyLen  = 16
	argonMaxKeyLen  = 128
)

// Parameters gateway passwd uses for new argon2id hashes: RFC 9106 §4's
// second recommended option (64 MiB, t=3, p=4).
const (
	argonTime    = 3
	argonMemory  = 64 << 10
	argonThreads = 4
	argonSaltLen = 16
	argonKeyLen  = 32
)

var errPlainText = errors.New("plain text, not a hash (use gateway passwd)")

// parseHash reads a password hash from the users file. Anything that does not
// look like a supported hash is refused, so a plain-text password is never
// taken for one.
func parseHash(s string) (*hash, error) {
	switch {
	case strings.HasPrefix(s, "$2a$"), strings.HasPrefix(s, "$2b$"), strings.HasPrefix(s, "$2y$"):
		if _, err := bcrypt.Cost([]byte(s)); err != nil {
			return nil, fmt.Errorf("malformed bcrypt hash: %v", err)
		}
		return &hash{bcrypt: []byte(s)}, nil
	case strings.HasPrefix(s, "$argon2id$"):
		return parseArgon2id(s)
	case strings.HasPrefix(s, "$"):
		scheme, _, _ := strings.Cut(s[1:], "$")
		return nil, fmt.Errorf("unsupported hash scheme %q (bcrypt $2a$/$2b$/$2y$ or $argon2id$)", "$"+scheme+"$")
	}
	return nil, errPlainText
}

// parseArgon2id reads the PHC string format:
// $argon2id$v=19$m=65536,t=3,p=4$<salt>$<hash>, base64 without padding.
func parseArgon2id(s string) (*hash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" {
		return nil, errors.New("malformed argon2id hash: want $argon2id$v=19$m=..,t=..,p=..$salt$hash")
	}
	if parts[2] != "v=19" {
		return nil, fmt.Errorf("argon2id version %q, want v=19", parts[2])
	}
	h := &hash{}
	seen := 0
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("argon2id parameter %q: not a number", kv)
		}
		switch k {
		case "m":
			if n < 8 || n > argonMaxMemory {
				return nil, fmt.Errorf("argon2id m=%d out of range [8, %d] KiB", n, argonMaxMemory)
			}
			h.memory = uint32(n)
			seen |= 1
		case "t":
			if n < 1 || n > argonMaxTime {
				return nil, fmt.Errorf("argon2id t=%d out of range [1, %d]", n, argonMaxTime)
			}
			h.time = uint32(n)
			seen |= 2
		case "p":
			if n < 1 || n > 255 {
				return nil, fmt.Errorf("argon2id p=%d out of range [1, 255]", n)
			}
			h.threads = uint8(n)
			seen |= 4
		default:
			return nil, fmt.Errorf("argon2id parameter %q unknown", k)
		}
	}
	if seen != 7 {
		return nil, errors.New("argon2id hash needs m=, t= and p=")
	}
	var err error
	if h.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(h.salt) < 8 || len(h.salt) > argonMaxSaltLen {
		return nil, errors.New("argon2id salt: want 8 to 64 bytes, base64 without padding")
	}
	if h.key, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(h.key) < argonMinKeyLen || len(h.key) > argonMaxKeyLen {
		return nil, errors.New("argon2id hash: want 16 to 128 bytes, base64 without padding")
	}
	return h, nil
}

// verify reports whether password matches, in time that depends on the
// hash's parameters only.
func (h *hash) verify(password string) bool {
	if h.bcrypt != nil {
		return bcrypt.CompareHashAndPassword(h.bcrypt, []byte(password)) == nil
	}
	got := argon2.IDKey([]byte(password), h.salt, h.time, h.memory, h.threads, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(got, h.key) == 1
}

// twin returns a hash with the same algorithm and cost as h for a random
// password: what an unknown user's login is checked against, so that it
// takes as long as a known user's.
func (h *hash) twin() *hash {
	pw := rand.Text()
	if h.bcrypt != nil {
		cost, _ := bcrypt.Cost(h.bcrypt)
		b, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
		if err != nil {
			return h // cannot happen for a cost that parsed; h is as slow
		}
		return &hash{bcrypt: b}
	}
	t := *h
	t.salt = make([]byte, len(h.salt))
	rand.Read(t.salt)
	t.key = make([]byte, len(h.key))
	return &t
}

// HashBcrypt returns a bcrypt hash of password at cost (bcrypt.DefaultCost
// when 0), for the users file.
func HashBcrypt(password string, cost int) (string, error) {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	b, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	return string(b), err
}

// HashArgon2id returns an argon2id hash of password in the PHC string
// format, with RFC 9106's second recommended parameters.
func HashArgon2id(password string) string {
	h := &hash{time: argonTime, memory: argonMemory, threads: argonThreads, salt: make([]byte, argonSaltLen)}
	rand.Read(h.salt)
	return h.phc(password)
}

// phc derives password's key with h's parameters and salt and writes the
// PHC string.
func (h *hash) phc(password string) string {
	keyLen := uint32(len(h.key))
	if keyLen == 0 {
		keyLen = argonKeyLen
	}
	key := argon2.IDKey([]byte(password), h.salt, h.time, h.memory, h.threads, keyLen)
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", h.memory, h.time, h.threads,
		base64.RawStdEncoding.EncodeToString(h.salt), base64.RawStdEncoding.EncodeToString(key))
}

// equal reports whether h and o are the same hash (nil equals nil).
func (h *hash) equal(o *hash) bool {
	if h == nil || o == nil {
		return h == o
	}
	return bytes.Equal(h.bcrypt, o.bcrypt) && h.time == o.time && h.memory == o.memory &&
		h.threads == o.threads && bytes.Equal(h.salt, o.salt) && bytes.Equal(h.key, o.key)
}
