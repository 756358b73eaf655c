package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/eclipse/paho.golang/paho"
	"github.com/tolsey/tolsey/core/auth"
	"github.com/tolsey/tolsey/core/coretest"
)

// writeUsers writes a users file with one user per name, each with the
// password name+"-pw", and returns its path.
func writeUsers(t *testing.T, path string, names ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("users:\n")
	for _, n := range names {
		h, err := auth.HashBcrypt(n+"-pw", 4)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("  - {name: " + n + ", password: \"" + h + "\"}\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A broken users file: line 2 has a plain-text password.
const brokenUsers = "users:\n  - {name: eve, password: plain-text}\n"

// canLogIn reports whether name authenticates with its password against
// the store g has in force.
func canLogIn(g *Gateway, name string) bool {
	s := g.Auth().Load()
	if s == nil {
		return false
	}
	_, err := s.Authenticate(name, name+"-pw")
	return err == nil
}

// A listener beyond loopback with no users file and no explicit
// auth.allowAnonymous: true refuses to start, naming the key and how to
// allow it; on loopback anonymous access stays the default.
func TestAnonymousBeyondLoopbackRefused(t *testing.T) {
	users := writeUsers(t, filepath.Join(t.TempDir(), "users.yaml"), "alice")
	for _, key := range []string{"mqtt.listen", "mqtt.ws.listen", "amqp.listen"} {
		wantConfigError(t, []string{"--" + key + "=0.0.0.0:0"}, nil, "auth.allowAnonymous", key+" 0.0.0.0:0 is beyond loopback")
		wantConfigError(t, []string{"--" + key + "=:0"}, nil, "auth.allowAnonymous", "auth.allowAnonymous: true")
	}
	wantConfigError(t, []string{"--auth.allowAnonymous=false"}, nil, "auth.allowAnonymous", "auth.file")
	for _, tc := range []struct {
		args []string
		anon bool
	}{
		{nil, true},
		{[]string{"--auth.file=" + users}, true},
		{[]string{"--auth.file=" + users, "--auth.allowAnonymous=false"}, false},
		{[]string{"--mqtt.listen=0.0.0.0:0", "--auth.allowAnonymous=true"}, true},
		{[]string{"--mqtt.listen=[::]:0", "--auth.file=" + users}, false},
		{[]string{"--mqtt.listen=localhost:0", "--amqp.listen=[::1]:0"}, true},
	} {
		c, err := LoadConfig(append([]string{"--data.dir=" + t.TempDir()}, tc.args...), nil, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if c.Auth.AllowAnonymous != tc.anon {
			t.Errorf("%v: AllowAnonymous %v, want %v", tc.args, c.Auth.AllowAnonymous, tc.anon)
		}
	}
}

// A broken users file stops the gateway at start naming auth.file, the
// path and the line; a missing one too.
func TestBadUsersFileRefused(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(bad, []byte(brokenUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	wantConfigError(t, []string{"--auth.file=" + bad}, nil, "auth.file", bad+": line 2: users[0].password")
	wantConfigError(t, []string{"--auth.file=" + filepath.Join(dir, "none.yaml")}, nil, "auth.file", "none.yaml")
}

// The users file is in force once the gateway starts: Auth().Load()
// authenticates its users, and Auth carries the resolved
// auth.allowAnonymous.
func TestUsersFileLoaded(t *testing.T) {
	users := writeUsers(t, filepath.Join(t.TempDir(), "users.yaml"), "alice")
	g := startGateway(t, "--auth.file="+users, "--auth.allowAnonymous=false")
	if !canLogIn(g, "alice") {
		t.Fatal("alice cannot log in with the users file loaded")
	}
	if _, err := g.Auth().Load().Authenticate("alice", "wrong"); !errors.Is(err, auth.ErrBadPassword) {
		t.Errorf("a wrong password: %v", err)
	}
	if g.Auth().AllowAnonymous {
		t.Error("AllowAnonymous with auth.allowAnonymous=false")
	}
	if g := startGateway(t); g.Auth() == nil || g.Auth().Load() != nil || !g.Auth().AllowAnonymous {
		t.Error("without auth.file: want a Live with no store that allows anonymous clients")
	}
}

// Reload swaps in a changed users file; a broken one keeps the store in
// force and says why, naming auth.file.
func TestReloadUsers(t *testing.T) {
	path := writeUsers(t, filepath.Join(t.TempDir(), "users.yaml"), "alice")
	var log coretest.SyncBuffer
	g := New(testConfig(t, "--auth.file="+path), slog.New(slog.NewTextHandler(&log, nil)))
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())

	writeUsers(t, path, "bob")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	if canLogIn(g, "alice") || !canLogIn(g, "bob") {
		t.Fatal("after Reload: want bob and not alice")
	}
	before := g.Auth().Load()
	if err := os.WriteFile(path, []byte(brokenUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	err := g.Reload()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "auth.file" || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Reload of a broken file: %v, want a ConfigError on auth.file naming line 2", err)
	}
	if g.Auth().Load() != before || !canLogIn(g, "bob") {
		t.Fatal("a broken file replaced the store in force")
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "auth.file") {
		t.Errorf("the failed reload was not logged naming auth.file:\n%s", log.String())
	}
}

// newToken is a bearer token and its admin.tokens entry.
func newToken(t *testing.T) (token, entry string) {
	t.Helper()
	var out strings.Builder
	if err := Passwd([]string{"--token"}, strings.NewReader(""), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	token, entry, _ = strings.Cut(strings.TrimSpace(out.String()), "\n")
	return token, entry
}

// adminCall is call with an Authorization header (none when token is "").
func adminCall(t *testing.T, g *Gateway, method, path, token, body string) (*http.Response, string) {
	t.Helper()
	return adminRequest(t, g, method, path, body, func(req *http.Request) {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	})
}

// adminRequest makes one request to g's admin API, changed by mod.
func adminRequest(t *testing.T, g *Gateway, method, path, body string, mod func(*http.Request)) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+g.AdminAddr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	mod(req)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// With admin.tokens, every admin path but admin.open needs a bearer token
// of the list: 401 with a challenge without one or with another, 200 with
// it. A mutating call is logged with the token's id, never the token.
func TestAdminTokens(t *testing.T) {
	token, entry := newToken(t)
	other, _ := newToken(t)
	var log coretest.SyncBuffer
	g := New(testConfig(t, "--admin.tokens="+entry), slog.New(slog.NewTextHandler(&log, nil)))
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())

	for _, tc := range []struct{ path, token, challenge string }{
		{"/metrics", "", `Bearer realm="tolsey admin"`},
		{"/api/v1/queues", other, `error="invalid_token"`},
		{"/healthz/", "", "Bearer"}, // not an open path as spelled
	} {
		resp, body := adminCall(t, g, "GET", tc.path, tc.token, "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), tc.challenge) {
			t.Errorf("GET %s with token %q: %d %q %s, want 401 and a challenge with %s", tc.path, tc.token, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body, tc.challenge)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, body := adminCall(t, g, "GET", p, "", ""); resp.StatusCode != http.StatusOK {
			t.Errorf("open path %s without a token: %d %s", p, resp.StatusCode, body)
		}
	}
	if resp, body := adminCall(t, g, "GET", "/api/v1/queues", token, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/v1/queues with the token: %d %s", resp.StatusCode, body)
	}
	if resp, body := adminCall(t, g, "PUT", "/api/v1/queues/audit", "", `{"subscriptions": ["a/#"]}`); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("PUT without a token: %d %s", resp.StatusCode, body)
	}
	if resp, body := adminCall(t, g, "PUT", "/api/v1/queues/audit", token, `{"subscriptions": ["a/#"]}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT with the token: %d %s", resp.StatusCode, body)
	}
	sum := sha256.Sum256([]byte(token))
	id := hex.EncodeToString(sum[:4])
	logged := false
	for _, line := range strings.Split(log.String(), "\n") {
		logged = logged || strings.Contains(line, "admin call") && strings.Contains(line, "method=PUT") &&
			strings.Contains(line, "path=/api/v1/queues/audit") && strings.Contains(line, "by=token:"+id) && strings.Contains(line, "status=201")
	}
	if !logged {
		t.Errorf("no log line for the PUT naming token:%s:\n%s", id, log.String())
	}
	if strings.Contains(log.String(), token) || strings.Contains(log.String(), other) {
		t.Error("a token is in the log")
	}
}

// POST /api/v1/reload re-reads the users file: 200 when it loads, 400
// naming auth.file when it is broken (the store in force stays), 401
// without a token.
func TestAdminReload(t *testing.T) {
	token, entry := newToken(t)
	path := writeUsers(t, filepath.Join(t.TempDir(), "users.yaml"), "alice")
	g := startGateway(t, "--auth.file="+path, "--admin.tokens="+entry)

	writeUsers(t, path, "bob")
	if resp, body := adminCall(t, g, "POST", "/api/v1/reload", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("reload without a token: %d %s", resp.StatusCode, body)
	}
	if canLogIn(g, "bob") {
		t.Fatal("a refused reload reloaded")
	}
	if resp, body := adminCall(t, g, "POST", "/api/v1/reload", token, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d %s", resp.StatusCode, body)
	}
	if !canLogIn(g, "bob") {
		t.Fatal("bob cannot log in after POST /api/v1/reload")
	}
	if err := os.WriteFile(path, []byte(brokenUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, body := adminCall(t, g, "POST", "/api/v1/reload", token, "")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "auth.file") || !strings.Contains(body, "line 2") {
		t.Fatalf("reload of a broken file: %d %s, want 400 naming auth.file and line 2", resp.StatusCode, body)
	}
	if !canLogIn(g, "bob") {
		t.Fatal("a broken file replaced the store in force")
	}
}

// admin.listen beyond loopback needs admin.tokens, admin.tls.clientAuth:
// require or admin.open: "*"; a token entry must be a hash, and the error
// never echoes it.
func TestAdminExposureRefused(t *testing.T) {
	_, entry := newToken(t)
	wantConfigError(t, []string{"--admin.listen=0.0.0.0:0"}, nil, "admin.tokens", "gateway passwd --token")
	wantConfigError(t, []string{"--admin.tokens=s3cret-token"}, nil, "admin.tokens", "sha256:<64 hex digits>")
	if _, err := LoadConfig([]string{"--admin.tokens=s3cret-token"}, nil, io.Discard); strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error echoes the value: %v", err)
	}
	wantConfigError(t, []string{"--admin.open=healthz"}, nil, "admin.open", "not a path")
	f := newTLSFixture(t)
	mtls := []string{"--admin.listen=0.0.0.0:0", "--admin.tls.cert=" + f.files.Cert, "--admin.tls.key=" + f.files.Key, "--admin.tls.clientCA=" + f.files.CA}
	wantConfigError(t, append(mtls, "--admin.tls.clientAuth=request"), nil, "admin.tokens", "beyond loopback")
	for _, args := range [][]string{
		{"--admin.listen=0.0.0.0:0", "--admin.tokens=" + entry},
		{"--admin.listen=0.0.0.0:0", "--admin.open=*"},
		append(mtls, "--admin.tls.clientAuth=require"),
	} {
		if _, err := LoadConfig(append([]string{"--data.dir=" + t.TempDir()}, args...), nil, io.Discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	// In the file, admin.tokens is a YAML list.
	_, entry2 := newToken(t)
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := "admin:\n  listen: 0.0.0.0:0\n  tokens:\n    - " + entry + "\n    - " + entry2 + "\n  open: [/healthz]\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig([]string{"--config", file}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Admin.Tokens) != 2 || !c.Admin.Open["/healthz"] || c.Admin.Open["/readyz"] {
		t.Errorf("from YAML lists: %d tokens, open %v", len(c.Admin.Tokens), c.Admin.Open)
	}
}

// With auth.file, the users file is what both front-ends log clients in
// against: MQTT CONNECT and AMQP SASL PLAIN take alice's password and
// refuse a wrong one, and anonymous clients are refused.
func TestUsersFileServesBothProtocols(t *testing.T) {
	users := writeUsers(t, filepath.Join(t.TempDir(), "users.yaml"), "alice")
	g := startGateway(t, "--auth.file="+users, "--auth.allowAnonymous=false", "--amqp.listen=127.0.0.1:0")

	mqttConnect := func(user, pw string) byte { return mqttConnectCode(t, g, user, pw) }
	if rc := mqttConnect("alice", "alice-pw"); rc != 0 {
		t.Errorf("MQTT alice: CONNACK %#x", rc)
	}
	if rc := mqttConnect("alice", "wrong"); rc != 0x86 {
		t.Errorf("MQTT alice with a wrong password: CONNACK %#x, want 0x86", rc)
	}
	if rc := mqttConnect("", ""); rc != 0x87 {
		t.Errorf("MQTT anonymous: CONNACK %#x, want 0x87", rc)
	}

	amqpLogin := func(user, pw string) error { return amqpLogin(g, user, pw) }
	if err := amqpLogin("alice", "alice-pw"); err != nil {
		t.Errorf("AMQP alice: %v", err)
	}
	if err := amqpLogin("alice", "wrong"); err == nil {
		t.Error("AMQP alice with a wrong password logged in")
	}
}

// mqttConnectCode connects to g with paho (MQTT 5) as user (none when
// "") and returns the CONNACK's reason code.
func mqttConnectCode(t *testing.T, g *Gateway, user, pw string) byte {
	t.Helper()
	conn, err := net.Dial("tcp", g.MQTTAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp := &paho.Connect{ClientID: "c-" + user, CleanStart: true, KeepAlive: 30}
	if user != "" {
		cp.Username, cp.UsernameFlag = user, true
		cp.Password, cp.PasswordFlag = []byte(pw), true
	}
	ca, err := cl.Connect(ctx, cp)
	if ca == nil {
		t.Fatalf("MQTT connect %q: %v", user, err)
	}
	if ca.ReasonCode == 0 {
		_ = cl.Disconnect(&paho.Disconnect{})
	}
	return ca.ReasonCode
}

// amqpLogin logs in to g's AMQP listener with SASL PLAIN.
func amqpLogin(g *Gateway, user, pw string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(user, pw)})
	if err == nil {
		c.Close()
	}
	return err
}
