package core

import (
	"context"
	"testing"
)

// TestRouterMessageFromAnotherGateway: a message that entered another
// gateway of a cluster (Origin.Node not the router's) reaches a front-end
// that skips its protocol (nobody here fanned it out), is skipped by
// LocalOnly subscriptions (the cluster, the bridges: that gateway sent it
// already), and is not stored again (docs/cluster.md).
func TestRouterMessageFromAnotherGateway(t *testing.T) {
	stored := 0
	r := NewRouter(RouterOptions{Node: "b", Retainer: retainerFunc(func(context.Context, *Message) error {
		stored++
		return nil
	})})
	mqttFE := &recorder{name: "mqtt"}
	out := &recorder{name: "cluster"}
	mustSubscribe(t, r, "#", mqttFE, SubOptions{QoS: 1, SkipOrigin: ProtocolMQTT})
	mustSubscribe(t, r, "#", out, SubOptions{QoS: 2, LocalOnly: true})

	r.Publish(context.Background(), &Message{Topic: "t", Retain: true, Origin: Origin{Protocol: ProtocolMQTT, Node: "a"}})
	if mqttFE.count() != 1 || out.count() != 0 || stored != 0 {
		t.Fatalf("from a: mqtt front-end got %d (want 1), LocalOnly got %d (want 0), stored %d (want 0)", mqttFE.count(), out.count(), stored)
	}
	if !r.Wants("t", ProtocolAMQP) {
		t.Fatal("Wants: a local AMQP message is wanted by both")
	}

	// Entered here: the front-end's own fan-out, the cluster sends it on,
	// the store keeps it.
	r.Publish(context.Background(), &Message{Topic: "t", Retain: true, Origin: Origin{Protocol: ProtocolMQTT}})
	if mqttFE.count() != 1 || out.count() != 1 || stored != 1 {
		t.Fatalf("local: mqtt front-end got %d (want 1), LocalOnly got %d (want 1), stored %d (want 1)", mqttFE.count(), out.count(), stored)
	}
}
