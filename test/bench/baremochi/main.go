// Command baremochi is the peer the gateway is compared against: a bare
// mochi-mqtt server (the version the gateway builds on) with an allow-all
// hook, one TCP listener and mochi's default options.
//
//	go run ./test/bench/baremochi --listen=127.0.0.1:0
//
// It prints "mqtt listening addr=HOST:PORT" on stdout once it accepts
// connections and runs until SIGINT/SIGTERM. --max-pending sets
// Capabilities.MaximumClientWritesPending (mochi's default is 8192, as is the
// gateway's mqtt.maxPendingWrites) for a like-for-like comparison of
// per-connection memory and QoS 0 drops when either is changed.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:1883", "MQTT TCP listen address (port 0 picks a free port)")
	maxPending := flag.Int("max-pending", 0, "Capabilities.MaximumClientWritesPending; 0 keeps mochi's default (8192)")
	flag.Parse()

	opts := &mochi.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if *maxPending > 0 {
		caps := mochi.NewDefaultServerCapabilities()
		caps.MaximumClientWritesPending = int32(*maxPending)
		opts.Capabilities = caps
	}
	s := mochi.New(opts)
	if err := s.AddHook(new(allowHook), nil); err != nil {
		fatal(err)
	}
	tcp := listeners.NewTCP(listeners.Config{ID: "tcp", Address: *listen})
	if err := s.AddListener(tcp); err != nil { // binds (Init)
		fatal(err)
	}
	if err := s.Serve(); err != nil {
		fatal(err)
	}
	fmt.Printf("mqtt listening addr=%s max_pending=%d\n", tcp.Address(), s.Options.Capabilities.MaximumClientWritesPending)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	_ = s.Close()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "baremochi:", err)
	os.Exit(1)
}

// allowHook is mochi's hooks/auth.AllowHook, copied: importing that package
// pulls gopkg.in/yaml.v3 (for its ledger) into go.mod for one two-line hook.
type allowHook struct{ mochi.HookBase }

func (h *allowHook) ID() string { return "allow-all-auth" }
func (h *allowHook) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (h *allowHook) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (h *allowHook) OnACLCheck(*mochi.Client, string, bool) bool              { return true }
