package bridge

import (
	"testing"
	"unsafe"
)

// The caches keep copies of the names they are given: a topic decoded by
// mochi points into its whole packet, payload included, which a cached
// key or subject would keep alive (4,096 entries × a 1 MiB packet).
func TestMapCacheCopiesNames(t *testing.T) {
	m, err := NewMapping("sensors/#", "iot.sensors.>")
	if err != nil {
		t.Fatal(err)
	}
	r := &ruleLink{mapng: m}
	b := &NATS{}
	packet := []byte("sensors/a" + string(make([]byte, 1<<20)))
	topic := unsafe.String(&packet[0], len("sensors/a")) // as mochi decodes it
	inPacket := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		start := uintptr(unsafe.Pointer(&packet[0]))
		return p >= start && p < start+uintptr(len(packet))
	}
	if s, err := b.subjectOut(r, topic); err != nil || s != "iot.sensors.a" {
		t.Fatalf("subjectOut: %q, %v", s, err)
	}
	for k, v := range b.subjects.m {
		if inPacket(k.topic) || inPacket(v) {
			t.Fatalf("the cache keeps the packet's bytes (key %q, subject %q)", k.topic, v)
		}
	}

	var c mapCache[string]
	copy(packet, "iot.sensors.b")
	subj := unsafe.String(&packet[0], len("iot.sensors.b")) // a subject in a receive buffer
	if tp, err := r.topicIn(&c, subj); err != nil || tp != "sensors/b" {
		t.Fatalf("topicIn: %q, %v", tp, err)
	}
	if len(c.m) != 1 {
		t.Fatalf("inbound cache: %v", c.m)
	}
	for k, v := range c.m {
		if inPacket(k) || inPacket(v) {
			t.Fatalf("the inbound cache keeps the caller's bytes (%q → %q)", k, v)
		}
	}
}
