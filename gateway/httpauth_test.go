package gateway

import (
	"io"
	"testing"

	"github.com/tolsey/tolsey/core/auth/httpauth/httpauthtest"
)

// auth.http.* are checked at start: a URL that is not http(s), a zero
// time-out; and the hook alone counts as authentication for a listener
// beyond loopback (no auth.allowAnonymous: true needed, and anonymous
// clients are then refused).
func TestAuthHTTPConfig(t *testing.T) {
	wantConfigError(t, []string{"--auth.http.url=ftp://ids.example/auth"}, nil, "auth.http.url", "http:// or https://")
	wantConfigError(t, []string{"--auth.http.url=ids.example/auth"}, nil, "auth.http.url", "http:// or https://")
	wantConfigError(t, []string{"--auth.http.url=http://ids.example/auth", "--auth.http.timeout=0s"}, nil, "auth.http.timeout", "above 0")
	c, err := LoadConfig([]string{"--data.dir=" + t.TempDir(), "--mqtt.listen=0.0.0.0:0",
		"--auth.http.url=https://ids.example/auth", "--auth.http.cacheTTL=1m"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.AllowAnonymous || c.Auth.HTTP.URL != "https://ids.example/auth" || c.Auth.HTTP.CacheTTL.Seconds() != 60 || c.Auth.HTTP.Timeout.Seconds() != 2 {
		t.Errorf("auth: %+v", c.Auth)
	}
}

// With auth.http.url and no auth.file, both front-ends let in whom the
// identity service allows and refuse the rest.
func TestAuthHTTPServesBothProtocols(t *testing.T) {
	svc := httpauthtest.New(t)
	svc.Allow("dave", "dave-pw")
	g := startGateway(t, "--auth.http.url="+svc.URL, "--amqp.listen=127.0.0.1:0", "--auth.allowAnonymous=false")
	if rc := mqttConnectCode(t, g, "dave", "dave-pw"); rc != 0 {
		t.Errorf("MQTT dave: CONNACK %#x", rc)
	}
	if rc := mqttConnectCode(t, g, "dave", "wrong"); rc != 0x86 {
		t.Errorf("MQTT dave with a wrong password: CONNACK %#x, want 0x86", rc)
	}
	if rc := mqttConnectCode(t, g, "", ""); rc != 0x87 {
		t.Errorf("MQTT anonymous: CONNACK %#x, want 0x87", rc)
	}
	if err := amqpLogin(g, "dave", "dave-pw"); err != nil {
		t.Errorf("AMQP dave: %v", err)
	}
	if err := amqpLogin(g, "dave", "wrong"); err == nil {
		t.Error("AMQP dave with a wrong password logged in")
	}
}
