package gateway

import "context"

// startAMQP starts the AMQP 1.0 front-end when amqp.listen is set.
func (g *Gateway) startAMQP(ctx context.Context) error {
	if g.cfg.AMQP.Listen == "" {
		return nil
	}
	g.log.Warn("amqp.listen is set but the AMQP 1.0 front-end is not built into this version yet", "amqp.listen", g.cfg.AMQP.Listen)
	return nil
}
