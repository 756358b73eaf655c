package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tolsey/tolsey/test/bench/internal/rig"
)

// The peers besides bare mochi. Each runs as a child process of the rig on
// a free port of 127.0.0.1 with a generated config, so its CPU is read from
// /proc apart from the load's, and is killed with the rig.

// startMosquitto runs Debian's mosquitto (installed with apt-get when
// missing) with persistence off and its other settings at their defaults
// but two: set_tcp_nodelay (its default leaves Nagle on, which with the
// client's delayed ACKs put 40 ms into every latency figure; the Go servers
// set TCP_NODELAY) and max_queued_messages 0, no limit (its default of 1,000
// dropped QoS 1 messages to a subscriber that falls behind, 59,002 of
// 80,000 in fan-in; the gateway keeps them).
func startMosquitto(r *rig.Rig) (*rig.Child, error) {
	bin, err := mosquittoBin()
	if err != nil {
		return nil, err
	}
	port, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(r.Dir, "mosquitto.conf")
	text := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\nset_tcp_nodelay true\nmax_queued_messages 0\n", port)
	if os.Getuid() == 0 {
		text += "user root\n" // the Debian package's user may be missing; nothing here needs privileges
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	c, err := r.Start("mosquitto", nil, regexp.MustCompile(`mosquitto version \S+ running`), bin, "-c", conf)
	if err != nil {
		return nil, err
	}
	c.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	return c, nil
}

func mosquittoBin() (string, error) {
	find := func() string {
		if p, err := exec.LookPath("mosquitto"); err == nil {
			return p
		}
		if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
			return "/usr/sbin/mosquitto"
		}
		return ""
	}
	if p := find(); p != "" {
		return p, nil
	}
	if os.Getuid() != 0 {
		return "", errors.New("mosquitto not installed (apt-get install mosquitto), and not root to install it; -targets leaves it out")
	}
	fmt.Fprintln(os.Stderr, "mqttload: installing mosquitto with apt-get")
	install := func() error {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "mosquitto")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get install mosquitto: %v\n%s", err, out)
		}
		return nil
	}
	if err := install(); err != nil {
		if out, uerr := exec.Command("apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("%v; apt-get update: %v\n%s", err, uerr, out)
		}
		if err := install(); err != nil {
			return "", err
		}
	}
	if p := find(); p != "" {
		return p, nil
	}
	return "", errors.New("mosquitto installed but not found")
}

// startNATS runs nats-server (built from the module proxy at the version
// go.mod requires, cached under the user cache directory) with JetStream
// in the rig's directory and an MQTT listener; NATS's MQTT needs both a
// server name and JetStream, and speaks MQTT 3.1.1 only.
func startNATS(r *rig.Rig) (*rig.Child, error) {
	bin, err := natsBin()
	if err != nil {
		return nil, err
	}
	port, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	mport, err := rig.FreePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.Dir, "nats-js")
	conf := filepath.Join(r.Dir, "nats.conf")
	text := fmt.Sprintf("server_name: bench\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\nmqtt { listen: \"127.0.0.1:%d\" }\n", port, dir, mport)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	c, err := r.Start("nats", nil, regexp.MustCompile(`Server is ready`), bin, "-c", conf)
	if err != nil {
		return nil, err
	}
	c.Addr = fmt.Sprintf("127.0.0.1:%d", mport)
	return c, nil
}

// natsBin builds nats-server once per version into the user cache
// directory (the module proxy or the module cache provides the source).
func natsBin() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m nats-server: %w", err)
	}
	version := strings.TrimSpace(string(out))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "tolsey-bench", "nats-server-"+version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "mqttload: building nats-server %s into %s\n", version, bin)
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build nats-server: %v\n%s", err, out)
	}
	return bin, nil
}
