package packets

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"
)

// userPropsBlock is a properties block (length first) holding n empty user
// properties: 5 bytes each on the wire, a UserProperty (32 bytes) each once
// decoded, the most a packet's bytes can grow by in memory.
func userPropsBlock(n int) []byte {
	props := make([]byte, 0, 5*n)
	for i := 0; i < n; i++ {
		props = append(props, PropUser, 0, 0, 0, 0)
	}
	var b bytes.Buffer
	encodeLength(&b, int64(len(props)))
	b.Write(props)
	return b.Bytes()
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestUserPropertiesAllocatedOnce (gateway patch 42): decoding and copying
// a packet's user properties allocates each slice once, at its size. A
// CONNECT of 1 MiB filled with empty user properties (209,000 of them),
// parsed before its client is authenticated, allocated 66 MiB: the slice
// grew by append in Decode and again in Copy (ParseConnect copies the
// CONNECT's properties), 1.25× at a time, so each made about five times
// its final size.
func TestUserPropertiesAllocatedOnce(t *testing.T) {
	const n = 100_000
	block := userPropsBlock(n)
	final := uint64(n) * uint64(unsafe.Sizeof(UserProperty{}))

	var p Properties
	got := allocated(func() {
		if _, err := p.Decode(Connect, bytes.NewBuffer(block)); err != nil {
			t.Fatal(err)
		}
	})
	if len(p.User) != n {
		t.Fatalf("decoded %d user properties, want %d", len(p.User), n)
	}
	if got > final+final/8 {
		t.Errorf("Decode allocated %d KiB for %d user properties (%d KiB), want about their size", got>>10, n, final>>10)
	}

	var c Properties
	got = allocated(func() { c = p.Copy(false) })
	if len(c.User) != n {
		t.Fatalf("copied %d user properties, want %d", len(c.User), n)
	}
	if got > final+final/8 {
		t.Errorf("Copy allocated %d KiB for %d user properties (%d KiB), want about their size", got>>10, n, final>>10)
	}
}
