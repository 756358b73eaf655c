package amqp

import (
	"testing"

	"github.com/tolsey/tolsey/amqp/internal/encoding"
	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// soleOpen is the open of a client that wants its container id to itself,
// as Qpid JMS sends it.
func soleOpen(id string) *frames.Open {
	return &frames.Open{ContainerID: id, DesiredCapabilities: []encoding.Symbol{capSoleConnection, capAnonymousRelay}}
}

// A container id a client asks to have alone (Qpid JMS: its ClientID) is
// refused to a second connection while the first is open, as ActiveMQ
// Artemis refuses it: an open saying amqp:connection-establishment-failed,
// then a close amqp:invalid-field with {invalid-field: container-id},
// which Qpid JMS reports as InvalidClientIDException. The first
// connection stays; a connection that does not ask is let in; once the
// first ends, the id is free. Before, both were accepted.
func TestSoleConnectionForContainer(t *testing.T) {
	e := startServer(t)
	first := rawDial(t, e.addr)
	if o := first.open(soleOpen("jms-1")); !hasCap(o.OfferedCapabilities, capSoleConnection) {
		t.Fatalf("the server does not offer %s: %+v", capSoleConnection, o)
	}
	first.begin(0)

	second := rawDial(t, e.addr)
	o := second.open(soleOpen("jms-1"))
	if v, _ := o.Properties.Get(propOpenFailed); v != true {
		t.Fatalf("the refused connection's open has no %s: %+v", propOpenFailed, o.Properties)
	}
	ce := second.expectClose(frames.ErrCondInvalidField)
	if v, _ := ce.Info.Get("invalid-field"); v != encoding.Symbol("container-id") {
		t.Fatalf("close info %+v, want invalid-field: container-id", ce.Info)
	}

	// Not asking: let in, as Artemis does.
	plain := rawDial(t, e.addr)
	if o := plain.open(&frames.Open{ContainerID: "jms-1"}); o.Properties != nil {
		if _, failed := o.Properties.Get(propOpenFailed); failed {
			t.Fatal("a connection that did not ask for its container id alone was refused")
		}
	}
	plain.begin(0) // still served
	first.begin(1) // still served

	first.nc.Close()
	plain.nc.Close()
	eventually(t, "jms-1 free again", func() bool { return !e.srv.ContainerInUse("jms-1", 1<<62, "z") })
	third := rawDial(t, e.addr)
	if o := third.open(soleOpen("jms-1")); o.Properties != nil {
		if _, failed := o.Properties.Get(propOpenFailed); failed {
			t.Fatal("jms-1 refused after its connections ended")
		}
	}
	third.begin(0)
}
