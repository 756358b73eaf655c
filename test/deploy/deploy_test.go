// Package deploy checks the packaging in deploy/ against the real binary:
// every sample configuration loads (gateway config check), every
// environment variable and flag the manifests set is a key the gateway
// accepts, the probes and scrape paths answer without a token, the
// Dockerfile's build line builds a static binary that says its version,
// the systemd unit verifies, and every metric the dashboard and the alert
// rules query is one the gateway exports. A key renamed in
// gateway/config.go or a metric renamed in the code fails here, not in an
// operator's cluster.
package deploy

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tolsey/tolsey/test/internal/gwproc"
)

const root = "../.."

// buildVersion is what the binary under test is stamped with, the way the
// Dockerfile does it.
const buildVersion = "9.8.7-test"

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploy-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "gateway")
	code := 1
	if err := dockerBuild(bin, "amd64", ""); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// dockerfileBuild is the Dockerfile's `go build` RUN line, continuation
// lines joined.
func dockerfileBuild() (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "deploy/Dockerfile"))
	if err != nil {
		return "", err
	}
	joined := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, l := range strings.Split(joined, "\n") {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") {
			return strings.TrimPrefix(l, "RUN "), nil
		}
	}
	return "", errors.New("deploy/Dockerfile: no RUN line with go build")
}

// dockerBuild runs the Dockerfile's build line here, with its build
// arguments set as Docker would, writing the binary to out.
func dockerBuild(out, arch, variant string) error {
	line, err := dockerfileBuild()
	if err != nil {
		return err
	}
	line = strings.ReplaceAll(line, "/out/gateway", out)
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TARGETOS=linux", "TARGETARCH="+arch, "TARGETVARIANT="+variant,
		"VERSION="+buildVersion, "COMMIT=0123456789abcdef", "DATE=2026-12-01T00:00:00Z")
	if b, err := cmd.CombinedOutput(); err != nil {
		return &buildError{line, err, b}
	}
	return nil
}

type buildError struct {
	line string
	err  error
	out  []byte
}

func (e *buildError) Error() string {
	return "Dockerfile build line failed: " + e.line + ": " + e.err.Error() + "\n" + string(e.out)
}

func TestDockerfileBuildsStaticVersionedBinary(t *testing.T) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	for _, want := range []string{buildVersion, "0123456789abcdef", "2026-12-01T00:00:00Z"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--version = %q, want it to name %s", out, want)
		}
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary has a dynamic loader: not static (CGO_ENABLED=0 missing?), so it cannot run on distroless/static")
		}
	}
	// The other architectures the Dockerfile names (test/run's only
	// cross-builds: they prove the code builds without cgo for the edge
	// boxes): armv7 needs GOARM from TARGETVARIANT (v7 -> 7).
	for _, c := range []struct {
		arch, variant string
		machine       elf.Machine
	}{{"arm64", "", elf.EM_AARCH64}, {"arm", "v7", elf.EM_ARM}} {
		out := filepath.Join(t.TempDir(), "gateway-"+c.arch+c.variant)
		if err := dockerBuild(out, c.arch, c.variant); err != nil {
			t.Fatal(err)
		}
		ef, err := elf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if ef.Machine != c.machine {
			t.Errorf("%s%s build is %v, want %v", c.arch, c.variant, ef.Machine, c.machine)
		}
		ef.Close()
	}
}

// docs are the YAML documents of a file.
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	d := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m map[string]any
		err := d.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

func TestEveryYAMLParses(t *testing.T) {
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if len(docs(t, rel)) == 0 {
			t.Errorf("%s: no YAML document", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// check runs `gateway config check file args...` with env added.
func check(t *testing.T, file string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"config", "check", file}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("gateway config check %s %v (env %v): %v\n%s", file, args, env, err, out)
	}
}

func TestConfigCheckRefusesABadKey(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("mqtt:\n  lisen: 127.0.0.1:1883\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "config", "check", bad)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "mqtt.lisen") {
		t.Fatalf("config check of a file with mqtt.lisen: %v, stderr %q; want exit 2 naming mqtt.lisen", err, stderr.String())
	}
}

func TestSampleConfigsLoad(t *testing.T) {
	check(t, filepath.Join(root, "deploy/gateway.yaml"), nil)
	// compose.yaml: its trial config with the environment it sets.
	compose := docs(t, "deploy/compose.yaml")[0]
	gw := compose["services"].(map[string]any)["gateway"].(map[string]any)
	var env []string
	for k, v := range gw["environment"].(map[string]any) {
		env = append(env, k+"="+v.(string))
	}
	check(t, filepath.Join(root, "deploy/compose/gateway.yaml"), env)
	// The image's own configuration: refused as it stands (listeners beyond
	// loopback, nothing protecting them), accepted with what docs/deploy.md
	// tells a user to add.
	img := filepath.Join(root, "deploy/container.yaml")
	cmd := exec.Command(bin, "config", "check", img)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "auth.allowAnonymous") {
		t.Errorf("deploy/container.yaml alone: %v %q; want exit 2 naming auth.allowAnonymous (secure by default)", err, stderr.String())
	}
	check(t, img, []string{"TOLSEY_AUTH_ALLOWANONYMOUS=true",
		"TOLSEY_ADMIN_TOKENS=sha256:0000000000000000000000000000000000000000000000000000000000000000"})
	// The Dockerfile installs that file where its CMD reads it, and sets no
	// TOLSEY_* ENV (which would beat a file mounted over it).
	b, err := os.ReadFile(filepath.Join(root, "deploy/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	if !strings.Contains(df, "COPY deploy/container.yaml /etc/tolsey/gateway.yaml") ||
		!strings.Contains(df, `CMD ["--config", "/etc/tolsey/gateway.yaml"]`) {
		t.Errorf("deploy/Dockerfile does not install deploy/container.yaml as the CMD's --config")
	}
	if regexp.MustCompile(`(?m)^ENV .*TOLSEY_`).MatchString(df) {
		t.Errorf("deploy/Dockerfile sets TOLSEY_* in ENV: it would override a mounted configuration file")
	}
}

// kube is the Kubernetes sample: the ConfigMap's gateway.yaml and the
// Secret's users file written out, and the container's env and args.
type kube struct {
	config, users string
	env           []string // name=value, secrets resolved from the Secret
	args          []string
	probes        []string // HTTP paths of the probes
	scrape        string   // prometheus.io/path
}

func loadKube(t *testing.T) kube {
	t.Helper()
	dir := t.TempDir()
	var k kube
	secret := map[string]string{}
	for _, f := range []string{"deploy/k8s/configmap.yaml", "deploy/k8s/secret.yaml", "deploy/k8s/statefulset.yaml", "deploy/k8s/service.yaml", "deploy/k8s/pdb.yaml", "deploy/k8s/namespace.yaml"} {
		for _, d := range docs(t, f) {
			if d["apiVersion"] == nil || d["kind"] == nil || d["metadata"].(map[string]any)["name"] == nil {
				t.Errorf("%s: a document without apiVersion, kind or metadata.name", f)
			}
			switch d["kind"] {
			case "ConfigMap":
				k.config = filepath.Join(dir, "gateway.yaml")
				write(t, k.config, d["data"].(map[string]any)["gateway.yaml"].(string))
			case "Secret":
				for key, v := range d["stringData"].(map[string]any) {
					secret[key] = v.(string)
				}
			}
		}
	}
	k.users = filepath.Join(dir, "users.yaml")
	write(t, k.users, secret["users.yaml"])
	ss := docs(t, "deploy/k8s/statefulset.yaml")[0]
	tmpl := ss["spec"].(map[string]any)["template"].(map[string]any)
	k.scrape = tmpl["metadata"].(map[string]any)["annotations"].(map[string]any)["prometheus.io/path"].(string)
	c := tmpl["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	for _, a := range c["args"].([]any) {
		k.args = append(k.args, a.(string))
	}
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		v, _ := e["value"].(string)
		if from, ok := e["valueFrom"].(map[string]any); ok {
			switch {
			case from["secretKeyRef"] != nil:
				key := from["secretKeyRef"].(map[string]any)["key"].(string)
				var ok bool
				if v, ok = secret[key]; !ok {
					t.Errorf("statefulset: env %s refers to Secret key %s, which secret.yaml lacks", e["name"], key)
				}
			case from["fieldRef"] != nil:
				v = "tolsey-gateway-0"
			}
		}
		k.env = append(k.env, e["name"].(string)+"="+v)
	}
	for _, p := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		pr, ok := c[p].(map[string]any)
		if !ok {
			t.Errorf("statefulset: no %s", p)
			continue
		}
		k.probes = append(k.probes, pr["httpGet"].(map[string]any)["path"].(string))
	}
	return k
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesSampleRuns starts the binary as the StatefulSet would (its
// config, args, environment and Secret; loopback ports instead of the pod's
// addresses) and asks the probe and scrape paths without a token, and an
// admin path with none (refused: the Secret's token hash matches nothing).
func TestKubernetesSampleRuns(t *testing.T) {
	k := loadKube(t)
	if len(k.args) != 2 || k.args[0] != "--config" {
		t.Fatalf("statefulset args %v, want --config FILE", k.args)
	}
	local := []string{"--auth.file=" + k.users, "--data.dir=" + t.TempDir()}
	check(t, k.config, k.env, append(local, "--mqtt.listen=127.0.0.1:0", "--mqtt.ws.listen=127.0.0.1:0",
		"--amqp.listen=127.0.0.1:0", "--admin.listen=127.0.0.1:0")...)
	for _, e := range k.env {
		name, v, _ := strings.Cut(e, "=")
		t.Setenv(name, v)
	}
	p := gwproc.Start(t, bin, append([]string{"--config=" + k.config}, local...)...)
	for _, path := range append(k.probes, k.scrape) {
		if code, _ := get(t, "http://"+p.Admin+path); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (a probe or the scrape would fail)", path, code)
		}
	}
	if code, _ := get(t, "http://"+p.Admin+"/api/v1/retained"); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/retained without a token: %d, want 401", code)
	}
	_, body := get(t, "http://"+p.Admin+k.scrape)
	if !strings.Contains(body, `tolsey_build_info{`) || !strings.Contains(body, `version="`+buildVersion+`"`) {
		t.Errorf("/metrics has no tolsey_build_info with version %s", buildVersion)
	}
	if !strings.Contains(body, "\ntolsey_ready 1\n") {
		t.Errorf("/metrics: tolsey_ready is not 1 on a ready gateway")
	}
	// The container's HEALTHCHECK command.
	if out, err := exec.Command(bin, "health", "http://"+p.Admin+"/readyz").CombinedOutput(); err != nil {
		t.Errorf("gateway health: %v\n%s", err, out)
	}
	if err := exec.Command(bin, "health", "http://"+p.Admin+"/api/v1/retained").Run(); err == nil {
		t.Errorf("gateway health on a 401 path exited 0")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy/systemd/gateway.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"DynamicUser=yes", "ProtectSystem=strict", "StateDirectory=", "NoNewPrivileges=yes"} {
		if !strings.Contains(unit, "\n"+want) {
			t.Errorf("gateway.service lacks %s", want)
		}
	}
	if regexp.MustCompile(`(?m)^AmbientCapabilities=`).MatchString(unit) {
		t.Errorf("gateway.service grants capabilities by default; only a listener below 1024 needs CAP_NET_BIND_SERVICE")
	}
	// Its flags are keys the binary accepts (with the sample config).
	m := regexp.MustCompile(`(?m)^ExecStart=\S+ (.*)$`).FindStringSubmatch(unit)
	if m == nil {
		t.Fatal("gateway.service: no ExecStart")
	}
	var flags []string
	for _, f := range strings.Fields(m[1]) {
		if strings.HasPrefix(f, "--config") || f == "/etc/tolsey/gateway.yaml" {
			continue
		}
		flags = append(flags, strings.ReplaceAll(f, "${STATE_DIRECTORY}", t.TempDir()))
	}
	check(t, filepath.Join(root, "deploy/gateway.yaml"), nil, flags...)
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is needed to verify the unit (Debian: systemd); test/run installs it")
	}
	// verify wants the executables to exist: point them at the test binary.
	local := filepath.Join(t.TempDir(), "tolsey-gateway.service")
	write(t, local, strings.ReplaceAll(unit, "/usr/local/bin/gateway", bin))
	if out, err := exec.Command(sa, "verify", local).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// exported is every metric name the gateway's code registers.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	re := regexp.MustCompile(`"(tolsey_[a-z0-9_]+)"`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "third_party" || d.Name() == "test" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var metricRef = regexp.MustCompile(`\b((?:tolsey|process|go)_[a-z0-9_]+)\b`)

// checkQueries fails for a metric a query names that the gateway does not
// export (a histogram's _bucket/_sum/_count series count as the histogram).
func checkQueries(t *testing.T, where string, queries []string, names map[string]bool) {
	t.Helper()
	if len(queries) == 0 {
		t.Fatalf("%s: no queries found", where)
	}
	for _, q := range queries {
		for _, m := range metricRef.FindAllString(q, -1) {
			if strings.HasPrefix(m, "process_") || strings.HasPrefix(m, "go_") {
				continue // the Go and process collectors
			}
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if names[strings.TrimSuffix(m, suf)] {
					base = strings.TrimSuffix(m, suf)
				}
			}
			if !names[base] {
				t.Errorf("%s: query %q names %s, which the gateway does not export", where, q, m)
			}
		}
	}
}

func TestDashboardAndAlertsNameRealMetrics(t *testing.T) {
	names := exported(t)
	if !names["tolsey_messages_in_total"] {
		t.Fatalf("found %d metric names in the source, not tolsey_messages_in_total: the scan is broken", len(names))
	}
	var rules []string
	for _, g := range docs(t, "deploy/prometheus/alerts.yaml")[0]["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			if r["alert"] == nil || r["expr"] == nil {
				t.Errorf("alerts.yaml: a rule without alert or expr: %v", r)
				continue
			}
			rules = append(rules, r["expr"].(string))
		}
	}
	checkQueries(t, "deploy/prometheus/alerts.yaml", rules, names)

	b, err := os.ReadFile(filepath.Join(root, "deploy/grafana/tolsey-gateway.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana dashboard: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	checkQueries(t, "deploy/grafana/tolsey-gateway.json", exprs, names)
	// Which exported metrics neither shows: informative, for whoever adds one.
	var unused []string
	all := strings.Join(append(rules, exprs...), " ")
	for n := range names {
		if !strings.Contains(all, n) {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	t.Logf("metrics neither the dashboard nor an alert uses: %v", unused)
}
