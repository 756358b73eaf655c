// Command gateway runs the MQTT/AMQP gateway. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gatewayd/gateway/gateway"
)

func main() {
	cfg, err := gateway.LoadConfig(os.Args[1:], os.Environ(), os.Stdout)
	if errors.Is(err, gateway.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	log := gateway.NewLogger(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := gateway.Run(ctx, cfg, log); err != nil {
		log.Error("gateway failed", "error", err)
		var ce *gateway.ConfigError
		if errors.As(err, &ce) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
