package catalog

import (
	"fmt"
	"testing"

	"github.com/tolsey/tolsey/core/codec"
)

func newMeta() *Catalog[codec.Meta] { return New(func(m codec.Meta) codec.Meta { return m }) }

func TestBytesFollowReplaceAndRemove(t *testing.T) {
	c := newMeta()
	c.Put("a", codec.Meta{Size: 10})
	c.Put("a", codec.Meta{Size: 3})
	c.Put("b", codec.Meta{Size: 5})
	if c.Bytes() != 8 || c.Len() != 2 {
		t.Fatalf("bytes %d len %d", c.Bytes(), c.Len())
	}
	c.Remove("a")
	c.Remove("a")
	if c.Bytes() != 5 || c.Len() != 1 {
		t.Fatalf("bytes %d len %d", c.Bytes(), c.Len())
	}
}

func TestExpireSkipsReplaced(t *testing.T) {
	c := newMeta()
	c.Put("a", codec.Meta{Expiry: 10, Size: 1})
	c.Put("a", codec.Meta{Expiry: 100, Size: 1}) // replaced: the entry at 10 is stale
	c.Put("b", codec.Meta{Expiry: 20, Size: 1})
	if got := c.Expire(50, 100); len(got) != 1 || got[0] != "b" {
		t.Fatalf("Expire(50) = %v, want [b]", got)
	}
	if c.NextExpiry() != 100 {
		t.Fatalf("next %d", c.NextExpiry())
	}
	if got := c.Expire(100, 100); len(got) != 1 || got[0] != "a" || c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("Expire(100) = %v, len %d", got, c.Len())
	}
}

func TestHeapStaysBounded(t *testing.T) {
	c := newMeta()
	for i := range 100_000 {
		c.Put("hot", codec.Meta{Expiry: int64(1_000_000 + i), Size: 1})
	}
	if n := len(c.exp); n > 2*c.Len()+1024 {
		t.Fatalf("heap holds %d entries for 1 topic", n)
	}
}

func TestReserve(t *testing.T) {
	c := newMeta()
	c.Put("a", codec.Meta{})
	r1, ok := c.Reserve("b", 2)
	if !ok {
		t.Fatal("b refused under the limit")
	}
	r2, ok := c.Reserve("b", 2) // the same new topic shares the reservation
	if !ok {
		t.Fatal("second b refused")
	}
	if _, ok := c.Reserve("c", 2); ok {
		t.Fatal("c admitted over the limit")
	}
	if _, ok := c.Reserve("a", 2); !ok {
		t.Fatal("replacing a refused")
	}
	r1()
	r1() // idempotent
	if _, ok := c.Reserve("c", 2); ok {
		t.Fatal("c admitted while b still reserved")
	}
	r2()
	if _, ok := c.Reserve("c", 2); !ok {
		t.Fatal("c refused after b released")
	}
}

func BenchmarkPut(b *testing.B) {
	c := newMeta()
	topics := make([]string, 1<<16)
	for i := range topics {
		topics[i] = fmt.Sprintf("bench/%d/%d", i/100, i%100)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Put(topics[i&(len(topics)-1)], codec.Meta{Size: 64})
		i++
	}
}
