package core

import (
	"testing"
	"time"
)

func TestMessageExpiry(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		expiry  time.Time
		expired bool
		secs    uint32
		expires bool
	}{
		{time.Time{}, false, 0, false},
		{now, true, 0, true},
		{now.Add(-time.Second), true, 0, true},
		{now.Add(time.Nanosecond), false, 1, true}, // rounded up [MQTT-3.3.2-6]
		{now.Add(time.Second), false, 1, true},
		{now.Add(1500 * time.Millisecond), false, 2, true},
		{now.Add(200 * 365 * 24 * time.Hour), false, 1<<32 - 1, true}, // capped at uint32
	}
	for _, tt := range tests {
		m := &Message{Expiry: tt.expiry}
		if got := m.Expired(now); got != tt.expired {
			t.Errorf("Expiry %v: Expired = %v, want %v", tt.expiry, got, tt.expired)
		}
		secs, expires := m.RemainingExpiry(now)
		if secs != tt.secs || expires != tt.expires {
			t.Errorf("Expiry %v: RemainingExpiry = %d, %v; want %d, %v", tt.expiry, secs, expires, tt.secs, tt.expires)
		}
	}
}

func TestMessageSizeAndClone(t *testing.T) {
	m := &Message{
		Topic:           "a/b",
		Payload:         []byte("hello"),
		ContentType:     "text/plain",
		CorrelationData: []byte{1, 2},
		ResponseTopic:   "r",
		UserProperties:  []UserProperty{{"k", "v"}, {"k", "vv"}},
	}
	if got, want := m.Size(), 3+5+10+2+1+2+3; got != want {
		t.Fatalf("Size = %d, want %d", got, want)
	}
	c := m.Clone()
	if c.Size() != m.Size() || c.Topic != m.Topic {
		t.Fatal("Clone differs")
	}
	c.Payload[0] = 'H'
	c.CorrelationData[0] = 9
	c.UserProperties[0].Value = "x"
	if m.Payload[0] != 'h' || m.CorrelationData[0] != 1 || m.UserProperties[0].Value != "v" {
		t.Fatal("Clone shares slices with the original")
	}
	// nil optional fields stay nil.
	e := (&Message{Topic: "t"}).Clone()
	if e.CorrelationData != nil || e.UserProperties != nil {
		t.Fatal("Clone turned nil optional fields into empty ones")
	}
}
