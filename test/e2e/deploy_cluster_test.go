package e2e

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/tolsey/tolsey/gateway"
	"github.com/tolsey/tolsey/test/internal/gwproc"
)

// deployDir is deploy/cluster, from test/e2e.
const deployDir = "../../deploy/cluster"

// yamlDocs parses every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	d := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		err := d.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, doc)
	}
}

// TestDeployClusterFiles validates what of deploy/cluster can be run
// without containers (docs/cluster.md, "Deploying a cluster"): the
// gateway configuration (the compose file's and the Kubernetes
// ConfigMap's) loads, and the real binary starts with it and answers
// /readyz on a NATS and a Redis; haproxy -c accepts haproxy.cfg; NATS
// reads nats.conf; the compose file and the manifests parse and hold what
// the docs say.
func TestDeployClusterFiles(t *testing.T) {
	// The ConfigMap's configuration is the compose file's but for the
	// names of NATS and Redis.
	var cm string
	var sts map[string]any
	for _, doc := range yamlDocs(t, filepath.Join(deployDir, "k8s/gateway.yaml")) {
		switch doc["kind"] {
		case "ConfigMap":
			cm = doc["data"].(map[string]any)["gateway.yaml"].(string)
		case "StatefulSet":
			sts = doc
		}
	}
	if cm == "" || sts == nil {
		t.Fatal("k8s/gateway.yaml: no ConfigMap gateway.yaml or no StatefulSet")
	}
	cmFile := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cmFile, []byte(cm), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(deployDir, "gateway.yaml"), cmFile} {
		cfg, err := gateway.LoadConfig([]string{"--config", file}, []string{"TOLSEY_NODE_ID=gw1"}, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !cfg.Cluster.Enabled || cfg.NodeID != "gw1" || cfg.RetainBackend != "redis" || len(cfg.Bridge.NATS.URLs) == 0 {
			t.Errorf("%s: cluster %v, node %q, retain %s, NATS %v", file, cfg.Cluster.Enabled, cfg.NodeID, cfg.RetainBackend, cfg.Bridge.NATS.URLs)
		}
	}
	spec := sts["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	if p := c["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["path"]; p != "/readyz" {
		t.Errorf("StatefulSet readiness probe on %v, want /readyz", p)
	}
	kinds := map[any]int{}
	for _, f := range []string{"k8s/gateway.yaml", "k8s/external.yaml"} {
		for _, doc := range yamlDocs(t, filepath.Join(deployDir, f)) {
			kinds[doc["kind"]]++
		}
	}
	if kinds["Service"] != 4 {
		t.Errorf("manifests hold %d Services, want 4 (headless, MQTT/AMQP, NATS, Redis): %v", kinds["Service"], kinds)
	}

	compose := yamlDocs(t, filepath.Join(deployDir, "compose.yaml"))[0]
	services := compose["services"].(map[string]any)
	for _, s := range []string{"gw1", "gw2", "gw3", "nats1", "nats2", "nats3", "redis", "lb"} {
		if services[s] == nil {
			t.Errorf("compose.yaml: no service %s", s)
		}
	}

	natsOpts, err := natsserver.ProcessConfigFile(filepath.Join(deployDir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats.conf: %v", err)
	}
	if !natsOpts.JetStream || len(natsOpts.Routes) != 3 || natsOpts.Cluster.Name == "" {
		t.Errorf("nats.conf: JetStream %v, %d routes, cluster %q", natsOpts.JetStream, len(natsOpts.Routes), natsOpts.Cluster.Name)
	}

	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy not installed (Debian: apt-get install haproxy): deploy/cluster/haproxy.cfg cannot be checked")
	}
	if out, err := exec.Command(haproxy, "-c", "-f", filepath.Join(deployDir, "haproxy.cfg")).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "Configuration file is valid") {
		t.Errorf("haproxy -c: %v\n%s", err, out)
	}

	// The real binary with the file: flags move its listeners to free
	// loopback ports and point it at this test's NATS and Redis.
	s := startNATS(t, 0, "")
	r := startRedis(t)
	bin := buildGatewayBinary(t)
	p := gwproc.Start(t, bin, "--config", filepath.Join(deployDir, "gateway.yaml"), "--mqtt.listen=127.0.0.1:0",
		"--admin.listen=127.0.0.1:0", "--amqp.listen=127.0.0.1:0", "--data.dir="+t.TempDir(), "--node.id=gw1",
		"--bridge.nats.url="+s.ClientURL(), "--retain.redis.url="+r.URL(), "--log.format=text")
	if code, body := httpDo(t, "GET", "http://"+p.Admin+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, _ := httpDo(t, "GET", "http://"+p.Admin+"/api/v1/cluster"); code != 401 {
		t.Errorf("/api/v1/cluster without the token: %d, want 401", code)
	}
}
