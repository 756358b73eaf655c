package cluster

// AMQP container ids unique across gateways for connections that ask for
// it (docs/cluster.md, "AMQP container ids"): Qpid JMS opens every
// connection with the desired capability sole-connection-for-container,
// its container id being the JMS ClientID, which JMS wants unique. A
// gateway opening such a connection claims its container id on
// <prefix>.container as an MQTT CONNECT claims a client id (takeover.go,
// same answers and waiting), but the rule is the opposite of MQTT's: a
// gateway holding an older connection of that id keeps it and answers "in
// use", and the new connection is refused.

import (
	"encoding/json"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// Containers is the front-end whose container ids may be claimed (the
// AMQP server, wired by the gateway).
type Containers interface {
	// ContainerInUse reports whether a connection of container opened
	// here before stamp (unix ns; equal stamps: before node's, by node
	// id) is open. Must not block on the network.
	ContainerInUse(container string, stamp int64, node string) bool
}

// containers is the container claims' state.
type containers struct {
	front atomic.Pointer[Containers]
	sub   *nats.Subscription
}

// SetContainers hands the cluster the AMQP front-end; claims before it
// are answered "free" (no connection can be open yet).
func (c *Cluster) SetContainers(f Containers) { c.ct.front.Store(&f) }

func (c *Cluster) containerSubject() string { return c.opts.Prefix + ".container" }

// ClaimContainer tells the other gateways that a connection of container
// opens here at stamp and asking for it alone; it reports whether one
// holds an older connection of it (the new one is then refused), waiting
// at most TakeoverTimeout. A gateway that does not answer in time is
// passed over: the connection is let in.
func (c *Cluster) ClaimContainer(container string, stamp int64) (inUse bool) {
	_, inUse = c.ask(c.containerSubject(), container, stamp)
	return inUse
}

func (c *Cluster) startContainers() error {
	s, err := c.opts.Conn.Subscribe(c.containerSubject(), c.containerIn)
	if err != nil {
		return err
	}
	c.ct.sub = s
	return nil
}

func (c *Cluster) stopContainers() {
	if c.ct.sub != nil {
		_ = c.ct.sub.Unsubscribe()
	}
}

// containerIn is another gateway's container claim, on nats.go's
// goroutine: answered with this gateway's node id, and answerInUse when
// an older connection of the id is open here.
func (c *Cluster) containerIn(msg *nats.Msg) {
	var cm claimMsg
	if err := json.Unmarshal(msg.Data, &cm); err != nil || cm.Client == "" || cm.Node == c.opts.Node || msg.Reply == "" {
		return
	}
	answer := c.opts.Node
	if p := c.ct.front.Load(); p != nil && (*p).ContainerInUse(cm.Client, cm.Stamp, cm.Node) {
		answer += answerInUse
	}
	_ = c.opts.Conn.Publish(msg.Reply, []byte(answer))
}
