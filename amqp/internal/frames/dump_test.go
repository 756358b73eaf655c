package frames

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gatewayd/gateway/amqp/internal/buffer"
)

func TestDump(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.bin")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		r := NewReader(bytes.NewReader(data), 1<<20)
		fmt.Println("==", f)
		for {
			fr, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if fr.IsProtocolHeader {
				fmt.Printf("  header %+v\n", fr.Protocol)
				continue
			}
			p, payload, err := DecodeBody(fr.Body)
			if err != nil {
				t.Fatalf("%x: %v", fr.Body, err)
			}
			var w buffer.Buffer
			AppendFrame(&w, fr.Header.Type, fr.Header.Channel, p, payload)
			same := bytes.Equal(w.Written()[8:], fr.Body)
			if len(payload) > 100 {
				payload = payload[:100]
			}
			fmt.Printf("  ch%d %T %+v same=%v payload=%x\n", fr.Header.Channel, p, p, same, payload)
			if !same {
				fmt.Printf("    orig %x\n    ours %x\n", fr.Body[:min(len(fr.Body), 120)], w.Written()[8:min(w.Size(), 128)])
			}
		}
	}
}
