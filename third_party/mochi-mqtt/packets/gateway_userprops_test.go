package packets

import (
	"bytes"
	"errors"
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

// TestUserPropertiesLimit (gateway patch 44): with SetMaxUserProperties, a
// properties block over the limit fails Decode with
// ErrTooManyUserProperties before its user properties are allocated, also
// when the block cannot be walked ahead (an unknown property after them)
// or adds to user properties the packet holds already; at the limit it
// decodes.
func TestUserPropertiesLimit(t *testing.T) {
	SetMaxUserProperties(16)
	t.Cleanup(func() { SetMaxUserProperties(0) })

	var p Properties
	if _, err := p.Decode(Publish, bytes.NewBuffer(userPropsBlock(16))); err != nil || len(p.User) != 16 {
		t.Fatalf("16 user properties at a limit of 16: %v, %d decoded", err, len(p.User))
	}

	var q Properties
	var err error
	big := bytes.NewBuffer(userPropsBlock(100_000))
	got := allocated(func() { _, err = q.Decode(Publish, big) })
	if !errors.Is(err, ErrTooManyUserProperties) {
		t.Fatalf("100,000 user properties at a limit of 16: %v, want %v", err, ErrTooManyUserProperties)
	}
	if got > 64<<10 {
		t.Errorf("refusing 100,000 user properties allocated %d KiB, want next to nothing", got>>10)
	}

	// Not walkable ahead: an unknown property (0x7f) after the user
	// properties makes countUserProperties count 0.
	block := userPropsBlock(100)[2:] // the properties without their length (2 bytes for 500)
	props := append(append([]byte{}, block...), 0x7f)
	var b bytes.Buffer
	encodeLength(&b, int64(len(props)))
	b.Write(props)
	var r Properties
	if _, err := r.Decode(Publish, &b); !errors.Is(err, ErrTooManyUserProperties) || len(r.User) > 16 {
		t.Fatalf("100 user properties then an unknown property: %v, %d decoded, want %v at 16", err, len(r.User), ErrTooManyUserProperties)
	}

	// Added to what the packet holds: 10 held, 10 more.
	s := Properties{User: make([]UserProperty, 10)}
	if _, err := s.Decode(Publish, bytes.NewBuffer(userPropsBlock(10))); !errors.Is(err, ErrTooManyUserProperties) {
		t.Fatalf("10 more user properties on 10 held at a limit of 16: %v, want %v", err, ErrTooManyUserProperties)
	}
}
