package mqtt

import (
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// subQuota bounds the subscriptions one client holds
// (Options.MaxSubscriptions, mqtt.maxSubscriptions): each is an entry in
// mochi's topic index and a match on every publish it covers. A filter of
// a SUBSCRIBE that would take the client beyond the bound gets SUBACK 0x97
// Quota exceeded (MQTT 3.1.1: 0x80 Failure), counted as
// tolsey_limit_refusals_total{protocol="mqtt",limit="subscriptions"};
// the filters before it in the packet are granted. A filter the client
// holds already (a resubscribe, which replaces the subscription
// [MQTT-3.8.4-3]) or names twice in the packet counts once.
//
// mochi has no hook that sets a filter's reason code, so the refusal
// rides on the ACL's: OnSubscribe notes the filters over the quota,
// OnACLCheck answers false for them (mochi then writes 0x87, 3.1.1 0x80,
// and indexes nothing), and OnSubscribed, which mochi calls with the very
// slice it then writes as the SUBACK's codes, turns 0x87 into 0x97 for
// MQTT 5 (TestMaxSubscriptions checks the code on the wire).
//
// While a client's SUBSCRIBE is between the two, OnACLCheck also answers
// false to a delivery to that client on a topic spelled exactly like a
// refused filter; outside such a window (active == 0) a delivery costs one
// atomic load here.
type subQuota struct {
	max int // 0: no limit

	active atomic.Int32 // clients in refusing
	// mu guards refusing: written on the subscribing client's reader,
	// read by every goroutine that delivers while active > 0.
	mu       sync.Mutex
	refusing map[*mochi.Client]map[string]struct{}
}

// subscribing notes which filters of a SUBSCRIBE are over the quota
// (OnSubscribe, on the client's reader, before mochi indexes any), and
// returns how many.
func (q *subQuota) subscribing(cl *mochi.Client, filters packets.Subscriptions) int {
	if q.max <= 0 {
		return 0
	}
	held := cl.State.Subscriptions.Len()
	var seen, over map[string]struct{}
	for _, f := range filters {
		if f.Filter == "" { // refused already: takes no room
			continue
		}
		if _, ok := cl.State.Subscriptions.Get(f.Filter); ok {
			continue
		}
		if _, ok := seen[f.Filter]; ok {
			continue
		}
		if seen == nil {
			seen = map[string]struct{}{}
		}
		seen[f.Filter] = struct{}{}
		if held < q.max {
			held++
			continue
		}
		if over == nil {
			over = map[string]struct{}{}
		}
		over[f.Filter] = struct{}{}
	}
	if over == nil {
		return 0
	}
	q.mu.Lock()
	if q.refusing == nil {
		q.refusing = map[*mochi.Client]map[string]struct{}{}
	}
	q.refusing[cl] = over
	q.mu.Unlock()
	q.active.Add(1)
	return len(over)
}

// refused reports whether filter is one of cl's over the quota, in the
// window of its SUBSCRIBE (OnACLCheck).
func (q *subQuota) refused(cl *mochi.Client, filter string) bool {
	if q.active.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.refusing[cl][filter]
	return ok
}

// subscribed ends cl's window (OnSubscribed) and gives MQTT 5 clients
// 0x97 for the filters refused over the quota.
func (q *subQuota) subscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	if q.active.Load() == 0 {
		return
	}
	q.mu.Lock()
	over, ok := q.refusing[cl]
	delete(q.refusing, cl)
	q.mu.Unlock()
	if !ok {
		return
	}
	q.active.Add(-1)
	if cl.Properties.ProtocolVersion < 5 {
		return // mochi wrote 0x80, 3.1.1's only failure code
	}
	for i, f := range pk.Filters {
		if _, ok := over[f.Filter]; ok && i < len(codes) && codes[i] == packets.ErrNotAuthorized.Code {
			codes[i] = packets.ErrQuotaExceeded.Code
		}
	}
}
