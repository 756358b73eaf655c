// Package cli is the gateway binary's other half: the subcommands that talk to
// a running gateway (its admin API, and for subscribe its MQTT or AMQP
// listener) and completion (docs/cli.md).
// cmd/gateway reaches it through gateway.Tool.
package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
)

// The command-line tool: subcommands of the same binary that talk to a
// running gateway's admin API (docs/cli.md). Exit codes: 0 done, 1 the
// gateway or the network failed, 2 a usage error, 3 not found.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
)

// cliEnvPrefix is the prefix of the tool's own environment variables. The
// gateway's configuration skips it (gateway/config.go), so exporting
// TOLSEY_CLI_TOKEN in a shell does not stop a gateway started from it.
const cliEnvPrefix = "TOLSEY_CLI_"

// cli is one invocation: the common flags and where output goes.
type cli struct {
	admin     string
	token     string
	tokenFile string
	asJSON    bool
	timeout   time.Duration

	out, errw io.Writer
	http      *http.Client
}

// usageError is a mistake on the command line: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// apiError is an admin API answer other than 2xx: exit 1, or 3 for 404.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// flags returns a flag set with the common flags bound to c.
func (c *cli) flags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := os.Getenv(cliEnvPrefix + "ADMIN")
	if def == "" {
		def = "http://127.0.0.1:8088"
	}
	fs.StringVar(&c.admin, "admin", def, "admin API URL (env "+cliEnvPrefix+"ADMIN)")
	fs.StringVar(&c.token, "token", os.Getenv(cliEnvPrefix+"TOKEN"), "admin bearer token (env "+cliEnvPrefix+"TOKEN; prefer --token-file)")
	fs.StringVar(&c.tokenFile, "token-file", os.Getenv(cliEnvPrefix+"TOKEN_FILE"), "file holding the admin token (env "+cliEnvPrefix+"TOKEN_FILE)")
	fs.BoolVar(&c.asJSON, "json", false, "print the API's JSON instead of a table")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "how long to wait for the gateway")
	return fs
}

// parse parses args, reads the token file and checks the number of
// positional arguments.
func (c *cli) parse(fs *pflag.FlagSet, args []string, minArgs, maxArgs int, usage string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, usagef("%v (usage: gateway %s)", err, usage)
	}
	if n := fs.NArg(); n < minArgs || (maxArgs >= 0 && n > maxArgs) {
		return nil, usagef("usage: gateway %s", usage)
	}
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		c.token = strings.TrimSpace(string(b))
	}
	c.admin = strings.TrimRight(c.admin, "/")
	if u, err := url.Parse(c.admin); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--admin %q: an http:// or https:// URL", c.admin)
	}
	c.http = &http.Client{Timeout: c.timeout}
	return fs.Args(), nil
}

// call makes one admin API request and decodes a JSON answer into out
// (when not nil). It returns the raw body too, for --json.
func (c *cli) call(method, path string, query url.Values, body any, out any) ([]byte, error) {
	u := c.admin + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return raw, &apiError{resp.StatusCode, fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, msg)}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("%s %s: the answer is not what this tool expects: %v", method, path, err)
		}
	}
	return raw, nil
}

// printJSON writes the API's answer as it came, indented.
func (c *cli) printJSON(raw []byte) {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		b.Reset()
		b.Write(raw)
	}
	b.WriteByte('\n')
	_, _ = c.out.Write(b.Bytes())
}

// column is one table column: a header and a path into a JSON object
// ("counters.in"), with an optional formatter.
type column struct {
	head string
	path string
	fmt  func(any) string
}

// table prints rows (JSON objects) as an aligned table for people.
func (c *cli) table(rows []map[string]any, cols []column) {
	tw := tabwriter.NewWriter(c.out, 2, 8, 2, ' ', 0)
	heads := make([]string, len(cols))
	for i, col := range cols {
		heads[i] = col.head
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, r := range rows {
		cells := make([]string, len(cols))
		for i, col := range cols {
			v := lookup(r, col.path)
			if col.fmt != nil {
				cells[i] = col.fmt(v)
			} else {
				cells[i] = cell(v)
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

func lookup(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

// cell renders one value for a table: numbers without exponent, lists
// joined, nothing as "-", control characters escaped, long text cut.
func cell(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		return "-"
	case float64:
		if x == float64(int64(x)) {
			s = fmt.Sprintf("%d", int64(x))
		} else {
			s = fmt.Sprintf("%.1f", x)
		}
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = cell(p)
		}
		s = strings.Join(parts, ",")
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + cell(x[k])
		}
		s = strings.Join(parts, ",")
	default:
		s = fmt.Sprint(x)
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '.'
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	if s == "" {
		return `""`
	}
	return s
}

// exitCode maps an error to the tool's exit codes, printing it.
func (c *cli) exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(c.errw, "gateway:", err)
	var ue *usageError
	var ae *apiError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		return exitNotFound
	}
	return exitFailed
}

// objects decodes a JSON array of objects.
func objects(raw []byte) ([]map[string]any, error) {
	var rows []map[string]any
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, fmt.Errorf("the answer is not a list: %v", err)
	}
	return rows, nil
}
