package cli

import (
	"fmt"
	"io"
	"strings"
)

// Run runs an admin subcommand (commands.go), subscribe or completion;
// ok is false when args name none of them (they are then the gateway's own
// flags).
func Run(args []string, out, errw io.Writer) (code int, ok bool) {
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
