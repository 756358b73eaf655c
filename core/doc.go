// Package core is the protocol-neutral heart of the gateway: the Message that
// every front-end speaks, the MQTT topic and filter grammar, the subscription
// index and the Router that fans a message out to every matching subscriber of
// every front-end exactly once.
//
// core imports nothing of ours. Front-ends (mqtt, amqp), the NATS bridge and
// queues plug in through Subscriber; the retained store plugs in through
// Retainer. core must not know about sockets, wire formats or storage engines.
package core
