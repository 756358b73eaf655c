// Package rabbitnode runs a private RabbitMQ node (Debian's rabbitmq-server
// 3.10, with the rabbitmq_amqp1_0 plugin) for the end-to-end tests and the
// benchmarks: on free ports bound to 127.0.0.1, with its data, logs, Erlang
// cookie and port mapper (epmd) in a directory of the caller's. Debian's
// service is not used. It is for the programs under test/ only.
package rabbitnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// Server is Debian's rabbitmq-server; its wrapper in /usr/sbin insists on
// the rabbitmq user, this one does not.
const Server = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// Node is a running node: its AMQP address (guest/guest, SASL PLAIN or
// ANONYMOUS) and the processes to stop.
type Node struct {
	Addr  string
	procs []*exec.Cmd
	done  []chan struct{}
}

// Start runs a node with its files in dir and waits (up to 90 s) until it
// accepts AMQP 1.0 connections.
func Start(dir string) (*Node, error) {
	if _, err := os.Stat(Server); err != nil {
		return nil, fmt.Errorf("RabbitMQ is needed (Debian: apt-get install rabbitmq-server; test/run installs it): %w", err)
	}
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	port, dist, epmdPort := ports[0], ports[1], ports[2]
	write := func(name, s string) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, []byte(s), 0o600)
	}
	plugins, err := write("enabled_plugins", "[rabbitmq_amqp1_0].\n")
	if err != nil {
		return nil, err
	}
	conf, err := write("rabbitmq.conf", "listeners.tcp.default = 127.0.0.1:"+strconv.Itoa(port)+"\nloopback_users = none\n")
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"mnesia", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	env := append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"RABBITMQ_NODENAME=tolsey"+strconv.Itoa(port)+"@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+plugins,
		"RABBITMQ_CONFIG_FILE="+conf,
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
	)
	n := &Node{Addr: "127.0.0.1:" + strconv.Itoa(port)}
	start := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Env, cmd.Dir = env, dir
		logf, err := os.Create(filepath.Join(dir, filepath.Base(name)+".out"))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		// A group of its own, so that Stop stops the Erlang VM the
		// script starts too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return fmt.Errorf("start %s: %w", name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
		n.procs, n.done = append(n.procs, cmd), append(n.done, done)
		return nil
	}
	if err := start("epmd", "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1"); err != nil {
		return nil, err
	}
	if err := start(Server); err != nil {
		n.Stop()
		return nil, err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := goamqp.Dial(ctx, "amqp://"+n.Addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
		cancel()
		if err == nil {
			c.Close()
			return n, nil
		}
		if time.Now().After(deadline) {
			n.Stop()
			return nil, errors.New("RabbitMQ does not accept AMQP 1.0 within 90s (its log is in " + filepath.Join(dir, "log") + ")")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Stop stops the node and its port mapper (SIGTERM, SIGKILL after 20 s)
// and waits for them.
func (n *Node) Stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		pid := n.procs[i].Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-n.done[i]:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-n.done[i]
		}
	}
	n.procs, n.done = nil, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
