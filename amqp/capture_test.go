package amqp

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tolsey/tolsey/amqp/internal/frames"
)

// TestCaptureReplay replays what real clients sent to a broker (Proton,
// rhea, go-amqp; see /work/shared/amqp-captures) in one pipelined write.
// The gateway must take every frame, answer the close without an error,
// and deliver the messages the capture sends to its own receiver.
func TestCaptureReplay(t *testing.T) {
	for _, tc := range []struct {
		file      string
		transfers int // deliveries the gateway sends back at least
	}{
		{"proton-topic-send-receive.c2s.bin", 1},
		{"rhea-topic-send-receive.c2s.bin", 1},
		// The client sends to the address the recording broker named,
		// not ours: nothing comes back, but every frame is taken.
		{"proton-dynamic-reply.c2s.bin", 0},
		// go-amqp attaches asking snd-settle-mode unsettled (the recording
		// broker answered mixed, and go-amqp detached and hung up).
		{"go-amqp-settled-and-unsettled.c2s.bin", -1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			// The captures are committed beside the codec's tests.
			data, err := os.ReadFile(filepath.Join("internal", "frames", "testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			// Proton sent 300,000-byte frames to a broker that allowed them.
			e := startServer(t, func(o *Options) { o.MaxFrameSize = 1 << 20 })
			c := rawDial(t, e.addr)
			// Hold back the client's close until the deliveries are in:
			// a client that closes gives up what is still on its way.
			closeFrame := []byte{0, 0, 0, 12, 2, 0, 0, 0, 0, 0x53, 0x18, 0x45}
			held := bytes.HasSuffix(data, closeFrame)
			if held {
				data = data[:len(data)-len(closeFrame)]
			}
			c.writeRaw(data)
			if held && tc.transfers <= 0 {
				c.writeRaw(closeFrame)
				held = false
			}
			transfers := 0
			for {
				c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				f, err := c.r.Next()
				if err != nil {
					t.Fatalf("after %d transfers: %v", transfers, err)
				}
				if f.IsProtocolHeader || len(f.Body) == 0 {
					continue
				}
				p, _, err := frames.DecodeBody(f.Body)
				if err != nil {
					t.Fatal(err)
				}
				switch p := p.(type) {
				case *frames.Transfer:
					if p.DeliveryID != nil {
						transfers++
					}
					if held && transfers >= tc.transfers {
						c.writeRaw(closeFrame)
						held = false
					}
				case *frames.End:
					if p.Error != nil {
						t.Fatalf("end %+v", p.Error)
					}
				case *frames.Attach:
					if tc.transfers < 0 && (p.SndSettleMode == nil || *p.SndSettleMode != frames.SenderSettleModeUnsettled) {
						t.Fatalf("attach answer snd-settle-mode %v, want unsettled echoed", p.SndSettleMode)
					}
				case *frames.Detach:
					if p.Error != nil {
						t.Fatalf("detach %+v", p.Error)
					}
					if tc.transfers < 0 {
						return
					}
				case *frames.Close:
					if p.Error != nil {
						t.Fatalf("close %+v", p.Error)
					}
					if transfers < tc.transfers {
						t.Fatalf("%d deliveries, want %d", transfers, tc.transfers)
					}
					return
				}
			}
		})
	}
}
