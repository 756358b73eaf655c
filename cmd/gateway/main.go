// Command gateway runs Tolsey, the MQTT/AMQP gateway. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tolsey/tolsey/gateway"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "passwd":
			if err := gateway.Passwd(os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
				fmt.Fprintln(os.Stderr, "gateway:", err)
				os.Exit(2)
			}
			return
		case "version", "--version", "-v":
			fmt.Println(gateway.Build())
			return
		case "config":
			os.Exit(gateway.ConfigCheck(os.Args[2:], os.Stdout, os.Stderr))
		case "health":
			os.Exit(gateway.Health(os.Args[2:], os.Stderr))
		default:
			if code, ok := gateway.Tool(os.Args[1:], os.Stdout, os.Stderr); ok {
				os.Exit(code)
			}
		}
	}
	cfg, err := gateway.LoadConfig(os.Args[1:], os.Environ(), os.Stdout)
	if errors.Is(err, gateway.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	log := gateway.NewLogger(cfg)
	if len(cfg.LegacyEnv) > 0 {
		log.Warn("GATEWAY_* environment variables are read for one more release only: rename them TOLSEY_*",
			"variables", cfg.LegacyEnv)
	}
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
