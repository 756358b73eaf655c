package e2e

import (
	"context"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
)

// What happens today when one AMQP container id (a JMS ClientID) opens a
// connection on two gateways of a cluster: both are accepted and both
// work; nothing makes a container id unique, across gateways or on one
// (docs/cluster.md, "AMQP container ids"). This pins the behaviour the
// docs describe; a change that makes ids unique changes this test.
func TestClusterAMQPContainerIDNotUnique(t *testing.T) {
	_, gs := cluster3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cs []*amqpCollector
	for _, g := range gs[:2] {
		c, err := goamqp.Dial(ctx, "amqp://"+g.AMQPAddr(), &goamqp.ConnOptions{
			SASLType: goamqp.SASLTypeAnonymous(), ContainerID: "jms-client-1"})
		if err != nil {
			t.Fatalf("open with container id jms-client-1 on %s: %v", g.AMQPAddr(), err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := c.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, collectAMQP(t, amqpReceiver(t, s, "topic://ct/x")))
	}
	pub := connect5(t, gs[2].MQTTAddr(), "ctpub")
	eventually(t, "both connections of jms-client-1 to receive", func() bool {
		pub.publish(t, &paho.Publish{Topic: "ct/x", QoS: 1, Payload: []byte("x")})
		return cs[0].count("x") > 0 && cs[1].count("x") > 0
	})
}
