// Package amqp is the gateway's AMQP 1.0 front-end: a server (go-amqp is only
// a client) that lets JMS (Qpid JMS), Proton, rhea and go-amqp applications
// publish to and subscribe on the same topics as the MQTT devices.
//
// It owns, above the wire code in amqp/internal (buffer, encoding, frames):
//
//   - the protocol-header and SASL exchange (SCRAM-SHA-256, PLAIN, EXTERNAL,
//     ANONYMOUS against core/auth), sasl.go; the ACL on links and messages,
//     authz.go;
//   - the connection, session and link state machines, conn.go, session.go,
//     receiver.go (links the client sends on) and sender.go (links the
//     client receives on), with writer.go the connection's writer goroutine;
//   - the limits on what one connection may hold (sessions, links) and
//     their counters, limits.go; the write deadline, writer.go;
//   - address resolution (topic, queue, dynamic nodes), address.go;
//   - JMS durable and shared subscriptions, subscription.go;
//   - the mapping between AMQP messages and core.Message, mapping.go, which
//     docs/mapping.md describes for users.
//
// Goroutines: per connection, one reader goroutine owns the state machines
// and everything received; one writer goroutine owns the socket's write
// side and everything about outgoing deliveries (credit, windows,
// unsettled state). They talk through a bounded write queue. Every
// goroutine is started through Server.spawn, which refuses once Shutdown
// has begun, so Shutdown can wait for all of them.
//
// This package must not know about MQTT or NATS: it speaks core.Message.
package amqp
