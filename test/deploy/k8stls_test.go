package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tolsey/tolsey/test/internal/certgen"
)

// commentedTLS is a commented line of a tls section in the ConfigMap's
// gateway.yaml: "# tls:" or "#   listen|cert|key: ..." under it.
var commentedTLS = regexp.MustCompile(`(?m)^(\s*)# (tls:|  (?:listen|cert|key): .*)$`)

// TestKubernetesTLSSample: the commented TLS part of the Kubernetes sample
// (docs/deploy.md, "TLS on Kubernetes") works once uncommented: the
// StatefulSet mounts the Secret tolsey-gateway-tls where the ConfigMap's
// tls sections read tls.crt and tls.key, and the configuration loads with
// a real certificate there.
func TestKubernetesTLSSample(t *testing.T) {
	k := loadKube(t)
	ss := docs(t, "deploy/k8s/statefulset.yaml")[0]
	spec := ss["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	mount := ""
	for _, v := range spec["volumes"].([]any) {
		v := v.(map[string]any)
		if s, ok := v["secret"].(map[string]any); ok && s["secretName"] == "tolsey-gateway-tls" {
			if s["optional"] != true {
				t.Errorf("the volume of tolsey-gateway-tls is not optional: the pod would not start without the Secret")
			}
			for _, m := range spec["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any) {
				if m := m.(map[string]any); m["name"] == v["name"] {
					mount, _ = m["mountPath"].(string)
				}
			}
		}
	}
	if mount == "" {
		t.Fatal("statefulset: no volume mounts the Secret tolsey-gateway-tls")
	}
	raw, err := os.ReadFile(k.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := commentedTLS.ReplaceAllString(string(raw), "$1$2")
	if n := strings.Count(cfg, mount+"/tls.crt"); n != 2 || !strings.Contains(cfg, mount+"/tls.key") {
		t.Fatalf("uncommented, the ConfigMap names %s/tls.crt %d times, want 2 (mqtt.tls, amqp.tls):\n%s", mount, n, cfg)
	}
	dir := t.TempDir()
	ca, err := certgen.NewCA("k8s-test")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Write(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "gateway.yaml")
	write(t, f, strings.ReplaceAll(cfg, mount+"/", dir+"/"))
	check(t, f, k.env, "--auth.file="+k.users, "--data.dir="+t.TempDir(), "--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=127.0.0.1:0",
		"--mqtt.tls.listen=127.0.0.1:0", "--amqp.listen=127.0.0.1:0", "--amqp.tls.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0")
}
