package mqtt

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
)

// TestLogsCarryNoPayloadNorLongTopic: what the front-end logs (its own lines
// and mochi's, at debug level) never holds a payload's bytes nor more than
// 128 bytes of a topic. Before the fix, mochi's "error processing packet"
// WARN printed the whole packet, payload included, and the "retained
// message not stored" WARN held the whole 65,000-byte topic.
func TestLogsCarryNoPayloadNorLongTopic(t *testing.T) {
	e := startLimitsServer(t)
	const marker = "PAYLOAD-MARKER-7f3a"
	c := e.dial5(t, "logs")
	_, _ = c.Publish(ctx10(t), &paho.Publish{Topic: "t/" + strings.Repeat("x", 65000), QoS: 1, Retain: true, Payload: []byte(marker)})

	// A QoS 1 PUBLISH without a packet id is a protocol error: mochi logs
	// the packet and closes the connection.
	raw, err := net.Dial("tcp", e.s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	connect := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 30, 0, 3}, "raw"...)
	publish := append(append([]byte{0, 5}, "raw/t"...), 0, 0)
	publish = append(publish, marker...)
	var out []byte
	out = append(binary.AppendUvarint(append(out, 0x10), uint64(len(connect))), connect...)
	out = append(binary.AppendUvarint(append(out, 0x32), uint64(len(publish))), publish...)
	if _, err := raw.Write(out); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, raw) // CONNACK, then the server closes

	var logs string
	deadline := time.Now().Add(10 * time.Second)
	for logs = e.logs.String(); !strings.Contains(logs, "error processing packet"); logs = e.logs.String() {
		if time.Now().After(deadline) {
			t.Fatalf("mochi logged no 'error processing packet':\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	decimal := strings.Trim(fmt.Sprint([]byte(marker)), "[]") // how %+v prints a []byte
	for what, s := range map[string]string{"the payload": marker, "the payload's bytes": decimal,
		"more than 128 bytes of the topic": strings.Repeat("x", logStringMax+1)} {
		if strings.Contains(logs, s) {
			t.Errorf("the log holds %s:\n%s", what, core.Shorten(logs, 4000))
		}
	}
}

// TestRedactHandler: packets, wills, byte slices, long strings and long
// errors are redacted wherever they sit (record, With, groups).
func TestRedactHandler(t *testing.T) {
	var buf coretest.SyncBuffer
	var calls atomic.Int32
	log := newRedactedLogger(slog.New(slog.NewTextHandler(&buf, nil))).With("client", strings.Repeat("c", 300))
	pk := packetWith("PAYLOAD", "a/"+strings.Repeat("t", 500))
	log.WithGroup("g").Warn("x", "pk", pk, "ptr", &pk, "raw", []byte("PAYLOAD"),
		"err", fmt.Errorf("%s", strings.Repeat("e", 2000)), slog.Group("in", "topic", strings.Repeat("t", 500)),
		"lazy", lazy{&calls})
	got := buf.String()
	for _, bad := range []string{"PAYLOAD", strings.Repeat("c", 129), strings.Repeat("t", 129), strings.Repeat("e", 513), "80 65 89"} {
		if strings.Contains(got, bad) {
			t.Errorf("log holds %q:\n%s", core.ShortTopic(bad), got)
		}
	}
	for _, want := range []string{"type=Publish", "id=7", "payload_bytes=7", "(502 bytes)", "bytes=7", "(300 bytes)", "(2000 bytes)", "lazy=resolved"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

type lazy struct{ n *atomic.Int32 }

func (l lazy) LogValue() slog.Value { l.n.Add(1); return slog.StringValue("resolved") }

func packetWith(payload, topic string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 7,
		TopicName: topic, Payload: []byte(payload)}
}
