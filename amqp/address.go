package amqp

import (
	"strings"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/core"
)

// Addressing (docs/architecture.md, decision 3; docs/mapping.md): a
// terminus address names a topic (an MQTT topic string, wildcards allowed
// in a receiver's source) or a queue. Capability "topic" or prefix
// "topic://" says topic; capability "queue" or prefix "queue://" says
// queue; a bare address is a queue of that name if one exists, otherwise a
// topic (Server.resolve, queues.go).
//
// Dynamic nodes get an address under "$tmp/": a "$" topic, so "#" and "+"
// at the first level never match it [MQTT-4.7.2-1]. Such an address is a
// topic whatever capability names it. With the queue engine, a dynamic
// node with capability "temporary-queue" (Qpid JMS createTemporaryQueue)
// is a temporary queue instead, named "queue://$tmpq/..." (queues.go).

type nodeKind uint8

const (
	nodeTopic nodeKind = iota
	nodeQueue
)

const (
	prefixTopic = "topic://"
	prefixQueue = "queue://"
	tmpPrefix   = "$tmp/"
)

// Terminus capabilities and connection capabilities we read or offer.
const (
	capTopic          encoding.Symbol = "topic"
	capQueue          encoding.Symbol = "queue"
	capTempTopic      encoding.Symbol = "temporary-topic"
	capTempQueue      encoding.Symbol = "temporary-queue"
	capAnonymousRelay encoding.Symbol = "ANONYMOUS-RELAY"
	// capFallback on a receiver's source makes it a fallback consumer of
	// its address (Qpid Dispatch's fallback links; docs/queues.md,
	// "Alternate destinations").
	capFallback encoding.Symbol = "qd.fallback"
)

// x-opt-jms-dest / x-opt-jms-reply-to values (Qpid JMS).
const (
	jmsQueue     int8 = 0
	jmsTopic     int8 = 1
	jmsTempQueue int8 = 2
	jmsTempTopic int8 = 3
)

// resolveAddress names the node a terminus address refers to.
func resolveAddress(addr string, caps []encoding.Symbol) (string, nodeKind) {
	switch {
	case strings.HasPrefix(addr, prefixTopic):
		return addr[len(prefixTopic):], nodeTopic
	case strings.HasPrefix(addr, prefixQueue):
		name := addr[len(prefixQueue):]
		if isTemp(name) {
			return name, nodeTopic
		}
		return name, nodeQueue
	}
	if isTemp(addr) {
		return addr, nodeTopic
	}
	for _, c := range caps {
		switch c {
		case capQueue, capTempQueue:
			return addr, nodeQueue
		case capTopic, capTempTopic:
			return addr, nodeTopic
		}
	}
	return addr, nodeTopic // Server.resolve makes it a queue when one of that name exists
}

// resolveTo names the node of an anonymous-relay message: its "to"
// property, typed by prefix or by the x-opt-jms-dest annotation Qpid JMS
// puts on messages of an anonymous producer.
func resolveTo(to string, jmsDest int8) (string, nodeKind) {
	switch {
	case strings.HasPrefix(to, prefixTopic), strings.HasPrefix(to, prefixQueue), isTemp(to):
		return resolveAddress(to, nil)
	case jmsDest == jmsQueue:
		return to, nodeQueue
	}
	return to, nodeTopic
}

func isTemp(topic string) bool { return strings.HasPrefix(topic, tmpPrefix) }

func hasCap(caps []encoding.Symbol, c encoding.Symbol) bool {
	for _, x := range caps {
		if x == c {
			return true
		}
	}
	return false
}

// tempKind is the JMS destination type of a dynamic node created with caps.
func tempKind(caps []encoding.Symbol) int8 {
	if hasCap(caps, capTempQueue) || hasCap(caps, capQueue) {
		return jmsTempQueue
	}
	return jmsTempTopic
}

// checkTopic checks a topic name an address or a message's "to" resolved to:
// MQTT's grammar and the gateway's topic limits (mqtt.maxTopicLevels,
// mqtt.maxTopicLength, which the router holds). AMQP addresses name the same
// topics as MQTT (docs/architecture.md, decision 3), so they obey the same bounds; a filter
// of thousands of levels would cost AMQP's subscribers what it cost mochi's.
// A refusal for a limit is counted.
func (s *Server) checkTopic(name string) error {
	return s.countRefusal(s.opts.Router.TopicLimits().ValidateTopic(name))
}

// checkFilter is checkTopic for a receiving link's source filter.
func (s *Server) checkFilter(filter string) error {
	return s.countRefusal(s.opts.Router.TopicLimits().ValidateFilter(filter))
}

func (s *Server) countRefusal(err error) error {
	if r := core.LimitReason(err); r != "" {
		s.opts.Metrics.TopicRefused("amqp", r)
	}
	return err
}
