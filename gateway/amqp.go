package gateway

import (
	"context"
	"math"

	"github.com/tolsey/tolsey/amqp"
	"github.com/tolsey/tolsey/core/auth"
)

// startAMQP starts the AMQP 1.0 front-end when amqp.listen is set.
func (g *Gateway) startAMQP(context.Context) error {
	if g.cfg.AMQP.Listen == "" {
		return nil
	}
	// With auth.file (or auth.http.url) the users file and the hook serve
	// AMQP too, and replace amqp.users and amqp.allowAnonymous
	// (docs/security.md); without them those keep working as before.
	var live *auth.Live
	if g.cfg.Auth.Enabled() {
		live = g.auth
	}
	s, err := amqp.New(amqp.Options{
		Auth:                  live,
		Admission:             g.admission,
		Listen:                g.cfg.AMQP.Listen,
		TLSListen:             g.cfg.AMQP.TLSListen,
		TLS:                   serverTLS(g.tlsFor("amqp.tls")),
		Router:                g.router,
		Queues:                g.queues.Load(),
		AutoCreateQueues:      g.cfg.Queues.AutoCreate,
		BareAddressQueue:      g.cfg.AMQP.BareQueue,
		Store:                 g.store,
		Metrics:               g.metrics,
		Logger:                g.log,
		Node:                  g.cfg.NodeID,
		MaxMessageSize:        uint64(g.cfg.AMQP.MaxMessageSize),
		MaxFrameSize:          uint32(min(g.cfg.AMQP.MaxFrameSize, math.MaxUint32)),
		IdleTimeout:           g.cfg.AMQP.IdleTimeout,
		AllowAnonymous:        g.cfg.AMQP.AllowAnonymous,
		Users:                 g.cfg.AMQP.Users,
		LinkBuffer:            g.cfg.AMQP.LinkBuffer,
		BlockOnOverflow:       g.cfg.AMQP.LinkBlock,
		OverflowWait:          g.cfg.AMQP.LinkBlockWait,
		WriteTimeout:          g.cfg.AMQP.WriteTimeout,
		SendBuffer:            g.cfg.Limits.SendBuffer,
		MaxSessions:           g.cfg.AMQP.MaxSessions,
		MaxLinksPerConnection: g.cfg.AMQP.MaxLinks,
		MaxSelectorLength:     g.cfg.AMQP.MaxSelector,
		MaxTxnMessages:        g.cfg.AMQP.MaxTxnMessages,
		Containers:            g.amqpContainers(),
	})
	if err != nil {
		return err
	}
	if c := g.cluster.Load(); c != nil {
		c.SetContainers(s) // before any connection opens: claims from other gateways reach it
	}
	if err := s.Start(); err != nil {
		return err
	}
	g.amqp = s
	g.countAcceptFailures(s.Listener())
	if l := s.TLSListener(); l != nil {
		g.countAcceptFailures(l)
	}
	g.onStop(s.Shutdown)
	return nil
}

// AMQPTLSAddr is the bound AMQP over TLS address, or "" when
// amqp.tls.listen is empty.
func (g *Gateway) AMQPTLSAddr() string {
	if g.amqp == nil {
		return ""
	}
	return g.amqp.TLSAddr()
}

// AMQPAddr is the bound AMQP address, or "" when amqp.listen is empty.
func (g *Gateway) AMQPAddr() string {
	if g.amqp == nil {
		return ""
	}
	return g.amqp.Addr()
}
