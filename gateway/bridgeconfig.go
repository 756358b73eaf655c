package gateway

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tolsey/tolsey/bridge"
)

// buildBridgeConfig reads bridge.*. Values are checked by get (their kind);
// what only the bridge knows (rules) and what needs the file system (TLS,
// creds and NKey files, read now so that a typo stops the gateway at start
// rather than failing every reconnect) are checked here, naming the key.
func buildBridgeConfig(c *Config, get func(string) string, num func(string) int64) error {
	b := &c.Bridge
	n := &b.NATS
	for _, u := range strings.Split(get("bridge.nats.url"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			n.URLs = append(n.URLs, u)
		}
	}
	n.Name = get("bridge.nats.name")
	n.User = get("bridge.nats.user")
	n.Password = get("bridge.nats.password")
	n.Token = get("bridge.nats.token")
	n.NKey = get("bridge.nats.nkey")
	n.Creds = get("bridge.nats.creds")
	n.TLS.CA = get("bridge.nats.tls.ca")
	n.TLS.Cert = get("bridge.nats.tls.cert")
	n.TLS.Key = get("bridge.nats.tls.key")
	n.RetainedRequests = get("bridge.nats.retainedRequests")
	rules := get("bridge.nats.rules")
	b.Buffer.MaxBytes = num("bridge.buffer.maxBytes")
	b.Buffer.DropOldest = get("bridge.buffer.policy") == "dropOldest"
	b.Buffer.DrainRate = int(num("bridge.buffer.drainRate"))

	var err error
	n.Rules, err = bridge.ParseRules(rules)
	if err != nil {
		var re *bridge.RuleError
		if errors.As(err, &re) {
			key := "bridge.nats.rules"
			if re.Index >= 0 {
				key = fmt.Sprintf("%s[%d]", key, re.Index)
			}
			if re.Field != "" {
				key += "." + re.Field
			}
			return &ConfigError{Key: key, Msg: re.Msg}
		}
		return &ConfigError{Key: "bridge.nats.rules", Msg: err.Error()}
	}
	if b.AMQP, err = bridge.ParseAMQPBridges(get("bridge.amqp")); err != nil {
		var ae *bridge.AMQPConfigError
		if errors.As(err, &ae) {
			return &ConfigError{Key: "bridge.amqp" + ae.Path, Msg: ae.Msg}
		}
		return &ConfigError{Key: "bridge.amqp", Msg: err.Error()}
	}
	for i, a := range b.AMQP {
		for _, f := range []struct{ key, path string }{{"ca", a.TLSCA}, {"cert", a.TLSCert}, {"key", a.TLSKey}} {
			if f.path == "" {
				continue
			}
			if _, err := os.ReadFile(f.path); err != nil {
				return &ConfigError{Key: fmt.Sprintf("bridge.amqp[%d].tls.%s", i, f.key), Msg: fmt.Sprintf("cannot read %s: %v", f.path, errors.Unwrap(err))}
			}
		}
	}
	for _, f := range []struct{ key, path string }{
		{"bridge.nats.nkey", n.NKey}, {"bridge.nats.creds", n.Creds},
		{"bridge.nats.tls.ca", n.TLS.CA}, {"bridge.nats.tls.cert", n.TLS.Cert}, {"bridge.nats.tls.key", n.TLS.Key},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return &ConfigError{Key: f.key, Msg: fmt.Sprintf("cannot read %s: %v", f.path, errors.Unwrap(err))}
		}
	}
	if (n.TLS.Cert == "") != (n.TLS.Key == "") {
		return &ConfigError{Key: "bridge.nats.tls.cert", Msg: "bridge.nats.tls.cert and bridge.nats.tls.key go together"}
	}
	if (n.User == "") != (n.Password == "") && n.Password != "" {
		return &ConfigError{Key: "bridge.nats.user", Msg: "bridge.nats.password is set without a user"}
	}
	if p := n.RetainedRequests; p != "" && (strings.ContainsAny(p, "*> \t") || strings.HasSuffix(p, ".") || strings.HasPrefix(p, ".")) {
		return &ConfigError{Key: "bridge.nats.retainedRequests", Msg: fmt.Sprintf("%q is not a subject prefix (tokens without wildcards, such as $GW.retained)", p)}
	}
	if len(n.URLs) == 0 && len(n.Rules) > 0 {
		return &ConfigError{Key: "bridge.nats.url", Msg: "bridge.nats.rules are set but no NATS URL is"}
	}
	return nil
}
