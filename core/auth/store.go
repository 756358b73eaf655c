package auth

import (
	"errors"
	"os"
	"slices"
	"sync"
)

// Identity is who a connection authenticated as. The zero Identity is the
// anonymous client: rules naming users or groups never apply to it, and %u
// never matches for it.
type Identity struct {
	User   string
	Groups []string
}

// Authentication failures. Front-ends count them by Reason and answer both
// the same way on the wire, so a client cannot tell which it was.
var (
	ErrUnknownUser = errors.New("auth: unknown user")
	ErrBadPassword = errors.New("auth: bad password")
)

// Reason is the metric label of an authentication error
// (tolsey_auth_failures_total{reason}): "unknown_user", "bad_password",
// "denied" and "unavailable" (the identity service's no, and its outage),
// "" for nil and "error" for anything else (a malformed SCRAM message).
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnknownUser):
		return "unknown_user"
	case errors.Is(err, ErrBadPassword):
		return "bad_password"
	case errors.Is(err, ErrDenied):
		return "denied"
	case errors.Is(err, ErrUnavailable):
		return ReasonUnavailable
	}
	return "error"
}

// ReasonUnavailable is Reason's label for ErrUnavailable: the front-ends
// answer it "server unavailable", not "bad credentials".
const ReasonUnavailable = "unavailable"

type user struct {
	name   string
	hash   *hash            // nil: no password; SCRAM only
	scram  *ScramCredential // nil: no SCRAM
	groups []string
}

// Store is one parsed users file: users, ACL rules and the default policy.
// It is immutable once parsed, so any number of goroutines may use it; a
// reload parses a new Store and swaps the pointer.
type Store struct {
	users map[string]*user
	acl   acl

	// hasRules: the file had an acl or a default section (WithACL).
	hasRules bool

	// secret keys the decoy SCRAM salts of unknown users.
	secret [32]byte

	// decoy is what an unknown user's password is checked against: a hash
	// with the cost of the file's first one, made on first need so that
	// parsing stays cheap.
	decoyOnce sync.Once
	decoyOf   *hash
	decoy     *hash
}

// Load reads and parses the users file at path.
func Load(path string) (*Store, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// HasUsers reports whether the file names at least one user.
func (s *Store) HasUsers() bool { return len(s.users) > 0 }

// Authenticate checks a user name and password. An unknown user costs the
// same hash computation as a known one (a decoy hash with the same
// parameters), so the time taken does not tell whether the name exists; the
// comparison itself is constant-time (bcrypt's, or subtle's for argon2id).
func (s *Store) Authenticate(name, password string) (Identity, error) {
	u := s.users[name]
	if u == nil || u.hash == nil {
		if d := s.decoyHash(); d != nil {
			d.verify(password)
		}
		if u == nil {
			return Identity{}, ErrUnknownUser
		}
		return Identity{}, ErrBadPassword
	}
	if !u.hash.verify(password) {
		return Identity{}, ErrBadPassword
	}
	return u.identity(), nil
}

// Lookup returns the identity of a user authenticated by other means (a
// client certificate's name, SASL EXTERNAL), or false when the file does not
// name them.
func (s *Store) Lookup(name string) (Identity, bool) {
	u := s.users[name]
	if u == nil {
		return Identity{}, false
	}
	return u.identity(), true
}

func (u *user) identity() Identity {
	return Identity{User: u.name, Groups: u.groups}
}

func (s *Store) decoyHash() *hash {
	s.decoyOnce.Do(func() {
		if s.decoyOf != nil {
			s.decoy = s.decoyOf.twin()
		}
	})
	return s.decoy
}

// SameUser reports whether s names the user called name exactly as o did:
// present in both, with the same groups, password hash and SCRAM
// credential. A front-end disconnects a client whose user is no longer
// the same after a reload (docs/security.md, "Reload and revocation"):
// the groups it was granted by may be gone, and a changed password means
// whoever logged in with the old one should log in again.
func (s *Store) SameUser(o *Store, name string) bool {
	if s == o {
		return true
	}
	a, b := s.users[name], o.users[name]
	if a == nil || b == nil {
		return false
	}
	return slices.Equal(a.groups, b.groups) && a.hash.equal(b.hash) && a.scram.equal(b.scram)
}
