package gateway

import (
	"fmt"

	"github.com/tolsey/tolsey/mqtt/session"
)

// openSessions opens the store of persistent MQTT sessions that
// mqtt.sessions.backend names: nil for memory (sessions die with the
// process, as before the store existed). The MQTT front-end owns it from
// here and closes it at its Shutdown.
func (g *Gateway) openSessions() (session.Backend, error) {
	if g.cfg.MQTT.SessionsBackend == "memory" {
		return nil, nil
	}
	b, err := session.OpenBolt(g.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("mqtt session store (data.dir %s): %w", g.cfg.DataDir, err)
	}
	return b, nil
}
