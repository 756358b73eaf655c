package mqtt

import (
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// ackOverrides are the reason codes of the PUBACKs/PUBRECs mochi is about to
// write for MQTT 5 publishes whose retained write was refused, or that a
// subscriber refused (a full bridge buffer, 0x97): the message
// was still delivered live, and the ack tells the publisher the truth
// (docs/architecture.md, "The acknowledgement back to the publisher").
// mochi lets OnPublish only refuse a publish outright (and then neither
// delivers it nor answers a QoS 2 one with a PUBREC), so the code is
// recorded here and put on the ack as mochi encodes it.
//
// Goroutines: record runs on the publisher's reader goroutine (OnPublish,
// before mochi writes the ack); take on the goroutine that encodes the ack
// (OnPacketEncode: the client's writer, or its reader writing directly);
// forget on the reader as the client leaves. mu guards codes; n mirrors
// len(codes), so that the encoder of every ack skips the lock while no
// override waits, which is nearly always.
type ackOverrides struct {
	mu    sync.Mutex
	codes map[ackKey]packets.Code
	n     atomic.Int32
}

type ackKey struct {
	cl *mochi.Client
	id uint16
}

// record makes the ack of cl's packet id carry code.
func (a *ackOverrides) record(cl *mochi.Client, id uint16, code packets.Code) {
	a.mu.Lock()
	if a.codes == nil {
		a.codes = map[ackKey]packets.Code{}
	}
	a.codes[ackKey{cl, id}] = code
	a.n.Store(int32(len(a.codes)))
	a.mu.Unlock()
}

// take returns, and forgets, the code recorded for the ack of cl's packet
// id.
func (a *ackOverrides) take(cl *mochi.Client, id uint16) (packets.Code, bool) {
	if a.n.Load() == 0 {
		return packets.Code{}, false
	}
	k := ackKey{cl, id}
	a.mu.Lock()
	code, ok := a.codes[k]
	delete(a.codes, k)
	a.n.Store(int32(len(a.codes)))
	a.mu.Unlock()
	return code, ok
}

// forget drops the codes of a client that left before its acks went out.
func (a *ackOverrides) forget(cl *mochi.Client) {
	if a.n.Load() == 0 {
		return
	}
	a.mu.Lock()
	for k := range a.codes {
		if k.cl == cl {
			delete(a.codes, k)
		}
	}
	a.n.Store(int32(len(a.codes)))
	a.mu.Unlock()
}
