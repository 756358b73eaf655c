// Package httpauth is the HTTP auth hook (auth.http.url, docs/security.md,
// "HTTP auth hook"): an auth.Authenticator that asks an identity service
// over HTTP about users the users file does not name, and caches its
// answers for a while.
//
// It sits under core/ beside core/auth, whose interface it implements, and
// like core/accept and core/tlsconf it is a leaf the core proper never
// imports: core/auth knows no sockets, this package is where the network
// call lives. It imports only the standard library and core/auth, and
// knows no protocol: the front-ends name theirs in auth.Credentials.
package httpauth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tolsey/tolsey/core/auth"
)

// Options configure a Client. Zero values take the documented defaults.
type Options struct {
	URL string // the identity service's endpoint, POSTed to; required
	// Timeout bounds one call, connection included (default 2s). A call
	// that takes longer is an outage: the client is refused, never let in.
	Timeout time.Duration
	// CacheTTL is how long an "allow" is reused for the same credentials
	// without asking again; 0 asks every time. A "deny" is reused for
	// min(CacheTTL, DenyTTL); an outage never.
	CacheTTL time.Duration
	// CacheSize bounds the cached answers (default 10000); beyond it the
	// expired ones go first, then arbitrary ones.
	CacheSize int
	// Logger says why the service gave no answer (its status, the
	// network error), never with a password; default slog.Default().
	Logger *slog.Logger
}

// Defaults and fixed values.
const (
	DefaultTimeout   = 2 * time.Second
	DefaultCacheSize = 10000
	// DenyTTL caps how long a "deny" is cached: long enough that a client
	// looping on a wrong password costs the service one call per DenyTTL,
	// short enough that a password just fixed in the service works soon.
	DenyTTL = 5 * time.Second
	// maxAnswer bounds the answer read: a service that streams without end
	// cannot make us buffer it.
	maxAnswer = 64 << 10
)

// Client is the hook. Any number of connecting clients may call
// Authenticate at once, each on its own goroutine.
type Client struct {
	opts Options
	http *http.Client
	key  [32]byte // keys the cache's hashes, so that they are useless outside this process

	mu    sync.Mutex // guards cache
	cache map[[sha256.Size]byte]entry
}

type entry struct {
	id      auth.Identity
	denied  bool
	expires time.Time
}

// New checks o and builds the Client.
func New(o Options) (*Client, error) {
	if o.URL == "" {
		return nil, errors.New("httpauth: URL is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Every connecting client may call at once: keep more than the default
	// two connections to the one host open between calls.
	t.MaxIdleConnsPerHost = 64
	c := &Client{
		opts:  o,
		http:  &http.Client{Transport: t, Timeout: o.Timeout},
		cache: map[[sha256.Size]byte]entry{},
	}
	rand.Read(c.key[:])
	return c, nil
}

// Close drops the idle connections to the service.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Request is the JSON body POSTed: the contract with the identity
// service (docs/security.md, "HTTP auth hook").
type Request struct {
	Username    string `json:"username"`
	Password    string `json:"password"`
	ClientID    string `json:"clientId"`
	Protocol    string `json:"protocol"`
	CertSubject string `json:"certSubject"`
	RemoteAddr  string `json:"remoteAddr"`
}

// Answer is the JSON body of a 200.
type Answer struct {
	Allow  bool     `json:"allow"`
	Groups []string `json:"groups"`
	User   string   `json:"user,omitempty"` // the name the ACL knows the client by; default the username
}

var _ auth.Authenticator = (*Client)(nil)

// Authenticate asks the service, or the cache, about cr:
//   - 200 with {"allow": true}: the identity (user, groups) it names;
//   - 200 with {"allow": false}, 401, 403: auth.ErrDenied;
//   - anything else (another status, a body that is not the JSON above,
//     no answer within Timeout): an error wrapping auth.ErrUnavailable.
func (c *Client) Authenticate(ctx context.Context, cr auth.Credentials) (auth.Identity, error) {
	k := c.cacheKey(cr)
	now := time.Now()
	if e, ok := c.cached(k, now); ok {
		if e.denied {
			return auth.Identity{}, auth.ErrDenied
		}
		return e.id, nil
	}
	id, err := c.ask(ctx, cr)
	switch {
	case err == nil:
		c.remember(k, entry{id: id, expires: now.Add(c.opts.CacheTTL)})
	case errors.Is(err, auth.ErrDenied):
		c.remember(k, entry{denied: true, expires: now.Add(min(c.opts.CacheTTL, DenyTTL))})
	default:
		c.opts.Logger.Warn("auth hook unavailable: the client is refused", "user", cr.Username, "protocol", cr.Protocol, "error", err)
	}
	return id, err
}

func (c *Client) ask(ctx context.Context, cr auth.Credentials) (auth.Identity, error) {
	body, err := json.Marshal(Request(cr))
	if err != nil {
		return auth.Identity{}, fmt.Errorf("%w: %v", auth.ErrUnavailable, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.opts.URL, bytes.NewReader(body))
	if err != nil {
		return auth.Identity{}, fmt.Errorf("%w: %v", auth.ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		// The error names the URL, never the body: no password in a log.
		return auth.Identity{}, fmt.Errorf("%w: %v", auth.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)) // lets the connection be reused
		return auth.Identity{}, auth.ErrDenied
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
		return auth.Identity{}, fmt.Errorf("%w: %s answered %s", auth.ErrUnavailable, c.opts.URL, resp.Status)
	}
	var a Answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&a); err != nil {
		return auth.Identity{}, fmt.Errorf("%w: %s: the answer is not {\"allow\": ...}: %v", auth.ErrUnavailable, c.opts.URL, err)
	}
	if !a.Allow {
		return auth.Identity{}, auth.ErrDenied
	}
	id := auth.Identity{User: a.User, Groups: a.Groups}
	if id.User == "" {
		id.User = cr.Username
	}
	return id, nil
}

// cacheKey is an HMAC of every field the service may decide on but the
// remote address, which changes with each connection: an answer is reused
// for the same credentials from another address.
func (c *Client) cacheKey(cr auth.Credentials) [sha256.Size]byte {
	m := hmac.New(sha256.New, c.key[:])
	for _, f := range []string{cr.Protocol, cr.Username, cr.Password, cr.ClientID, cr.CertSubject} {
		// Length-prefixed, so that no two field lists hash alike.
		fmt.Fprintf(m, "%d:%s", len(f), f)
	}
	var k [sha256.Size]byte
	m.Sum(k[:0])
	return k
}

func (c *Client) cached(k [sha256.Size]byte, now time.Time) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[k]
	if !ok {
		return entry{}, false
	}
	if !now.Before(e.expires) {
		delete(c.cache, k)
		return entry{}, false
	}
	return e, true
}

func (c *Client) remember(k [sha256.Size]byte, e entry) {
	if c.opts.CacheTTL <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) >= c.opts.CacheSize {
		now := time.Now()
		for k, e := range c.cache {
			if !now.Before(e.expires) {
				delete(c.cache, k)
			}
		}
		// Still full: drop a tenth, arbitrary ones (map order), so that
		// the next insert does not sweep again.
		for k := range c.cache {
			if len(c.cache) < c.opts.CacheSize-c.opts.CacheSize/10 {
				break
			}
			delete(c.cache, k)
		}
	}
	c.cache[k] = e
}

// Cached is the number of answers in the cache, for tests and metrics.
func (c *Client) Cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cache)
}
