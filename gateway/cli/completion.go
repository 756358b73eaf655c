package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// completion prints a bash or zsh completion script for the subcommands
// (`gateway completion bash > /etc/bash_completion.d/gateway`;
// zsh: `gateway completion zsh > "${fpath[1]}/_gateway"`, or sourced
// after compinit: the zsh script works both ways).
func completion(w io.Writer, shell string) error {
	groups := map[string][]string{}
	var order []string
	for _, c := range commands {
		if _, ok := groups[c.group]; !ok {
			order = append(order, c.group)
		}
		if c.verb != "" {
			groups[c.group] = append(groups[c.group], c.verb)
		} else {
			groups[c.group] = groups[c.group][:0:0]
		}
	}
	order = append(order, "subscribe", "config", "passwd", "health", "version", "completion")
	groups["config"] = []string{"check"}
	groups["completion"] = []string{"bash", "zsh"}
	sort.Strings(order)
	switch shell {
	case "bash":
		fmt.Fprintf(w, "# bash completion for gateway (Tolsey)\n_gateway() {\n  local cur=${COMP_WORDS[COMP_CWORD]}\n")
		fmt.Fprintf(w, "  if [[ $COMP_CWORD -eq 1 ]]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(order, " "))
		fmt.Fprintf(w, "  if [[ $COMP_CWORD -eq 2 ]]; then\n    case ${COMP_WORDS[1]} in\n")
		for _, g := range order {
			if v := groups[g]; len(v) > 0 {
				fmt.Fprintf(w, "      %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return;;\n", g, strings.Join(v, " "))
			}
		}
		fmt.Fprintf(w, "    esac\n  fi\n")
		fmt.Fprintf(w, "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"--admin --token --token-file --json --timeout\" -- \"$cur\")); return; fi\n")
		fmt.Fprintf(w, "  COMPREPLY=($(compgen -f -- \"$cur\"))\n}\ncomplete -F _gateway gateway\n")
	case "zsh":
		fmt.Fprintf(w, "#compdef gateway\n# zsh completion for gateway (Tolsey)\n_gateway() {\n  if (( CURRENT == 2 )); then\n    compadd -- %s\n    return\n  fi\n", strings.Join(order, " "))
		fmt.Fprintf(w, "  if (( CURRENT == 3 )); then\n    case $words[2] in\n")
		for _, g := range order {
			if v := groups[g]; len(v) > 0 {
				fmt.Fprintf(w, "      %s) compadd -- %s; return;;\n", g, strings.Join(v, " "))
			}
		}
		fmt.Fprintf(w, "    esac\n  fi\n  if [[ $PREFIX == -* ]]; then compadd -- --admin --token --token-file --json --timeout; return; fi\n  _files\n}\n")
		// Autoloaded from $fpath, this file is the body of _gateway: its
		// first call defines the function, so it must also complete. Sourced
		// (funcstack[1] is then the file), it registers the function.
		fmt.Fprintf(w, "if [[ $funcstack[1] == _gateway ]]; then\n  _gateway \"$@\"\nelse\n  compdef _gateway gateway\nfi\n")
	default:
		return usagef("completion: bash or zsh, not %q", shell)
	}
	return nil
}
