package mqtt

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"

	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

// TestConnackWriteFailureLeavesNoSession: a client that sends CONNECT
// (clean session) and resets the connection at once, so that its CONNACK
// cannot be written, leaves nothing behind (mochi kept 283 of 300 in its
// client list for ever).
func TestConnackWriteFailureLeavesNoSession(t *testing.T) {
	store := memory.New(retain.Limits{})
	s := startTestServer(t, store)
	str := func(v string) []byte { return append([]byte{byte(len(v) >> 8), byte(len(v))}, v...) }
	const n = 300
	for i := 0; i < n; i++ {
		body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0}
		body = append(body, str(fmt.Sprintf("leak-%d", i))...)
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		pk := binary.AppendUvarint([]byte{0x10}, uint64(len(body)))
		c.Write(append(pk, body...))
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	left := func() int {
		n := 0
		for id := range s.mochi.Clients.GetAll() {
			if len(id) > 5 && id[:5] == "leak-" {
				n++
			}
		}
		return n
	}
	waitUntil(t, "no clean session left of the clients that reset", func() bool { return left() == 0 })
}
