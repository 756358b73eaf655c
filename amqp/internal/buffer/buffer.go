// Package buffer owns the byte cursor the AMQP wire code reads from and
// writes into. It knows nothing about AMQP: it hands out sub-slices on the
// read side and appends (with back-patching of sizes) on the write side.
//
// A Buffer is not safe for concurrent use; a connection's reader goroutine
// and writer goroutine each own their own Buffer.
package buffer

import (
	"encoding/binary"
	"errors"
)

// ErrShort is returned when a read asks for more bytes than remain.
var ErrShort = errors.New("buffer: not enough bytes")

// Buffer is a byte slice with a read cursor. Reads consume from the cursor;
// writes append at the end. The zero value is an empty buffer ready for
// writing.
type Buffer struct {
	b []byte
	i int // read cursor: b[i:] is unread
}

// New returns a Buffer reading from b. The Buffer does not copy b: slices it
// hands out alias b and stay valid only as long as the caller keeps b intact.
func New(b []byte) *Buffer { return &Buffer{b: b} }

// ResetBytes makes the buffer read from b, discarding its previous contents.
func (b *Buffer) ResetBytes(p []byte) { b.b, b.i = p, 0 }

// Reset empties the buffer but keeps its storage for later writes.
func (b *Buffer) Reset() { b.b, b.i = b.b[:0], 0 }

// Len is the number of unread bytes.
func (b *Buffer) Len() int { return len(b.b) - b.i }

// Offset is the number of bytes read so far.
func (b *Buffer) Offset() int { return b.i }

// Bytes returns the unread bytes (aliasing the buffer).
func (b *Buffer) Bytes() []byte { return b.b[b.i:] }

// Next returns the next n bytes as a sub-slice of the buffer, without
// copying, and advances past them. A negative n or one larger than what
// remains fails and leaves the cursor where it was.
func (b *Buffer) Next(n int) ([]byte, error) {
	if n < 0 || n > len(b.b)-b.i {
		return nil, ErrShort
	}
	p := b.b[b.i : b.i+n : b.i+n]
	b.i += n
	return p, nil
}

// Skip advances the cursor by n bytes.
func (b *Buffer) Skip(n int) error {
	_, err := b.Next(n)
	return err
}

// Unread moves the cursor back by n bytes (n must not exceed Offset).
func (b *Buffer) Unread(n int) { b.i -= n }

// PeekByte returns the next byte without consuming it.
func (b *Buffer) PeekByte() (byte, error) {
	if b.i >= len(b.b) {
		return 0, ErrShort
	}
	return b.b[b.i], nil
}

// ReadByte consumes one byte.
func (b *Buffer) ReadByte() (byte, error) {
	if b.i >= len(b.b) {
		return 0, ErrShort
	}
	c := b.b[b.i]
	b.i++
	return c, nil
}

// ReadUint16 consumes a big-endian uint16.
func (b *Buffer) ReadUint16() (uint16, error) {
	if len(b.b)-b.i < 2 {
		return 0, ErrShort
	}
	v := binary.BigEndian.Uint16(b.b[b.i:])
	b.i += 2
	return v, nil
}

// ReadUint32 consumes a big-endian uint32.
func (b *Buffer) ReadUint32() (uint32, error) {
	if len(b.b)-b.i < 4 {
		return 0, ErrShort
	}
	v := binary.BigEndian.Uint32(b.b[b.i:])
	b.i += 4
	return v, nil
}

// ReadUint64 consumes a big-endian uint64.
func (b *Buffer) ReadUint64() (uint64, error) {
	if len(b.b)-b.i < 8 {
		return 0, ErrShort
	}
	v := binary.BigEndian.Uint64(b.b[b.i:])
	b.i += 8
	return v, nil
}

// Written returns everything written into the buffer, read or not.
func (b *Buffer) Written() []byte { return b.b }

// Size is the total number of bytes written (the write offset).
func (b *Buffer) Size() int { return len(b.b) }

// Truncate drops everything written after offset n.
func (b *Buffer) Truncate(n int) { b.b = b.b[:n] }

// Append appends p.
func (b *Buffer) Append(p []byte) { b.b = append(b.b, p...) }

// AppendString appends s.
func (b *Buffer) AppendString(s string) { b.b = append(b.b, s...) }

// AppendByte appends c.
func (b *Buffer) AppendByte(c byte) { b.b = append(b.b, c) }

// AppendUint16 appends v big-endian.
func (b *Buffer) AppendUint16(v uint16) { b.b = binary.BigEndian.AppendUint16(b.b, v) }

// AppendUint32 appends v big-endian.
func (b *Buffer) AppendUint32(v uint32) { b.b = binary.BigEndian.AppendUint32(b.b, v) }

// AppendUint64 appends v big-endian.
func (b *Buffer) AppendUint64(v uint64) { b.b = binary.BigEndian.AppendUint64(b.b, v) }

// PutByteAt overwrites the byte at write offset off (back-patching).
func (b *Buffer) PutByteAt(off int, c byte) { b.b[off] = c }

// PutUint32At overwrites four bytes at write offset off with v big-endian
// (back-patching a size written as a placeholder).
func (b *Buffer) PutUint32At(off int, v uint32) { binary.BigEndian.PutUint32(b.b[off:], v) }

// InsertGap opens n zero bytes at write offset off, shifting what follows
// to the right. Used when a size placeholder turns out too narrow.
func (b *Buffer) InsertGap(off, n int) {
	l := len(b.b)
	b.b = append(b.b, make([]byte, n)...)
	copy(b.b[off+n:], b.b[off:l])
	clear(b.b[off : off+n])
}
