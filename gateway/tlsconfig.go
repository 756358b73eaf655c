package gateway

import (
	"errors"
	"fmt"

	"github.com/tolsey/tolsey/core/tlsconf"
)

// tlsSection is one listener group's TLS keys: prefix.cert, prefix.key and
// (where it has them) prefix.clientCA, prefix.clientAuth.
type tlsSection struct {
	prefix string // "mqtt.tls", "amqp.tls", "admin.tls"
	opts   *tlsconf.Options
	used   bool   // a listener serves with it
	by     string // the key that makes it used, for the error
}

// tlsSections are the configuration's TLS sections, in start order.
func (c *Config) tlsSections() []tlsSection {
	mqttBy := "mqtt.tls.listen"
	if c.MQTT.TLSListen == "" {
		mqttBy = "mqtt.wss.listen"
	}
	amqpBy := "amqp.tls.listen"
	if c.AMQP.TLSListen == "" {
		amqpBy = "amqp.listen (the TLS upgrade)"
	}
	return []tlsSection{
		{prefix: "admin.tls", opts: &c.AdminTLS, used: c.AdminListen != "" && (c.AdminTLS.Cert != "" || c.AdminTLS.Key != "" || c.AdminTLS.ClientCA != "" || c.AdminTLS.ClientAuth != tlsconf.ClientAuthNone), by: "admin.listen"},
		{prefix: "mqtt.tls", opts: &c.MQTT.TLS, used: c.MQTT.TLSListen != "" || c.MQTT.WSSListen != "", by: mqttBy},
		{prefix: "amqp.tls", opts: &c.AMQP.TLS, used: c.AMQP.TLSListen != "" || c.amqpUpgrade(), by: amqpBy},
	}
}

// amqpUpgrade: amqp.tls.cert or amqp.tls.key without amqp.tls.listen
// still serve TLS, to clients on amqp.listen that ask for it with the TLS
// protocol header (AMQP 1.0 §5.2.1, docs/tls.md).
func (c *Config) amqpUpgrade() bool {
	return c.AMQP.Listen != "" && (c.AMQP.TLS.Cert != "" || c.AMQP.TLS.Key != "")
}

// buildTLSConfig reads mqtt.tls.*, mqtt.wss.listen, amqp.tls.* and
// admin.tls.*, and loads the files of every section a listener uses, so
// that a missing file, a key that is not the certificate's or clientAuth
// require without a client CA stops the gateway at start (exit 2) naming
// the key, rather than failing every handshake.
func buildTLSConfig(c *Config, get func(string) string) error {
	c.MQTT.TLSListen = get("mqtt.tls.listen")
	c.MQTT.WSSListen = get("mqtt.wss.listen")
	c.MQTT.TLS = tlsconf.Options{Cert: get("mqtt.tls.cert"), Key: get("mqtt.tls.key"),
		ClientCA: get("mqtt.tls.clientCA"), ClientAuth: get("mqtt.tls.clientAuth")}
	c.AMQP.TLSListen = get("amqp.tls.listen")
	c.AMQP.TLS = tlsconf.Options{Cert: get("amqp.tls.cert"), Key: get("amqp.tls.key"),
		ClientCA: get("amqp.tls.clientCA"), ClientAuth: get("amqp.tls.clientAuth")}
	c.AdminTLS = tlsconf.Options{Cert: get("admin.tls.cert"), Key: get("admin.tls.key"),
		ClientCA: get("admin.tls.clientCA"), ClientAuth: get("admin.tls.clientAuth")}
	if c.AMQP.TLSListen != "" && c.AMQP.Listen == "" {
		// The front-end starts with amqp.listen; keep plain AMQP to
		// yourself with amqp.listen: 127.0.0.1:5672.
		return &ConfigError{Key: "amqp.listen", Msg: "empty turns AMQP off, amqp.tls.listen included: set it (127.0.0.1:5672 keeps plain AMQP on loopback)"}
	}
	for _, s := range c.tlsSections() {
		if !s.used {
			continue
		}
		if s.opts.Cert == "" || s.opts.Key == "" {
			missing := s.prefix + ".cert"
			if s.opts.Cert != "" {
				missing = s.prefix + ".key"
			}
			return &ConfigError{Key: missing, Msg: fmt.Sprintf("required with %s (the PEM files the listener serves with)", s.by)}
		}
		if _, err := loadTLS(s.prefix, *s.opts); err != nil {
			return err
		}
	}
	return nil
}

// loadTLS loads one section's files; the error is a *ConfigError naming
// the key of the file (or value) at fault.
func loadTLS(prefix string, o tlsconf.Options) (*tlsconf.Config, error) {
	t, err := tlsconf.Load(o)
	if err != nil {
		return nil, tlsKeyError(prefix, err)
	}
	return t, nil
}

// tlsKeyError names the key of a tlsconf error: mqtt.tls + cert.
func tlsKeyError(prefix string, err error) error {
	var te *tlsconf.Error
	if errors.As(err, &te) {
		return &ConfigError{Key: prefix + "." + te.Field, Msg: te.Err.Error()}
	}
	return &ConfigError{Key: prefix, Msg: err.Error()}
}

// tlsHolder is one loaded TLS section, for ReloadTLS.
type tlsHolder struct {
	prefix string
	cfg    *tlsconf.Config
	files  []string // its certificate, key and client CA files, for tls.watch
}

// startTLS loads the TLS sections the listeners use (again: the files may
// have changed since LoadConfig checked them). Called before any listener
// starts.
func (g *Gateway) startTLS() error {
	for _, s := range g.cfg.tlsSections() {
		if !s.used {
			continue
		}
		t, err := loadTLS(s.prefix, *s.opts)
		if err != nil {
			return err
		}
		files := []string{s.opts.Cert, s.opts.Key}
		if s.opts.ClientCA != "" {
			files = append(files, s.opts.ClientCA)
		}
		g.tls = append(g.tls, tlsHolder{prefix: s.prefix, cfg: t, files: files})
	}
	return nil
}

// tlsFor is the loaded section prefix, or nil when no listener uses it.
func (g *Gateway) tlsFor(prefix string) *tlsconf.Config {
	for _, h := range g.tls {
		if h.prefix == prefix {
			return h.cfg
		}
	}
	return nil
}

// ReloadTLS re-reads the certificate, key and client CA files of every TLS
// listener (Reload runs it, for SIGHUP and POST /api/v1/reload). New handshakes use the
// new files; established connections keep their session. A section whose
// files fail keeps what it had, and its error, naming the key
// (mqtt.tls.key: ...), is in the joined result; the others are reloaded
// all the same.
func (g *Gateway) ReloadTLS() error { return errors.Join(g.reloadTLS()...) }

// reloadTLS reloads every section; one error per section that failed.
func (g *Gateway) reloadTLS() []error {
	var errs []error
	for _, h := range g.tls {
		if err := h.cfg.Reload(); err != nil {
			errs = append(errs, tlsKeyError(h.prefix, err))
		}
	}
	return errs
}
