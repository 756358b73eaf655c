package gateway

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tolsey/tolsey/gateway/cli"
)

// Tool runs a subcommand of the command-line client (gateway/cli: the
// admin API's subcommands, subscribe, completion, help) for cmd/gateway;
// ok is false when args name none of them (they are then the gateway's
// own flags).
func Tool(args []string, out, errw io.Writer) (code int, ok bool) { return cli.Run(args, out, errw) }

// ConfigCheck runs `gateway config check FILE [--key=value ...]`: the
// configuration is built exactly as at start (file, TOLSEY_* environment,
// flags) and checked, users, ACL and TLS files included, without starting
// anything. Exit 0 when it is good; 2 with one line naming the bad key.
func ConfigCheck(args []string, out, errw io.Writer) int {
	if len(args) < 2 || args[0] != "check" || strings.HasPrefix(args[1], "-") {
		fmt.Fprintln(errw, "usage: gateway config check FILE [--key=value ...]")
		return 2
	}
	file := args[1]
	_, err := LoadConfig(append([]string{"--config", file}, args[2:]...), os.Environ(), out)
	if err != nil {
		fmt.Fprintf(errw, "gateway: %s: %v\n", file, err)
		return 2
	}
	fmt.Fprintf(out, "%s: ok\n", file)
	return 0
}

// Health runs `gateway health [URL]`: GET URL (default the admin
// API's /readyz on 127.0.0.1:8088), exit 0 on 200 and 1 otherwise. It is the
// container image's HEALTHCHECK: a scratch or distroless image has no curl.
func Health(args []string, errw io.Writer) int {
	url := "http://127.0.0.1:8088/readyz"
	if len(args) > 0 {
		url = args[0]
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(errw, "gateway health:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(errw, "gateway health: %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
