package fault

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Drill 4 (docs/reliability.md), the reconnect storm: clients with persistent sessions
// (clean session 0, each subscribed at QoS 1 to a topic of its own) lose
// the gateway to a SIGTERM, it starts again on the same data.dir, a QoS 1
// message is published to every offline session, and the clients all
// reconnect within a window. Promised: every client reconnects and finds
// its session (CONNACK session present), every queued message is
// delivered. The tool is test/bench/storm, which splits the clients over
// several processes (the open-file limit is per process) and measures the
// gateway's peak RSS; the short run has 500 clients, the long one 18,000
// (docs/reliability.md).
func TestReconnectStorm(t *testing.T) {
	args := []string{"-gateway", gatewayBin(t), "-n", "500", "-procs", "2", "-window", "2s"}
	if *long {
		args = []string{"-gateway", gatewayBin(t), "-n", "18000", "-procs", "4", "-window", "8s"}
	}
	bin := filepath.Join(binDir, "storm")
	build := exec.Command("go", "build", "-o", bin, "./test/bench/storm")
	build.Dir = "../.." // the module root, from test/fault
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/bench/storm: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	t.Logf("storm %s:\n%s", strings.Join(args[2:], " "), out)
	var f struct {
		Clients, Published, Reconnected, SessionPresent, Delivered, Duplicates, TermExit int
		ReconnectSeconds                                                                 float64
	}
	_, js, ok := strings.Cut(string(out), "storm-figures: ")
	if !ok {
		t.Fatalf("no figures from storm (%v)", err)
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(js)), &f); err != nil {
		t.Fatalf("storm figures: %v", err)
	}
	if f.TermExit != 0 {
		t.Errorf("gateway exit code after SIGTERM %d, want 0", f.TermExit)
	}
	if f.Published != f.Clients {
		t.Errorf("%d of %d publishes to offline sessions acknowledged", f.Published, f.Clients)
	}
	if f.Reconnected != f.Clients || f.SessionPresent != f.Clients {
		t.Errorf("reconnected %d, with their session %d, of %d clients", f.Reconnected, f.SessionPresent, f.Clients)
	}
	if f.Delivered != f.Published {
		t.Errorf("queued messages delivered %d of %d", f.Delivered, f.Published)
	}
	if err != nil {
		t.Errorf("storm: %v", err)
	}
}
