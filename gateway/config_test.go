package gateway

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c := DefaultConfig()
	if c.MQTT.Listen != "127.0.0.1:1883" || c.AMQP.Listen != "127.0.0.1:5672" || c.AdminListen != "127.0.0.1:8088" ||
		c.DataDir != "./data" || c.RetainBackend != "embedded" || c.NodeID == "" || c.ShutdownTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "g.yaml")
	os.WriteFile(f, []byte("mqtt:\n  listen: 127.0.0.1:1000\n  ws:\n    listen: 127.0.0.1:1001\nretain:\n  backend: memory\n  maxMessages: 7\nadmin:\n  listen: 127.0.0.1:1002\n"), 0o644)
	env := []string{"TOLSEY_MQTT_LISTEN=127.0.0.1:2000", "TOLSEY_MQTT_WS_LISTEN=127.0.0.1:2001", "PATH=/bin", "TOLSEY_RETAIN_MAXPAYLOAD=1KiB"}
	args := []string{"--config", f, "--mqtt.listen=127.0.0.1:3000"}
	c, err := LoadConfig(args, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MQTT.Listen != "127.0.0.1:3000" {
		t.Errorf("flag must beat env and file: %s", c.MQTT.Listen)
	}
	if c.MQTT.WSListen != "127.0.0.1:2001" {
		t.Errorf("env must beat file: %s", c.MQTT.WSListen)
	}
	if c.AdminListen != "127.0.0.1:1002" || c.RetainBackend != "memory" || c.RetainMaxMessages != 7 {
		t.Errorf("file must beat default: %+v", c)
	}
	if c.RetainMaxPayload != 1024 {
		t.Errorf("1KiB = %d", c.RetainMaxPayload)
	}
}

// GATEWAY_* variables, from before the product had a name of its own, are
// still read for one release: below TOLSEY_*, above the file, and named in
// LegacyEnv so that the log can warn.
func TestConfigLegacyEnvPrefix(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "g.yaml")
	os.WriteFile(f, []byte("log:\n  level: error\n"), 0o644)
	env := []string{"GATEWAY_MQTT_LISTEN=127.0.0.1:2000", "TOLSEY_MQTT_LISTEN=127.0.0.1:3000",
		"GATEWAY_LOG_LEVEL=debug", "GATEWAY_RETAIN_BACKEND=memory"}
	c, err := LoadConfig([]string{"--config", f}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MQTT.Listen != "127.0.0.1:3000" {
		t.Errorf("TOLSEY_ must beat GATEWAY_: %s", c.MQTT.Listen)
	}
	if c.LogLevel != "debug" || c.RetainBackend != "memory" {
		t.Errorf("GATEWAY_ must still be read, above the file: level %s, backend %s", c.LogLevel, c.RetainBackend)
	}
	want := []string{"GATEWAY_LOG_LEVEL", "GATEWAY_MQTT_LISTEN", "GATEWAY_RETAIN_BACKEND"}
	if !slices.Equal(c.LegacyEnv, want) {
		t.Errorf("LegacyEnv = %v, want %v", c.LegacyEnv, want)
	}
	if c, err := LoadConfig(nil, []string{"TOLSEY_LOG_LEVEL=warn"}, io.Discard); err != nil || len(c.LegacyEnv) != 0 {
		t.Errorf("no legacy variables: %v %v", err, c.LegacyEnv)
	}
}

// Kubernetes defines TOLSEY_SERVICE_HOST, TOLSEY_PORT_1883_TCP and the like
// in every pod of a namespace with a Service named tolsey: they are not
// keys and must not stop the gateway; a misspelt key still does.
func TestConfigIgnoresKubernetesServiceEnv(t *testing.T) {
	env := []string{"TOLSEY_SERVICE_HOST=10.0.0.1", "TOLSEY_SERVICE_PORT=1883", "TOLSEY_SERVICE_PORT_MQTT=1883",
		"TOLSEY_PORT=tcp://10.0.0.1:1883", "TOLSEY_PORT_1883_TCP=tcp://10.0.0.1:1883", "TOLSEY_PORT_1883_TCP_PROTO=tcp",
		"TOLSEY_PORT_1883_TCP_PORT=1883", "TOLSEY_PORT_1883_TCP_ADDR=10.0.0.1", "TOLSEY_MQTT_SERVICE_HOST=10.0.0.2",
		"GATEWAY_SERVICE_HOST=10.0.0.3", "TOLSEY_LOG_LEVEL=warn"}
	c, err := LoadConfig(nil, env, io.Discard)
	if err != nil || c.LogLevel != "warn" {
		t.Fatalf("%v %+v", err, c)
	}
	if _, err := LoadConfig(nil, []string{"TOLSEY_MQTT_LISTN=1"}, io.Discard); err == nil {
		t.Fatal("a misspelt key must still be refused")
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("mqtt:\n  lisen: x\n"), 0o644)
	cases := []struct {
		args []string
		env  []string
		key  string
	}{
		{args: []string{"--retain.backend=mongo"}, key: "retain.backend"},
		{args: []string{"--mqtt.listen=nope"}, key: "mqtt.listen"},
		{args: []string{"--mqtt.listen=127.0.0.1:70000"}, key: "mqtt.listen"},
		{args: []string{"--retain.maxMessages=-1"}, key: "retain.maxMessages"},
		{args: []string{"--shutdown.timeout=soon"}, key: "shutdown.timeout"},
		{args: []string{"--bridge.nats.writerStall=soon"}, key: "bridge.nats.writerStall"},
		{args: []string{"--bridge.nats.writerStall=-1ms"}, key: "bridge.nats.writerStall"},
		{args: []string{"--amqp.maxFrameSize=100"}, key: "amqp.maxFrameSize"},
		{args: []string{"--amqp.users=alice"}, key: "amqp.users"},
		{args: []string{"--amqp.maxSessions=0"}, key: "amqp.maxSessions"},
		{args: []string{"--amqp.maxSessions=65537"}, key: "amqp.maxSessions"},
		{args: []string{"--amqp.maxLinksPerConnection=0"}, key: "amqp.maxLinksPerConnection"},
		{args: []string{"--config", bad}, key: "mqtt.lisen"},
		{env: []string{"TOLSEY_MQTT_LISEN=1"}, key: "TOLSEY_MQTT_LISEN"},
		{env: []string{"TOLSEY_LOG_FORMAT=xml"}, key: "log.format"},
		{env: []string{"GATEWAY_MQTT_LISEN=1"}, key: "GATEWAY_MQTT_LISEN"},
		{env: []string{"GATEWAY_LOG_FORMAT=xml"}, key: "log.format"},
		{args: []string{"--no.such.key=1"}, key: ""},
		{args: []string{"--mqtt.maxTopicLevels=0"}, key: "mqtt.maxTopicLevels"},
		{args: []string{"--mqtt.maxTopicLevels=1025"}, key: "mqtt.maxTopicLevels"},
		{args: []string{"--mqtt.maxTopicLength=65536"}, key: "mqtt.maxTopicLength"},
		// bbolt refuses keys over 32 KiB: the embedded store could not hold such a topic.
		{args: []string{"--mqtt.maxTopicLength=40000"}, key: "mqtt.maxTopicLength"},
	}
	for _, c := range cases {
		wantConfigError(t, c.args, c.env, c.key, "")
	}
}

// wantConfigError checks that args and env are refused with a one-line
// ConfigError naming key and saying msg.
func wantConfigError(t *testing.T, args, env []string, key, msg string) {
	t.Helper()
	_, err := LoadConfig(args, env, io.Discard)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("%v %v: want ConfigError, got %v", args, env, err)
		return
	}
	if ce.Key != key || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), msg) {
		t.Errorf("%v %v: error %q names key %q, want %q on one line saying %q", args, env, err, ce.Key, key, msg)
	}
}

func TestHelpListsEveryKey(t *testing.T) {
	var b strings.Builder
	if _, err := LoadConfig([]string{"--help"}, nil, &b); !errors.Is(err, ErrHelp) {
		t.Fatal(err)
	}
	for _, d := range keyDefs {
		if !strings.Contains(b.String(), "--"+d.name) {
			t.Errorf("--help lacks %s", d.name)
		}
	}
}

// The sample config must document every key and load cleanly.
func TestSampleConfigHasEveryKey(t *testing.T) {
	path := "../deploy/gateway.yaml"
	if _, err := LoadConfig([]string{"--config", path}, nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, d := range keyDefs {
		leaf := d.name[strings.LastIndexByte(d.name, '.')+1:]
		if !strings.Contains(string(b), leaf+":") {
			t.Errorf("deploy/gateway.yaml lacks %s", d.name)
		}
	}
}

// bridge.nats.writerStall: 5 ms by default, 0 is no stall (the bridge's
// negative), any other duration is the bound.
func TestConfigBridgeWriterStall(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, 5 * time.Millisecond}, {[]string{"--bridge.nats.writerStall=0"}, 0}, {[]string{"--bridge.nats.writerStall=20ms"}, 20 * time.Millisecond}} {
		cfg, err := LoadConfig(c.args, nil, io.Discard)
		if err != nil || cfg.Bridge.NATS.WriterStall != c.want {
			t.Errorf("%v: %v, writerStall %v, want %v", c.args, err, cfg.Bridge.NATS.WriterStall, c.want)
		}
	}
	if writeTimeout(0) >= 0 {
		t.Error("writerStall 0 must reach the bridge as negative: its 0 is the default")
	}
	// bridge.amqp[i].writerStall: the same for an AMQP bridge's QoS 0 rules.
	amqp := func(stall string) []string {
		if stall != "" {
			stall = `"writerStall":` + stall + `,`
		}
		return []string{`--bridge.amqp=[{"name":"a","url":"amqp://127.0.0.1:5672",` + stall + `"rules":[{"direction":"out","local":"t/#","remote":"q","qos":0}]}]`}
	}
	for _, c := range []struct {
		stall string
		want  time.Duration
	}{{"", 0}, {`"20ms"`, 20 * time.Millisecond}, {`"0"`, -1}, {`0`, -1}} {
		cfg, err := LoadConfig(amqp(c.stall), nil, io.Discard)
		if err != nil || cfg.Bridge.AMQP[0].WriterStall != c.want {
			t.Errorf("bridge.amqp writerStall %s: %v, %+v, want %v", c.stall, err, cfg, c.want)
		}
	}
	for _, bad := range []string{`"soon"`, `"-1ms"`, `5`} {
		wantConfigError(t, amqp(bad), nil, "bridge.amqp[0].writerStall", "not a duration")
	}
}

func TestConfigTopicLimits(t *testing.T) {
	c := DefaultConfig()
	if c.MQTT.MaxTopicLevels != 128 || c.MQTT.MaxTopicLength != 4096 {
		t.Fatalf("defaults: %d levels, %d bytes", c.MQTT.MaxTopicLevels, c.MQTT.MaxTopicLength)
	}
	// The embedded store's key limit binds only that backend.
	_, err := LoadConfig([]string{"--retain.backend=memory", "--mqtt.maxTopicLength=64KiB", "--mqtt.maxTopicLevels=1024"}, nil, io.Discard)
	if err == nil {
		t.Fatal("64 KiB is over MQTT's 65,535 bytes")
	}
	c, err = LoadConfig([]string{"--retain.backend=memory", "--mqtt.maxTopicLength=65535", "--mqtt.maxTopicLevels=1024"}, nil, io.Discard)
	if err != nil || c.MQTT.MaxTopicLength != 65535 || c.MQTT.MaxTopicLevels != 1024 {
		t.Fatalf("memory backend, MQTT's own limits: %v %+v", err, c)
	}
}

// bridge.nats.rules is a YAML list in the file and a JSON array in env and
// flags; each rule is checked and a bad one named down to its field.
func TestConfigBridgeRules(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "g.yaml")
	os.WriteFile(f, []byte(`bridge:
  nats:
    url: nats://127.0.0.1:4222, nats://127.0.0.1:4223
    rules:
      - {direction: out, local: "sensors/#", remote: "iot.sensors.>", qos: 0}
      - {direction: out, local: "alarms/+/x", remote: "site1.alarms.*.x", qos: 1, jetstream: true}
      - direction: in
        local: "commands/#"
        remote: "site1.commands.>"
        qos: 1
        jetstream: {stream: COMMANDS, durable: gw-site1}
`), 0o644)
	c, err := LoadConfig([]string{"--config", f, "--node.id=n1"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Bridge.NATS
	if len(n.URLs) != 2 || n.Name != "tolsey-n1" || len(n.Rules) != 3 {
		t.Fatalf("bridge config: %+v", n)
	}
	if r := n.Rules[2]; r.Direction != "in" || r.Local != "commands/#" || r.QoS != 1 || r.JetStream.Stream != "COMMANDS" || r.JetStream.Durable != "gw-site1" {
		t.Errorf("rule 2: %+v", r)
	}
	if r := n.Rules[1]; !r.JetStream.Enabled || r.QoS != 1 {
		t.Errorf("rule 1: %+v", r)
	}
	env := []string{`TOLSEY_BRIDGE_NATS_URL=nats://h:1`, `TOLSEY_BRIDGE_NATS_RULES=[{"direction":"both","local":"a/#","remote":"a.>"}]`}
	c, err = LoadConfig(nil, env, io.Discard)
	if err != nil || len(c.Bridge.NATS.Rules) != 1 || c.Bridge.NATS.Rules[0].Direction != "both" {
		t.Fatalf("env rules: %v %+v", err, c)
	}
	if c.Bridge.Buffer.DropOldest || c.Bridge.Buffer.MaxBytes != 1<<30 {
		t.Errorf("buffer defaults: %+v", c.Bridge.Buffer)
	}

	url := "--bridge.nats.url=nats://h:1"
	cases := []struct {
		rules string
		key   string
	}{
		{`[{"direction":"sideways","local":"a","remote":"a"}]`, "bridge.nats.rules[0].direction"},
		{`[{"direction":"out","local":"a","remote":"a"},{"direction":"out","local":"a/#/b","remote":"a.>"}]`, "bridge.nats.rules[1].local"},
		{`[{"direction":"out","local":"a/#","remote":"a.>","jetstream":true}]`, "bridge.nats.rules[0].jetstream"},
		{`[{"direction":"in","local":"a/#","remote":"a.>","qos":1,"jetstream":true}]`, "bridge.nats.rules[0].jetstream"},
		{`[{"direction":"out","local":"a/#","remote":"a..>"}]`, "bridge.nats.rules[0].remote"},
		{`[{"direction":"out","local":"a/+","remote":"a.>"}]`, "bridge.nats.rules[0].remote"},
		{`[{"direction":"out","local":"a","remote":"a","qos":2}]`, "bridge.nats.rules[0].qos"},
		{`[{"direction":"out","local":"a","remote":"a","colour":"red"}]`, "bridge.nats.rules[0].colour"},
		{`[{"direction":"in","local":"m/#","remote":"$MQTT.>"}]`, "bridge.nats.rules[0].remote"},
		{`{"direction":"out"}`, "bridge.nats.rules"},
		{`[nope`, "bridge.nats.rules"},
	}
	for _, tc := range cases {
		_, err := LoadConfig([]string{url, "--bridge.nats.rules=" + tc.rules}, nil, io.Discard)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key {
			t.Errorf("%s: got %v, want a ConfigError naming %s", tc.rules, err, tc.key)
		}
	}
	for _, key := range []string{"bridge.nats.tls.ca", "bridge.nats.creds", "bridge.nats.nkey"} {
		_, err := LoadConfig([]string{url, "--" + key + "=" + filepath.Join(dir, "missing.pem")}, nil, io.Discard)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%s unreadable: got %v", key, err)
		}
	}
}
