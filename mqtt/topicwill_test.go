package mqtt

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestWillOnTopicLimitClose: a client the gateway closes for a publish over
// the topic limits (MQTT 3.1.1; MQTT 5 at QoS 0) ended without a
// DISCONNECT of its own, so its will is published [MQTT-3.1.2-8] (mochi's
// reader returned no error once the client was stopped, and the will was
// cleared).
func TestWillOnTopicLimitClose(t *testing.T) {
	store := memory.New(retain.Limits{})
	s := startTestServer(t, store)
	obs := dialTest(t, s.Addr(), "obs", nil)
	obs.subscribe(t, "will/#")
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	for _, v := range []byte{4, 5} {
		id := "v" + string('0'+v)
		body := []byte{0, 4, 'M', 'Q', 'T', 'T', v, 0x02 | 0x04, 0, 0}
		if v == 5 {
			body = append(body, 0)
		}
		body = append(body, str(id)...)
		if v == 5 {
			body = append(body, 0)
		}
		body = append(body, str("will/"+id)...)
		body = append(body, str("dead")...)
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(append(binary.AppendUvarint([]byte{0x10}, uint64(len(body))), body...))
		ack := make([]byte, 2)
		io.ReadFull(c, ack)
		rest := make([]byte, ack[1])
		io.ReadFull(c, rest)
		topic := strings.Repeat("a/", 200) + "a"
		pb := str(topic)
		if v == 5 {
			pb = append(pb, 0)
		}
		pb = append(pb, 'x')
		c.Write(append(binary.AppendUvarint([]byte{0x30}, uint64(len(pb))), pb...))
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = io.ReadAll(c)
		t.Logf("MQTT %d: connection ended (%v)", v, err)
		select {
		case m := <-obs.msgs:
			t.Logf("MQTT %d: will published: %s", v, m.Topic)
		case <-time.After(2 * time.Second):
			t.Errorf("MQTT %d: no will published after the gateway closed the connection", v)
		}
		c.Close()
	}
}
