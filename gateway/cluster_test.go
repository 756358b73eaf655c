package gateway

import (
	"errors"
	"io"
	"testing"
)

// A cluster needs the NATS connection, the shared retained store and a
// node.id that names it in a subject: each missing one is a ConfigError
// naming its key (main exits 2).
func TestClusterConfig(t *testing.T) {
	ok := []string{"--cluster.enabled=true", "--bridge.nats.url=nats://h:1", "--retain.backend=redis", "--node.id=gw-1"}
	c, err := LoadConfig(ok, nil, io.Discard)
	if err != nil || !c.Cluster.Enabled || c.Cluster.Prefix != "gw" {
		t.Fatalf("valid cluster: %v %+v", err, c)
	}
	if c, err := LoadConfig(nil, nil, io.Discard); err != nil || c.Cluster.Enabled {
		t.Fatalf("default: %v enabled=%v", err, c.Cluster.Enabled)
	}
	cases := []struct {
		args []string
		key  string
	}{
		{[]string{"--cluster.enabled=true", "--retain.backend=redis", "--node.id=a"}, "bridge.nats.url"},
		{[]string{"--cluster.enabled=true", "--bridge.nats.url=nats://h:1", "--node.id=a"}, "retain.backend"},
		{[]string{"--cluster.enabled=true", "--bridge.nats.url=nats://h:1", "--retain.backend=redis", "--node.id=host.example"}, "node.id"},
		{append(ok[:len(ok):len(ok)], "--cluster.prefix=gw.*"), "cluster.prefix"},
		{append(ok[:len(ok):len(ok)], "--cluster.prefix=gw."), "cluster.prefix"},
	}
	for _, tc := range cases {
		_, err := LoadConfig(tc.args, nil, io.Discard)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key {
			t.Errorf("%v: got %v, want a ConfigError naming %s", tc.args, err, tc.key)
		}
	}
}
