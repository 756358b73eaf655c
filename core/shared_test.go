package core

import (
	"context"
	"testing"
)

// elsewhere is a cluster's view that holds fixed groups on other gateways.
type elsewhere map[string]bool

func (e elsewhere) Elsewhere(g, f string) bool { return e[ShareFilter(g, f)] }

// shareSource stands for the MQTT front-end: it fans out itself and
// records the Delivery.Share it was given.
type shareSource struct {
	sink
	shares []string
}

func (*shareSource) Filters(func(string)) {}

func (s *shareSource) Deliver(m *Message, d Delivery) error {
	s.shares = append(s.shares, d.Share)
	return s.sink.Deliver(m, d)
}

// With a cluster's view, a message that entered here skips the router
// groups another gateway holds and reaches the others; one from another
// gateway reaches no group; PublishShare reaches the one group named,
// whatever the origin (the MQTT front-end's own message included), and
// the FilterSource with Delivery.Share set, and nobody else.
func TestRouterSharedAcrossGateways(t *testing.T) {
	r := NewRouter(RouterOptions{Node: "a"})
	held, alone, plain := &sink{}, &sink{}, &sink{}
	fs := &shareSource{}
	mustSubscribe(t, r, "$share/g/s/#", held, SubOptions{})
	mustSubscribe(t, r, "$share/h/s/#", alone, SubOptions{})
	mustSubscribe(t, r, "s/#", plain, SubOptions{})
	mustSubscribe(t, r, "#", fs, SubOptions{SkipOrigin: ProtocolMQTT})
	publish := func(node string) {
		r.Publish(context.Background(), &Message{Topic: "s/x", Origin: Origin{Node: node, Protocol: ProtocolAMQP}})
	}

	publish("a") // no view: as on one gateway
	r.SetShares(elsewhere{"$share/g/s/#": true})
	publish("a") // g held elsewhere: skipped here
	publish("b") // from another gateway: no group
	if held.n != 1 || alone.n != 2 || plain.n != 3 || fs.n != 3 {
		t.Fatalf("held %d, alone %d, plain %d, front-end %d; want 1, 2, 3, 3", held.n, alone.n, plain.n, fs.n)
	}
	if r.SkipsGroup(nil, "g", "s/#", "") != true || r.SkipsGroup(nil, "h", "s/#", "") != false {
		t.Fatal("SkipsGroup does not follow the view")
	}

	res := r.PublishShare(context.Background(), &Message{Topic: "s/x", Origin: Origin{Node: "a", Protocol: ProtocolMQTT}}, "$share/g/s/#")
	if held.n != 2 || alone.n != 2 || plain.n != 3 || fs.n != 4 || res.Matched != 2 {
		t.Fatalf("PublishShare: held %d, alone %d, plain %d, front-end %d, matched %d; want 2, 2, 3, 4, 2", held.n, alone.n, plain.n, fs.n, res.Matched)
	}
	if last := fs.shares[len(fs.shares)-1]; last != "$share/g/s/#" {
		t.Fatalf("front-end got Delivery.Share %q", last)
	}
	r.SetShares(nil)
	publish("a")
	if held.n != 3 {
		t.Fatalf("without the view, group g got %d, want 3", held.n)
	}
}
