// Command gateway runs Tolsey, the MQTT/AMQP gateway. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

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
			os.Exit(configCommand(os.Args[2:]))
		case "health":
			os.Exit(healthCommand(os.Args[2:]))
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

// configCommand runs `gateway config check FILE [--key=value ...]`: the
// configuration is built exactly as at start (file, TOLSEY_* environment,
// flags) and checked, users, ACL and TLS files included, without starting
// anything. Exit 0 when it is good; 2 with one line naming the bad key.
func configCommand(args []string) int {
	if len(args) < 2 || args[0] != "check" || strings.HasPrefix(args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: gateway config check FILE [--key=value ...]")
		return 2
	}
	file := args[1]
	_, err := gateway.LoadConfig(append([]string{"--config", file}, args[2:]...), os.Environ(), os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gateway: %s: %v\n", file, err)
		return 2
	}
	fmt.Printf("%s: ok\n", file)
	return 0
}

// healthCommand runs `gateway health [URL]`: GET URL (default the admin
// API's /readyz on 127.0.0.1:8088), exit 0 on 200 and 1 otherwise. It is the
// container image's HEALTHCHECK: a scratch or distroless image has no curl.
func healthCommand(args []string) int {
	url := "http://127.0.0.1:8088/readyz"
	if len(args) > 0 {
		url = args[0]
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway health:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "gateway health: %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
