package cluster

// Queue declarations that follow across gateways (docs/cluster.md,
// "Queues"): the queues live in a store every gateway shares (Redis),
// which is the truth; what travels on NATS is only news that one changed.
//
//	<prefix>.queue    body: a queue's name; its declaration was stored,
//	                  changed or dropped by the sending gateway
//
// The receiver reads that declaration from the store again
// (Options.QueueChanged). A lost message is healed by the engine's
// periodic reading of every declaration, and at once after a NATS
// reconnect (Options.Reconnected).

import (
	"github.com/nats-io/nats.go"
)

func (c *Cluster) queueSubject() string { return c.opts.Prefix + ".queue" }

// startQueues subscribes to the news of other gateways' declarations,
// when the gateway follows them (Options.QueueChanged).
func (c *Cluster) startQueues() error {
	if c.opts.QueueChanged == nil {
		return nil
	}
	s, err := c.opts.Conn.Subscribe(c.queueSubject(), func(msg *nats.Msg) {
		if len(msg.Data) > 0 {
			// On this subscription's own goroutine: one store read per
			// message, in the order they came.
			c.opts.QueueChanged(string(msg.Data))
		}
	})
	if err != nil {
		return err
	}
	c.qsub = s
	return nil
}

func (c *Cluster) stopQueues() {
	if c.qsub != nil {
		_ = c.qsub.Unsubscribe()
	}
}

// QueueChanged tells the other gateways that this one stored, changed or
// dropped the declaration of the queue named name in the shared store.
// Best effort: NATS keeps nothing, and a gateway that misses it reads
// every declaration again later.
func (c *Cluster) QueueChanged(name string) {
	if name == "" {
		return
	}
	if err := c.opts.Conn.Publish(c.queueSubject(), []byte(name)); err != nil {
		c.log.Debug("cluster: queue news not sent", "queue", name, "error", err)
	}
}
