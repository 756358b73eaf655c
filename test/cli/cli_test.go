// Package cli tests the command-line tool (gateway retained|queues|
// sessions|bridges|cluster|publish|subscribe|completion) as a user runs
// it: the real binary against a real gateway process, over its admin API
// and its MQTT and AMQP listeners.
package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolsey/tolsey/test/internal/gwproc"
)

const token = "cli-test-token"

type env struct {
	t     *testing.T
	bin   string
	gw    *gwproc.Proc
	admin string
}

// run runs the tool with the admin URL and args; the token comes from
// TOLSEY_CLI_TOKEN (set by start), as a user's shell would give it.
func (e *env) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	cmd := exec.Command(e.bin, append(args, "--admin", "http://"+e.admin)...)
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	return o.String(), er.String(), code
}

// ok runs the tool and fails the test unless it exits 0.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	out, errOut, code := e.run(args...)
	if code != 0 {
		e.t.Fatalf("gateway %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

func start(t *testing.T) *env {
	bin := gwproc.Build(t, "../..")
	sum := sha256.Sum256([]byte(token))
	// The tool's variable is in the environment the gateway starts in
	// too: the gateway must not refuse it as an unknown TOLSEY_* key.
	t.Setenv("TOLSEY_CLI_TOKEN", token)
	gw := gwproc.Start(t, bin, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0",
		"--admin.tokens=sha256:"+hex.EncodeToString(sum[:]))
	return &env{t: t, bin: bin, gw: gw, admin: gw.Admin}
}

func TestRetained(t *testing.T) {
	e := start(t)
	if out := e.ok("publish", "sensors/a", "-m", "21.5", "--retain", "--qos", "1"); !strings.Contains(out, "retained") {
		t.Errorf("publish: %q, want it to say retained", out)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte{0, 1, 2, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("publish", "sensors/b", "--file", bin, "--retain")

	out := e.ok("retained", "ls", "sensors/#")
	if !strings.Contains(out, "sensors/a") || !strings.Contains(out, "21.5") || !strings.Contains(out, "(binary)") || !strings.HasPrefix(out, "TOPIC") {
		t.Errorf("retained ls:\n%s", out)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(e.ok("retained", "ls", "--json")), &list); err != nil || len(list) != 2 {
		t.Errorf("retained ls --json: %v, %d messages, want 2", err, len(list))
	}
	// Paged in topic order: the page after sensors/a is sensors/b alone.
	if out := e.ok("retained", "ls", "sensors/#", "--limit", "1", "--after", "sensors/a"); !strings.Contains(out, "sensors/b") || strings.Contains(out, "sensors/a") {
		t.Errorf("retained ls --after sensors/a --limit 1:\n%s", out)
	}
	if got := e.ok("retained", "get", "sensors/a"); got != "21.5" {
		t.Errorf("retained get sensors/a = %q, want 21.5", got)
	}
	if got := e.ok("retained", "get", "sensors/b"); got != string([]byte{0, 1, 2, 0xff}) {
		t.Errorf("retained get sensors/b = %q, want the bytes published", got)
	}
	if _, errOut, code := e.run("retained", "get", "sensors/none"); code != 3 {
		t.Errorf("retained get of a topic without one: exit %d (%s), want 3", code, errOut)
	}
	if _, errOut, code := e.run("retained", "rm", "sensors/#"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("retained rm of a wildcard without --yes: exit %d %q, want 2 asking for --yes", code, errOut)
	}
	if out := e.ok("retained", "rm", "sensors/#", "--yes"); out != "deleted 2\n" {
		t.Errorf("retained rm: %q, want deleted 2", out)
	}
	if out := e.ok("retained", "ls"); strings.Contains(out, "sensors/") {
		t.Errorf("after rm, retained ls still lists:\n%s", out)
	}
}

func TestTokenAndUsageErrors(t *testing.T) {
	e := start(t)
	cmd := exec.Command(e.bin, "retained", "ls", "--admin", "http://"+e.admin)
	cmd.Env = append(os.Environ(), "TOLSEY_CLI_TOKEN=wrong")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "401") {
		t.Errorf("a wrong token: %v %q, want exit 1 naming 401", err, stderr.String())
	}
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(e.bin, "retained", "ls", "--admin", "http://"+e.admin, "--token-file", tf)
	cmd.Env = append(os.Environ(), "TOLSEY_CLI_TOKEN=wrong")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("--token-file beats the environment: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"retained"}, {"retained", "frob"}, {"queues", "rm"}, {"publish"}, {"publish", "a/b", "--qos"}} {
		if _, _, code := e.run(args...); code != 2 {
			t.Errorf("gateway %v: exit %d, want 2", args, code)
		}
	}
	if _, errOut, code := e.run("publish", "a/+", "-m", "x"); code != 1 || !strings.Contains(errOut, "400") {
		t.Errorf("publish to a filter: exit %d %q, want 1 with the API's 400", code, errOut)
	}
}

func TestQueuesSessionsBridgesCluster(t *testing.T) {
	e := start(t)
	e.ok("queues", "create", "orders", "--subscribe", "orders/#", "--config", `{"maxMessages": 100}`)
	if out := e.ok("publish", "orders/1", "-m", "one", "--qos", "1"); !strings.HasPrefix(out, "published to orders/1: ") {
		t.Errorf("publish: %q", out)
	}
	out := e.ok("queues", "ls")
	if !strings.Contains(out, "orders") || !strings.Contains(out, "orders/#") {
		t.Errorf("queues ls:\n%s", out)
	}
	var qs []struct {
		Name     string
		Messages int
	}
	if err := json.Unmarshal([]byte(e.ok("queues", "ls", "--json")), &qs); err != nil || len(qs) != 1 || qs[0].Messages != 1 {
		t.Errorf("queues ls --json: %v %+v, want orders with 1 message", err, qs)
	}
	if out := e.ok("queues", "browse", "orders"); !strings.Contains(out, "orders/1") || !strings.Contains(out, "one") {
		t.Errorf("queues browse:\n%s", out)
	}
	var msgs []struct{ ID uint64 }
	if err := json.Unmarshal([]byte(e.ok("queues", "browse", "orders", "--json")), &msgs); err != nil || len(msgs) != 1 {
		t.Fatalf("queues browse --json: %v %+v", err, msgs)
	}
	if out := e.ok("queues", "browse", "orders", "--after", fmt.Sprint(msgs[0].ID)); strings.Contains(out, "orders/1") {
		t.Errorf("queues browse --after the only message:\n%s", out)
	}
	e.ok("queues", "rm", "orders")
	if _, _, code := e.run("queues", "browse", "orders"); code != 3 {
		t.Errorf("browse of a deleted queue: exit %d, want 3", code)
	}
	if out := e.ok("sessions", "ls"); !strings.HasPrefix(out, "CLIENT ID") {
		t.Errorf("sessions ls: %q", out)
	}
	if _, _, code := e.run("sessions", "rm", "nobody"); code != 3 {
		t.Errorf("sessions rm of an unknown client: exit %d, want 3", code)
	}
	if out := e.ok("bridges", "ls"); !strings.HasPrefix(out, "NAME") {
		t.Errorf("bridges ls: %q", out)
	}
	var cl map[string]any
	if err := json.Unmarshal([]byte(e.ok("cluster", "ls")), &cl); err != nil || cl["enabled"] != false {
		t.Errorf("cluster ls: %v %v, want enabled false", err, cl)
	}
}

func TestSubscribe(t *testing.T) {
	e := start(t)
	e.ok("publish", "sensors/t", "-m", "hello", "--retain")
	// A late subscriber of either protocol gets the retained message.
	out := e.ok("subscribe", "sensors/#", "--url", "mqtt://"+e.gw.MQTT, "--count", "1")
	if out != "sensors/t hello\n" {
		t.Errorf("subscribe over MQTT: %q", out)
	}
	out = e.ok("subscribe", "sensors/#", "--url", "amqp://"+e.gw.AMQP, "--count", "1", "--json")
	var m struct {
		Topic, Payload string
		Retain         bool
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Topic != "sensors/t" || m.Payload != "hello" || !m.Retain {
		t.Errorf("subscribe over AMQP --json: %q (%v)", out, err)
	}
}

func TestCompletion(t *testing.T) {
	bin := gwproc.Build(t, "../..")
	for _, sh := range []string{"bash", "zsh"} {
		out, err := exec.Command(bin, "completion", sh).Output()
		if err != nil || !strings.Contains(string(out), "retained") || !strings.Contains(string(out), "browse") {
			t.Fatalf("completion %s: %v\n%s", sh, err, out)
		}
		if sh == "bash" {
			f := filepath.Join(t.TempDir(), "c.bash")
			if err := os.WriteFile(f, out, 0o600); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
				t.Errorf("bash -n: %v\n%s", err, b)
			}
			// Complete "gateway queues b" in a real bash.
			script := "source " + f + `; COMP_WORDS=(gateway queues b); COMP_CWORD=2; _gateway; echo "${COMPREPLY[*]}"`
			b, err := exec.Command("bash", "-c", script).CombinedOutput()
			if err != nil || strings.TrimSpace(string(b)) != "browse" {
				t.Errorf("bash completion of 'gateway queues b': %q %v, want browse", b, err)
			}
		}
		if sh == "zsh" {
			zshCompletion(t, out)
		}
	}
}

// zshCompletion loads the zsh script in a real zsh both ways
// docs/cli.md gives: autoloaded from $fpath by compinit, where the first
// call must complete (the script defined _gateway and returned, so the
// first Tab completed nothing), and sourced after compinit. compadd is
// replaced by a function printing what it is given: outside the line
// editor the builtin only fails.
func zshCompletion(t *testing.T, script []byte) {
	dir := t.TempDir()
	f := filepath.Join(dir, "_gateway")
	if err := os.WriteFile(f, script, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("zsh", "-n", f).CombinedOutput(); err != nil {
		t.Errorf("zsh -n: %v\n%s", err, b)
	}
	const call = `; print -r -- "comps: $_comps[gateway]"; compadd() { print -r -- "compadd $*" }; words=(gateway queues b); CURRENT=3; _gateway`
	for how, setup := range map[string]string{
		"autoloaded": `fpath=(` + dir + ` $fpath); autoload -Uz compinit; compinit -u -D`,
		"sourced":    `autoload -Uz compinit; compinit -u -D; source ` + f,
	} {
		b, err := exec.Command("zsh", "-f", "-c", setup+call).CombinedOutput()
		out := string(b)
		if err != nil || !strings.Contains(out, "comps: _gateway\n") || !strings.Contains(out, "compadd -- ") || !strings.Contains(out, " browse ") {
			t.Errorf("zsh, %s: completion of 'gateway queues b': %v\n%s\nwant _gateway registered and browse offered", how, err, out)
		}
		if strings.Count(out, "compadd ") != 1 {
			t.Errorf("zsh, %s: completed %d times, want once:\n%s", how, strings.Count(out, "compadd "), out)
		}
	}
}

func TestConnections(t *testing.T) {
	e := start(t)
	done := make(chan string, 1)
	go func() {
		out, _, _ := e.run("subscribe", "c/#", "--url", "mqtt://"+e.gw.MQTT, "--count", "1")
		done <- out
	}()
	var id string
	for deadline := time.Now().Add(20 * time.Second); id == "" && time.Now().Before(deadline); {
		var list []struct{ ID, Protocol string }
		if err := json.Unmarshal([]byte(e.ok("connections", "ls", "--protocol", "mqtt", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			if strings.HasPrefix(c.ID, "mqtt:gateway-cli-") {
				id = c.ID
			}
		}
		if id == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if id == "" {
		t.Fatal("the subscribe command's connection was never listed")
	}
	if out := e.ok("connections", "ls"); !strings.Contains(out, id) || !strings.HasPrefix(out, "ID") {
		t.Errorf("connections ls:\n%s", out)
	}
	if out := e.ok("connections", "kick", id); out != "connection "+id+" closed\n" {
		t.Errorf("kick: %q", out)
	}
	select {
	case <-done: // the subscriber saw the server end its connection and exited
	case <-time.After(20 * time.Second):
		t.Fatal("the kicked subscriber did not exit")
	}
	if _, _, code := e.run("connections", "kick", id); code != 3 {
		t.Errorf("a second kick: exit %d, want 3", code)
	}
}

// queues purge empties a queue's ready messages; subscriptions ls and
// topics ls show what the admin API lists.
func TestPurgeSubscriptionsTopics(t *testing.T) {
	e := start(t)
	e.ok("queues", "create", "jobs", "--subscribe", "jobs/#")
	for _, m := range []string{"a", "b", "c"} {
		e.ok("publish", "jobs/1", "-m", m, "--qos", "1")
	}
	if out := e.ok("queues", "purge", "jobs"); out != "queue jobs: 3 messages purged\n" {
		t.Errorf("queues purge: %q", out)
	}
	var qs []struct{ Messages int }
	if err := json.Unmarshal([]byte(e.ok("queues", "ls", "--json")), &qs); err != nil || len(qs) != 1 || qs[0].Messages != 0 {
		t.Errorf("after the purge: %v %+v, want no message", err, qs)
	}
	if _, _, code := e.run("queues", "purge", "nothing"); code != 3 {
		t.Errorf("purge of an unknown queue: exit %d, want 3", code)
	}
	if out := e.ok("topics", "ls", "jobs/#"); !strings.HasPrefix(out, "TOPIC") || !strings.Contains(out, "jobs/1") {
		t.Errorf("topics ls:\n%s", out)
	}
	if out := e.ok("subscriptions", "ls", "--protocol", "mqtt"); !strings.HasPrefix(out, "CONNECTION") {
		t.Errorf("subscriptions ls: %q", out)
	}
	// --limit pages them (the first 1,000 only, silently, before).
	e.ok("publish", "jobs/2", "-m", "d")
	var ts []struct{ Topic string }
	if err := json.Unmarshal([]byte(e.ok("topics", "ls", "jobs/#", "--limit", "1", "--json")), &ts); err != nil || len(ts) != 1 {
		t.Errorf("topics ls --limit 1: %v %+v", err, ts)
	}
}
