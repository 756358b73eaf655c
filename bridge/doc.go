// Package bridge links the gateway's topic space to other messaging systems:
// NATS (core and JetStream, through nats.go) and remote AMQP 1.0 brokers
// (through go-amqp as a client). It owns the bridge rules, the mapping of
// names and messages between the systems, loop prevention, the on-disk
// store-and-forward buffer (bridge/buffer) and the cluster's fan-out between
// gateways over NATS.
//
// The mapping is written once here and documented in docs/bridge.md:
//
//   - subject.go: MQTT topic and filter ⇄ NATS subject, following the NATS
//     server's own MQTT support (so a device on the gateway and a device on
//     NATS's MQTT listener agree on every subject), and the per-rule prefix
//     remapping (Mapping); what has no faithful form is refused with
//     ErrUnmappable, never sent mangled;
//   - headers.go: the fields of a core.Message that are not topic and payload
//     ⇄ NATS headers, with the origin and the path of gateways a message has
//     passed (Provenance), which is how a loop is cut.
//
// The bridge is one more front-end, facing other systems instead of clients
// (docs/architecture.md, dependency rule 5): it speaks core.Message to
// core.Router and imports nothing of ours but core, retain and its own
// packages. It must not know the mqtt or amqp front-ends (a message from an
// MQTT device reaches it as a core.Message, whatever protocol brought it),
// nor gateway: it gets the router, store, metrics and logger through its
// options, filled in by gateway.
package bridge
