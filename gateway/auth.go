package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/auth/httpauth"
	"github.com/tolsey/tolsey/core/tlsconf"
)

// AuthConfig is auth.*: who may connect to the MQTT and AMQP listeners.
type AuthConfig struct {
	File    string // users file; "" = no users
	ACLFile string // acl.file: the ACL rules apart from the users; "" = in File
	// HTTP is the HTTP auth hook (auth.http.*); URL "" = off.
	HTTP httpauth.Options
	// OnRevoke is acl.onRevoke; CertIdentity is auth.certIdentity.
	OnRevoke     auth.Revoke
	CertIdentity auth.CertField
	// AllowAnonymous is auth.allowAnonymous resolved: auto becomes true
	// only while every MQTT and AMQP listener is on loopback.
	AllowAnonymous bool
}

// AdminAuthConfig is who may use the admin API (docs/security.md, "Admin
// API").
type AdminAuthConfig struct {
	// Tokens are the sha256 sums of the bearer tokens admin.tokens
	// accepts; empty: no token asked for.
	Tokens [][sha256.Size]byte
	// Open are the paths served without a token (admin.open); OpenAll
	// is "*" among them.
	Open    map[string]bool
	OpenAll bool
}

// buildAuthConfig reads auth.* and admin.tokens, admin.open, and refuses
// the configurations that would expose the gateway to anyone who can reach
// it without saying so: a listener beyond loopback with no users file and
// no auth.allowAnonymous: true, an admin.listen beyond loopback with no
// token, no required client certificate and no admin.open: "*". The users
// file is parsed here too, so that a broken one stops the gateway at start
// (exit 2) naming auth.file and the file's own line.
func buildAuthConfig(c *Config, get func(string) string) error {
	c.Auth.File = get("auth.file")
	if err := buildAuthHTTP(c, get); err != nil {
		return err
	}
	c.Bridge.Identity = get("bridge.identity")
	c.Auth.ACLFile = get("acl.file")
	if get("acl.onRevoke") == "disconnect" {
		c.Auth.OnRevoke = auth.RevokeDisconnect
	}
	field, err := auth.ParseCertField(get("auth.certIdentity"))
	if err != nil {
		return &ConfigError{Key: "auth.certIdentity", Msg: err.Error()}
	}
	c.Auth.CertIdentity = field
	anon := get("auth.allowAnonymous")
	tokens := get("admin.tokens")
	open := get("admin.open")

	exposed := ""
	for _, l := range []struct{ key, addr string }{
		{"mqtt.listen", c.MQTT.Listen}, {"mqtt.ws.listen", c.MQTT.WSListen},
		{"mqtt.tls.listen", c.MQTT.TLSListen}, {"mqtt.wss.listen", c.MQTT.WSSListen},
		{"amqp.listen", c.AMQP.Listen}, {"amqp.tls.listen", c.AMQP.TLSListen},
	} {
		if l.addr != "" && !loopback(l.addr) {
			exposed = l.key + " " + l.addr
			break
		}
	}
	switch anon {
	case "true":
		c.Auth.AllowAnonymous = true
	case "false":
		if !c.Auth.Enabled() {
			return &ConfigError{Key: "auth.allowAnonymous", Msg: "false lets no one in without auth.file or auth.http.url: set auth.file to a users file (docs/security.md)"}
		}
	default: // auto
		if exposed != "" && !c.Auth.Enabled() {
			return &ConfigError{Key: "auth.allowAnonymous", Msg: fmt.Sprintf("%s is beyond loopback and auth.file is empty, so anyone who can reach it could publish and subscribe: set auth.file to a users file (or auth.http.url to an identity service), or auth.allowAnonymous: true to allow that", exposed)}
		}
		c.Auth.AllowAnonymous = exposed == ""
	}
	if c.Auth.Enabled() {
		st, err := c.Auth.load()
		if err != nil {
			return err
		}
		if u := c.Bridge.Identity; u != "" {
			if _, ok := st.Lookup(u); !ok {
				return &ConfigError{Key: "bridge.identity", Msg: fmt.Sprintf("user %q is not in auth.file", u)}
			}
		}
	} else if c.Bridge.Identity != "" {
		return &ConfigError{Key: "bridge.identity", Msg: "names a user, but there is no auth.file to find it in"}
	}

	c.Admin = AdminAuthConfig{Open: map[string]bool{}}
	for _, p := range splitList(open) {
		if p == "*" {
			c.Admin.OpenAll = true
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return &ConfigError{Key: "admin.open", Msg: fmt.Sprintf("%q is not a path (/healthz) or *", p)}
		}
		c.Admin.Open[p] = true
	}
	for _, t := range splitList(tokens) {
		sum, err := parseTokenHash(t)
		if err != nil {
			return &ConfigError{Key: "admin.tokens", Msg: err.Error()}
		}
		c.Admin.Tokens = append(c.Admin.Tokens, sum)
	}
	if c.AdminListen != "" && !loopback(c.AdminListen) && len(c.Admin.Tokens) == 0 &&
		c.AdminTLS.ClientAuth != tlsconf.ClientAuthRequire && !c.Admin.OpenAll {
		return &ConfigError{Key: "admin.tokens", Msg: fmt.Sprintf("admin.listen %s is beyond loopback and nothing protects the admin API: set admin.tokens (gateway passwd --token prints a token and its hash), or admin.tls.clientAuth: require, or admin.open: \"*\" to leave it open to anyone who can reach it", c.AdminListen)}
	}
	return nil
}

// Enabled reports whether clients are authenticated and checked at all: a
// users file, an ACL file or an HTTP auth hook is configured, and the
// front-ends check every client against the auth.Store they make.
func (a *AuthConfig) Enabled() bool { return a.File != "" || a.ACLFile != "" || a.HTTP.URL != "" }

// buildAuthHTTP reads auth.http.*: the URL must be http or https with a
// host, so that a typo stops the gateway at start rather than refusing
// every client as "server unavailable".
func buildAuthHTTP(c *Config, get func(string) string) error {
	raw := get("auth.http.url")
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &ConfigError{Key: "auth.http.url", Msg: fmt.Sprintf("%q is not an http:// or https:// URL with a host", raw)}
	}
	dur := func(key string) time.Duration {
		d, _ := time.ParseDuration(normDuration(get(key))) // checked by keyDefs
		return d
	}
	c.Auth.HTTP = httpauth.Options{URL: raw, Timeout: dur("auth.http.timeout"), CacheTTL: dur("auth.http.cacheTTL")}
	if c.Auth.HTTP.Timeout <= 0 {
		return &ConfigError{Key: "auth.http.timeout", Msg: "must be above 0 (a call without a time-out could hold a connecting client for ever)"}
	}
	return nil
}

// load parses the users file and the ACL file into the Store in force;
// the error is a *ConfigError naming auth.file or acl.file, the path and
// the file's own error (line and place).
func (a *AuthConfig) load() (*auth.Store, error) {
	s, err := auth.Parse(nil) // no users, no rules
	if err != nil {
		return nil, err
	}
	if a.File != "" {
		if s, err = auth.Load(a.File); err != nil {
			return nil, &ConfigError{Key: "auth.file", Msg: fmt.Sprintf("%s: %v", a.File, err)}
		}
	}
	if a.ACLFile == "" {
		return s, nil
	}
	rules, err := auth.LoadACL(a.ACLFile)
	if err == nil {
		s, err = s.WithACL(rules)
	}
	if err != nil {
		return nil, &ConfigError{Key: "acl.file", Msg: fmt.Sprintf("%s: %v", a.ACLFile, err)}
	}
	return s, nil
}

// parseTokenHash reads one admin.tokens entry, sha256:<64 hex digits>.
func parseTokenHash(t string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h, ok := strings.CutPrefix(t, "sha256:")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != sha256.Size {
		// Never echo the value: it may be a token pasted in by mistake.
		return sum, errors.New("an entry is not sha256:<64 hex digits>; the config holds the hash of a token, never the token (gateway passwd --token prints both)")
	}
	copy(sum[:], b)
	return sum, nil
}

// splitList splits a kindList value at commas, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loopback reports whether addr (host:port) listens on loopback only: a
// loopback IP or localhost. An empty host, 0.0.0.0, :: and any other name
// listen (or may) beyond it.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenID is what the log says of a token: the first 8 hex digits of its
// hash, enough to tell the configured tokens apart, useless to replay.
func tokenID(sum [sha256.Size]byte) string { return hex.EncodeToString(sum[:4]) }

// matchToken is the admin.tokens entry the bearer token t hashes to. Every
// entry is compared, in constant time, so the time taken does not say which
// (or whether one) matched.
func matchToken(tokens [][sha256.Size]byte, t string) (id string, ok bool) {
	sum := sha256.Sum256([]byte(t))
	for _, want := range tokens {
		if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			id, ok = tokenID(want), true
		}
	}
	return id, ok
}

// startAuth builds the auth.Live the front-ends read: the users file
// parsed again (it may have changed since LoadConfig checked it), the
// HTTP auth hook (auth.http.*) and the resolved auth.allowAnonymous. Called before any listener starts.
func (g *Gateway) startAuth() error {
	g.auth = &auth.Live{AllowAnonymous: g.cfg.Auth.AllowAnonymous,
		OnRevoke: g.cfg.Auth.OnRevoke, CertIdentity: g.cfg.Auth.CertIdentity}
	if o := g.cfg.Auth.HTTP; o.URL != "" {
		o.Logger = g.log.With("part", "auth")
		hook, err := httpauth.New(o)
		if err != nil {
			return &ConfigError{Key: "auth.http.url", Msg: err.Error()}
		}
		g.auth.External = hook
		g.onStop(func(context.Context) error { hook.Close(); return nil })
	}
	// With the hook alone, load gives an empty Store: no users, no rules
	// (default allow), so the hook's users may do everything.
	if !g.cfg.Auth.Enabled() {
		return nil
	}
	s, err := g.cfg.Auth.load()
	if err != nil {
		return err
	}
	g.auth.Swap(s)
	return nil
}

// Auth is the users and rules in force, for the front-ends and tests. Its
// Load is nil without auth.file and auth.http.url (with the hook alone, an
// empty Store: no users, no rules); External is the hook.
func (g *Gateway) Auth() *auth.Live { return g.auth }

// Reload re-reads the users file (auth.file) and the TLS files of every
// listener (SIGHUP, POST /api/v1/reload). A part whose files fail keeps
// what it had, and its error, naming the key (auth.file: users.yaml: line
// 3: ...), is logged at error level and in the joined result; the others
// are reloaded all the same. Established connections stay; what they do
// next is checked against the new store.
func (g *Gateway) Reload() error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	var errs []error
	users := "none"
	if g.cfg.Auth.Enabled() {
		if s, err := g.cfg.Auth.load(); err != nil {
			errs = append(errs, err)
			users = "kept"
		} else {
			g.auth.Swap(s)
			users = "reloaded"
		}
	}
	errs = append(errs, g.reloadTLS()...)
	for _, e := range errs {
		g.log.Error("reload failed, keeping what was loaded before", "error", e)
	}
	g.log.Info("reload done", "users", users, "tls.sections", len(g.tls), "failed", len(errs))
	return errors.Join(errs...)
}
