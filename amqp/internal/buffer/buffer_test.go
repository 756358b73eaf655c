package buffer

import (
	"bytes"
	"testing"
)

func TestReadSide(t *testing.T) {
	in := []byte{1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 9, 9}
	b := New(in)
	if c, _ := b.PeekByte(); c != 1 {
		t.Fatal("PeekByte")
	}
	if c, err := b.ReadByte(); c != 1 || err != nil {
		t.Fatal("ReadByte")
	}
	if v, err := b.ReadUint16(); v != 2 || err != nil {
		t.Fatal("ReadUint16")
	}
	if v, err := b.ReadUint32(); v != 3 || err != nil {
		t.Fatal("ReadUint32")
	}
	if v, err := b.ReadUint64(); v != 4 || err != nil {
		t.Fatal("ReadUint64")
	}
	p, err := b.Next(2)
	if err != nil || !bytes.Equal(p, []byte{9, 9}) || &p[0] != &in[15] {
		t.Fatal("Next must hand out a sub-slice of the input")
	}
	if cap(p) != 2 {
		t.Fatal("Next must cap the sub-slice so appends can't clobber the input")
	}
	if _, err := b.Next(1); err != ErrShort {
		t.Fatal("Next past the end")
	}
	if _, err := b.Next(-1); err != ErrShort {
		t.Fatal("Next(-1)")
	}
	if _, err := b.ReadUint64(); err != ErrShort {
		t.Fatal("ReadUint64 past the end")
	}
	b.Unread(2)
	if b.Len() != 2 || b.Offset() != 15 {
		t.Fatal("Unread")
	}
}

func TestWriteSideBackPatch(t *testing.T) {
	var b Buffer
	b.AppendByte(0xaa)
	b.AppendUint32(0) // placeholder
	b.AppendString("xy")
	b.PutUint32At(1, uint32(b.Size()))
	b.InsertGap(1, 2)
	b.PutByteAt(1, 0xbb)
	want := []byte{0xaa, 0xbb, 0, 0, 0, 0, 7, 'x', 'y'}
	if !bytes.Equal(b.Written(), want) {
		t.Fatalf("got %x want %x", b.Written(), want)
	}
	b.Truncate(1)
	b.AppendUint16(0x0102)
	b.AppendUint64(3)
	b.Append([]byte{4})
	if !bytes.Equal(b.Written(), []byte{0xaa, 1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 4}) {
		t.Fatalf("got %x", b.Written())
	}
	b.Reset()
	if b.Size() != 0 || b.Len() != 0 {
		t.Fatal("Reset")
	}
}
