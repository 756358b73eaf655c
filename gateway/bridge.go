package gateway

import (
	"context"
	"net/http"
	"path/filepath"

	"github.com/tolsey/tolsey/bridge"
)

// startBridge starts the NATS bridge when bridge.nats.url is set. It comes
// after the router (inbound rules publish into it) and before the
// front-ends, so that it stops after them: the last publishes they took
// are in its buffer before it closes.
func (g *Gateway) startBridge(ctx context.Context) error {
	shared, err := g.openBridgeBuffer()
	if err != nil {
		return err
	}
	if err := g.startAMQPBridges(ctx, shared); err != nil {
		return err
	}
	n := g.cfg.Bridge.NATS
	if len(n.URLs) == 0 {
		return nil
	}
	b, err := bridge.NewNATS(bridge.NATSOptions{
		URLs: n.URLs, Name: n.Name,
		User: n.User, Password: n.Password, Token: n.Token, NKeyFile: n.NKey, CredsFile: n.Creds,
		TLSCA: n.TLS.CA, TLSCert: n.TLS.Cert, TLSKey: n.TLS.Key,
		Rules:            n.Rules,
		RetainedRequests: n.RetainedRequests,
		WriterStall:      writeTimeout(n.WriterStall), // 0: no stall
		Router:           g.router,
		Store:            g.store,
		Node:             g.cfg.NodeID,
		Logger:           g.log,
		Registerer:       g.metrics.Registry,
		Buffer:           g.bufferOptions(),
		Shared:           shared,
		Identity:         bridge.Identity{Auth: g.auth, User: g.cfg.Bridge.Identity},
		QueueGroup:       g.clusterQueueGroup(),
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	g.nats = b
	g.onStop(b.Stop)
	return nil
}

// BridgesDown says which bridges cannot reach their remote and why, for
// /readyz's body: the gateway still serves its local clients (and buffers
// outbound JetStream messages), so a bridge down does not make it unready.
func (g *Gateway) BridgesDown() []string {
	var out []string
	if g.nats != nil {
		if err := g.nats.Down(); err != nil {
			out = append(out, "bridge nats down: "+err.Error())
		}
	}
	for _, a := range g.amqpBridges {
		if err := a.Down(); err != nil {
			out = append(out, "bridge amqp "+a.Name()+" down: "+err.Error())
		}
	}
	return out
}

// openBridgeBuffer opens the store-and-forward buffer every bridge with a
// QoS 1 outbound rule appends to (NATS JetStream, remote AMQP), in
// data.dir/bridge, so that bridge.buffer.maxBytes is one budget for them
// all; nil when no rule needs it. It closes after every bridge stopped
// (stops run in reverse).
func (g *Gateway) openBridgeBuffer() (*bridge.SharedBuffer, error) {
	need := len(g.cfg.Bridge.NATS.URLs) > 0 && bridge.NATSNeedsBuffer(g.cfg.Bridge.NATS.Rules)
	for _, ab := range g.cfg.Bridge.AMQP {
		need = need || ab.NeedsBuffer()
	}
	if !need {
		return nil, nil
	}
	shared, err := bridge.OpenSharedBuffer(g.bufferOptions())
	if err != nil {
		return nil, err
	}
	g.onStop(func(context.Context) error { return shared.Close() })
	return shared, nil
}

// startAMQPBridges starts bridge.amqp's bridges on the shared buffer.
func (g *Gateway) startAMQPBridges(ctx context.Context, shared *bridge.SharedBuffer) error {
	bo := g.bufferOptions()
	for _, ab := range g.cfg.Bridge.AMQP {
		b, err := bridge.NewAMQP(bridge.AMQPOptions{
			Bridge:     ab,
			Router:     g.router,
			Node:       g.cfg.NodeID,
			Logger:     g.log,
			Registerer: g.metrics.Registry,
			Buffer:     bo,
			Shared:     shared,
			Identity:   bridge.Identity{Auth: g.auth, User: g.cfg.Bridge.Identity},
		})
		if err != nil {
			return err
		}
		if err := b.Start(ctx); err != nil {
			return err
		}
		g.amqpBridges = append(g.amqpBridges, b)
		g.onStop(b.Stop)
	}
	return nil
}

// Bridges is the state of every bridge, as GET /api/v1/bridges shows it.
func (g *Gateway) Bridges() []bridge.Status {
	out := []bridge.Status{}
	if g.nats != nil {
		out = append(out, g.nats.Status())
	}
	for _, a := range g.amqpBridges {
		out = append(out, a.Status())
	}
	return out
}

// listBridges is GET /api/v1/bridges; 503 while the gateway starts: Start
// sets the bridges while the admin API already serves.
func (a *adminServer) listBridges(w http.ResponseWriter, _ *http.Request) {
	if !a.g.ready.Load() {
		apiError(w, http.StatusServiceUnavailable, "starting")
		return
	}
	writeJSON(w, http.StatusOK, a.g.Bridges())
}

// bufferOptions is bridge.buffer.*, for the buffer in data.dir/bridge.
func (g *Gateway) bufferOptions() bridge.BufferOptions {
	return bridge.BufferOptions{
		Dir:        filepath.Join(g.cfg.DataDir, "bridge"),
		MaxBytes:   g.cfg.Bridge.Buffer.MaxBytes,
		DropOldest: g.cfg.Bridge.Buffer.DropOldest,
		DrainRate:  g.cfg.Bridge.Buffer.DrainRate,
	}
}
