// Command gateway runs Tolsey, the MQTT/AMQP gateway. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
		default:
			if code, ok := runTool(os.Args[1:], os.Stdout, os.Stderr); ok {
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

// runTool runs an admin subcommand (cli_cmds.go), subscribe or completion;
// ok is false when args name none of them (they are then the gateway's own
// flags).
func runTool(args []string, out, errw io.Writer) (code int, ok bool) {
	c := &cli{out: out, errw: errw}
	switch args[0] {
	case "subscribe":
		return c.exitCode(subscribe(c, args[1:])), true
	case "completion":
		if len(args) != 2 {
			return c.exitCode(usagef("usage: gateway completion bash|zsh")), true
		}
		return c.exitCode(completion(out, args[1])), true
	case "help":
		toolHelp(out)
		return exitOK, true
	}
	var group []command
	for _, cmd := range commands {
		if cmd.group == args[0] {
			group = append(group, cmd)
		}
	}
	if len(group) == 0 {
		return 0, false
	}
	verb := ""
	rest := args[1:]
	if group[0].verb != "" {
		if len(rest) == 0 {
			return c.exitCode(usagef("usage: gateway %s", verbs(group))), true
		}
		verb, rest = rest[0], rest[1:]
	}
	for _, cmd := range group {
		if cmd.verb == verb {
			return c.exitCode(cmd.run(c, rest)), true
		}
	}
	return c.exitCode(usagef("gateway %s %s: unknown (usage: gateway %s)", args[0], verb, verbs(group))), true
}

func verbs(group []command) string {
	vs := make([]string, len(group))
	for i, c := range group {
		vs[i] = c.verb
	}
	return group[0].group + " " + strings.Join(vs, "|")
}

// toolHelp lists the subcommands.
func toolHelp(w io.Writer) {
	fmt.Fprintln(w, "Usage: gateway [--config FILE] [--key=value ...]   run the gateway (gateway --help: every key)")
	fmt.Fprintln(w, "       gateway COMMAND ...                          talk to a running gateway's admin API")
	fmt.Fprintln(w, "\nCommands (--admin URL, --token-file F or "+cliEnvPrefix+"TOKEN, --json for scripts):")
	for _, c := range commands {
		fmt.Fprintf(w, "  gateway %s\n      %s\n", c.usage, c.help)
	}
	fmt.Fprintln(w, "  gateway subscribe FILTER [--url mqtt://HOST:PORT|amqp://HOST:PORT] [--qos 0|1] [--count N]")
	fmt.Fprintln(w, "      print the messages a filter receives, one per line")
	fmt.Fprintln(w, "  gateway config check FILE      validate a configuration without starting")
	fmt.Fprintln(w, "  gateway passwd                 password, SCRAM and token hashes")
	fmt.Fprintln(w, "  gateway health [URL]           exit 0 when /readyz answers 200")
	fmt.Fprintln(w, "  gateway version                the build")
	fmt.Fprintln(w, "  gateway completion bash|zsh    shell completion")
	fmt.Fprintln(w, "\nExit codes: 0 done, 1 the gateway or the network failed, 2 usage, 3 not found.")
}
