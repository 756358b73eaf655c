package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goList runs the go command in the module's root directory.
func goList(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// moduleGraph reads the module's packages and their imports, test imports
// included, with `go list -json`.
func moduleGraph(t *testing.T) (module string, pkgs []string, imports []Import) {
	t.Helper()
	gomod := strings.TrimSpace(string(goList(t, ".", "env", "GOMOD")))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatal("not inside the module: go env GOMOD is empty")
	}
	root := filepath.Dir(gomod)
	module = strings.TrimSpace(string(goList(t, root, "list", "-m")))
	out := goList(t, root, "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p.ImportPath)
		for _, to := range p.Imports {
			imports = append(imports, Import{From: p.ImportPath, To: to})
		}
		for _, to := range slices.Concat(p.TestImports, p.XTestImports) {
			imports = append(imports, Import{From: p.ImportPath, To: to, Test: true})
		}
	}
	return module, pkgs, imports
}

// TestImportRules holds the module to the rules of docs/architecture.md.
func TestImportRules(t *testing.T) {
	module, pkgs, imports := moduleGraph(t)
	// The graph must be the real one: a loader that lost the imports, or
	// the test imports, would pass every rule.
	for _, want := range []Import{
		{From: "mqtt", To: "core"},
		{From: "amqp", To: "amqp/internal/frames"},
		{From: "gateway", To: "mqtt"},
		{From: "cmd/gateway", To: "gateway"},
		{From: "retain/redis", To: "retain/redistest", Test: true},
		{From: "test/e2e", To: "gateway", Test: true},
	} {
		want.From, want.To = module+"/"+want.From, module+"/"+want.To
		if !slices.Contains(imports, want) {
			t.Fatalf("go list did not report %+v: the graph is not the module's", want)
		}
	}
	for _, v := range Check(module, pkgs, imports, Rules, Rooms) {
		t.Error(v)
	}
}

// TestEachRuleCanFail feeds the checker made-up imports: each rule must
// catch the one that breaks it and let the allowed ones through, so that
// TestImportRules passing means something.
func TestEachRuleCanFail(t *testing.T) {
	const mod = "example.org/m"
	forbidden := []struct {
		rule     string
		from, to string
		test     bool
	}{
		{"the core imports nothing of ours", "core", "retain", false},
		{"the core imports nothing of ours", "core/metrics", "gateway", false},
		{"the core imports nothing of ours", "core", "core/metrics", false},
		{"the core imports nothing of ours", "core", "core/accept", true},
		{"the core imports nothing of ours", "core/queue", "retain/redis", true},
		{"stores know no protocol", "retain/redis", "mqtt", false},
		{"stores know no protocol", "retain", "amqp/internal/frames", false},
		{"stores know no protocol", "retain/embedded", "bridge", false},
		{"mqtt and amqp meet only in the core", "mqtt", "amqp", false},
		{"mqtt and amqp meet only in the core", "amqp", "mqtt", true},
		{"mqtt and amqp meet only in the core", "amqp/internal/frames", "mqtt", false},
		{"a front-end imports only its own packages, the core and retain", "mqtt", "bridge", false},
		{"the session store knows no MQTT", "mqtt/session", "mqtt", false},
		{"the session store knows no MQTT", "mqtt/session", "retain", true},
		{"a front-end imports only its own packages, the core and retain", "amqp", "test/bench/internal/rig", false},
		{"the bridge imports only its own packages, the core and retain", "bridge", "mqtt", false},
		{"the bridge imports only its own packages, the core and retain", "bridge/nats", "amqp/internal/encoding", false},
		{"only gateway knows every part", "mqtt", "gateway", false},
		{"only gateway knows every part", "bridge", "gateway", true},
		{"only gateway knows every part", "retain/memory", "gateway/console", false},
		{"nothing imports cmd", "gateway", "cmd/gateway", false},
		{"nothing imports cmd", "test/e2e", "cmd/gateway", true},
		{"cmd imports gateway only", "cmd/gateway", "core", false},
		{"cmd imports gateway only", "cmd/gateway", "gateway/console", true},
		{"test helpers are for tests", "gateway", "retain/redistest", false},
		{"test helpers are for tests", "retain/redis", "retain/retaintest", false},
		{"test helpers are for tests", "core/queue/embedded", "core/queue/queuetest", false},
		{"test helpers are for tests", "core/queue/redis", "retain/redistest", false},
	}
	caught := map[string]bool{}
	for _, c := range forbidden {
		im := Import{From: mod + "/" + c.from, To: mod + "/" + c.to, Test: c.test}
		vs := Check(mod, nil, []Import{im}, Rules, Rooms)
		found := false
		for _, v := range vs {
			found = found || v.Rule == c.rule
		}
		if !found {
			t.Errorf("%s → %s (test %v): want a violation of %q, got %v", c.from, c.to, c.test, c.rule, vs)
		}
		caught[c.rule] = caught[c.rule] || found
	}
	for _, r := range Rules {
		if !caught[r.Name] {
			t.Errorf("rule %q: no case shows it can fail", r.Name)
		}
	}

	allowed := []struct {
		from, to string
		test     bool
	}{
		{"core/queue", "core/metrics", false},
		{"core/queue", "core", false},
		{"retain", "core", false},
		{"retain/redis", "core/codec", false},
		{"retain/redis", "retain/redistest", true},
		{"core/queue/redis", "retain/redistest", true},
		{"mqtt", "core/metrics", false},
		{"mqtt", "retain", false},
		{"mqtt", "retain/memory", true},
		{"mqtt", "mqtt/session", false},
		{"mqtt/session", "core/groupcommit", false},
		{"mqtt/session", "retain/redistest", true},
		{"amqp", "amqp/internal/frames", false},
		{"bridge", "core", false},
		{"bridge/nats", "retain", false},
		{"gateway", "mqtt", false},
		{"gateway", "amqp", false},
		{"gateway", "retain/redis", false},
		{"gateway/console", "gateway", false},
		{"cmd/gateway", "gateway", false},
		{"test/e2e", "gateway", true},
		{"test/bench/amqpload", "gateway", false},
		{"test/e2e", "retain/redistest", true},
		{"test/bench/retained", "retain/redistest", false},
		{"mqtt", "github.com/mochi-mqtt/server/v2", false}, // other modules are out of scope
	}
	for _, c := range allowed {
		to := mod + "/" + c.to
		if strings.Contains(c.to, ".") {
			to = c.to
		}
		im := Import{From: mod + "/" + c.from, To: to, Test: c.test}
		if vs := Check(mod, nil, []Import{im}, Rules, Rooms); len(vs) > 0 {
			t.Errorf("%s → %s (test %v) is allowed, got %v", c.from, c.to, c.test, vs)
		}
	}
}

// TestRoomsRuleCanFail: a package outside the package map's rooms (a
// "utils", or the module root) is caught; those inside pass.
func TestRoomsRuleCanFail(t *testing.T) {
	const mod = "example.org/m"
	for _, p := range []string{mod + "/utils", mod + "/internal/x", mod} {
		vs := Check(mod, []string{p}, nil, Rules, Rooms)
		if len(vs) != 1 || vs[0].Rule != RoomsRule {
			t.Errorf("%s: want one violation of %q, got %v", p, RoomsRule, vs)
		}
	}
	ok := []string{mod + "/core", mod + "/core/queue", mod + "/bridge/nats", mod + "/test/e2e", "other.org/utils"}
	if vs := Check(mod, ok, nil, Rules, Rooms); len(vs) > 0 {
		t.Errorf("packages in rooms: got %v", vs)
	}
}
