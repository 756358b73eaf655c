// Package codec is the binary encoding of a stored core.Message, shared by
// every store that writes messages out of memory: the retained store's
// embedded and Redis backends and the queue backends (core/queue/embedded,
// core/queue/redis). It sits in core, beside the Message it encodes, so that
// both retain/ and core/queue may import it (the core imports nothing of
// ours). It owns the byte layout only: no storage, no I/O. Every length read is bounded by the bytes that remain before
// anything is allocated, so a corrupt file or a hostile Redis value cannot make
// a decoder allocate more than the value's own size.
//
// Layout, version 1 (uvarint/varint are encoding/binary's):
//
//	version   byte (= 1)
//	flags     byte: 1 retain, 2 created set, 4 expiry set,
//	          8 correlation data present (nil and empty differ),
//	          16 user properties present (nil and empty differ),
//	          32|64 correlation kind (core.IDKind, 2 bits; 0 = binary, so
//	          data written before the kind existed reads unchanged),
//	          128 native encoding present (core.Native)
//	qos       byte
//	format    byte (MQTT 5 payload format indicator)
//	expiry    varint unix seconds, uvarint nanoseconds   (if flag 4)
//	created   varint unix seconds, uvarint nanoseconds   (if flag 2)
//	topic, payload, content type, correlation data, response topic:
//	          each uvarint length + bytes
//	user properties: uvarint count, then key and value as above
//	origin protocol, node, client: each uvarint length + bytes
//	native protocol, native bytes: each uvarint length + bytes (if flag 128;
//	          last, so that data written before it existed reads unchanged)
//
// Version 2 (written only by AppendCompact) is version 1 but for the
// payload field, which holds the payload's length alone (uvarint): the
// payload is the last that many bytes of the native bytes, which must be
// present. A message received over AMQP with one data section and no
// footer is stored that way with its payload once, not twice (its native
// bytes end with it): half the bytes a queue writes and fsyncs.
//
// Expiry comes first so that Meta can answer "when does it expire and how big
// is it" without allocating, which is all the in-memory indexes keep.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tolsey/tolsey/core"
)

// Version is the layout version written as the first byte.
const Version = 1

// versionTail is version 2: the payload is the native bytes' tail.
const versionTail = 2

const (
	flagRetain      = 1 << 0
	flagCreated     = 1 << 1
	flagExpiry      = 1 << 2
	flagCorrelation = 1 << 3
	flagProps       = 1 << 4
	kindShift       = 5
	flagKind        = 3 << kindShift
	flagNative      = 1 << 7
	flagsKnown      = flagRetain | flagCreated | flagExpiry | flagCorrelation | flagProps | flagKind | flagNative
)

// Decoding errors.
var (
	ErrVersion   = errors.New("codec: unknown version")
	ErrTruncated = errors.New("codec: truncated")
	ErrCorrupt   = errors.New("codec: corrupt")
)

// Append appends the encoding of m to dst and returns the extended slice.
func Append(dst []byte, m *core.Message) []byte { return appendVersion(dst, m, false) }

// AppendCompact is Append, but writes version 2 when m's payload is the
// tail of its native bytes. For stores whose readers are this package's
// Decode (the queue backends), not for what another gateway of an older
// version may read (the cluster's wire).
func AppendCompact(dst []byte, m *core.Message) []byte {
	return appendVersion(dst, m, m.PayloadIsNativeTail())
}

// EncodeCompact returns the AppendCompact encoding of m in a new slice,
// of the size it needs (the hint counts the payload twice otherwise).
func EncodeCompact(m *core.Message) []byte {
	tail := m.PayloadIsNativeTail()
	hint := EncodedSizeHint(m)
	if tail {
		hint -= len(m.Payload)
	}
	return appendVersion(make([]byte, 0, hint), m, tail)
}

func appendVersion(dst []byte, m *core.Message, tail bool) []byte {
	var flags byte
	if m.Retain {
		flags |= flagRetain
	}
	if !m.Created.IsZero() {
		flags |= flagCreated
	}
	if !m.Expiry.IsZero() {
		flags |= flagExpiry
	}
	if m.CorrelationData != nil {
		flags |= flagCorrelation
	}
	if m.UserProperties != nil {
		flags |= flagProps
	}
	flags |= byte(m.CorrelationKind&3) << kindShift
	if m.Native.Protocol != "" {
		flags |= flagNative
	}
	version := byte(Version)
	if tail {
		version = versionTail
	}
	dst = append(dst, version, flags, m.QoS, m.PayloadFormat)
	if !m.Expiry.IsZero() {
		dst = appendTime(dst, m.Expiry)
	}
	if !m.Created.IsZero() {
		dst = appendTime(dst, m.Created)
	}
	dst = appendString(dst, m.Topic)
	if tail {
		dst = binary.AppendUvarint(dst, uint64(len(m.Payload)))
	} else {
		dst = appendBytes(dst, m.Payload)
	}
	dst = appendString(dst, m.ContentType)
	dst = appendBytes(dst, m.CorrelationData)
	dst = appendString(dst, m.ResponseTopic)
	dst = binary.AppendUvarint(dst, uint64(len(m.UserProperties)))
	for _, p := range m.UserProperties {
		dst = appendString(dst, p.Key)
		dst = appendString(dst, p.Value)
	}
	dst = appendString(dst, string(m.Origin.Protocol))
	dst = appendString(dst, m.Origin.Node)
	dst = appendString(dst, m.Origin.Client)
	if m.Native.Protocol != "" {
		dst = appendString(dst, string(m.Native.Protocol))
		dst = appendBytes(dst, m.Native.Bytes)
	}
	return dst
}

// Encode returns the encoding of m in a new slice.
func Encode(m *core.Message) []byte {
	return Append(make([]byte, 0, EncodedSizeHint(m)), m)
}

// EncodedSizeHint is an upper bound of the encoded size of m.
func EncodedSizeHint(m *core.Message) int {
	n := 4 + 2*(binary.MaxVarintLen64+5) + m.Size() + len(m.Native.Protocol) + (11+2*len(m.UserProperties))*binary.MaxVarintLen32
	if m.PayloadIsNativeTail() {
		n += len(m.Payload) // counted once by Size, written twice by version 1
	}
	return n
}

func appendTime(dst []byte, t time.Time) []byte {
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// ExpiryNanos is t as unix nanoseconds for the indexes: 0 when t is zero
// (never expires), saturated at the int64 range, and never 0 otherwise.
func ExpiryNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return unixNanos(t.Unix(), int64(t.Nanosecond()))
}

func unixNanos(sec, nsec int64) int64 {
	const maxSec = math.MaxInt64/1_000_000_000 - 1
	switch {
	case sec > maxSec:
		return math.MaxInt64
	case sec < -maxSec:
		return math.MinInt64
	}
	n := sec*1e9 + nsec
	if n == 0 {
		n = 1 // 0 means "never"; the epoch itself is long past anyway
	}
	return n
}

// sameBytes reports whether b's n bytes at i and at k are the same,
// without converting b (which would allocate for a []byte).
func sameBytes[T bytesLike](b T, i, k, n int) bool {
	for x := range n {
		if b[i+x] != b[k+x] {
			return false
		}
	}
	return true
}

// bytesLike lets one decoder read both []byte (bbolt values, copied out) and
// string (Redis replies, whose substrings can be kept without copying).
type bytesLike interface{ ~string | ~[]byte }

type reader[T bytesLike] struct {
	b   T
	off int
	err error
}

func (r *reader[T]) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.err = ErrTruncated
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// uvarint reads an unsigned varint without allocating (binary.Uvarint takes a
// []byte; converting a string would copy it).
func (r *reader[T]) uvarint() uint64 {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				r.err = ErrCorrupt // overflows 64 bits
				return 0
			}
			return x | uint64(c)<<s
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	r.err = ErrCorrupt
	return 0
}

func (r *reader[T]) varint() int64 {
	ux := r.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// span reads a length prefix and returns the bounds of the bytes it covers.
// The length is checked against what remains before any caller allocates:
// a forged length cannot make us allocate gigabytes for a 10-byte value.
func (r *reader[T]) span(limit int) (int, int) {
	n := r.uvarint()
	if r.err != nil {
		return 0, 0
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = ErrTruncated
		return 0, 0
	}
	if n > uint64(limit) {
		r.err = ErrCorrupt
		return 0, 0
	}
	i := r.off
	r.off += int(n)
	return i, r.off
}

func (r *reader[T]) string(limit int) string {
	i, j := r.span(limit)
	if i == j {
		return ""
	}
	return string(r.b[i:j]) // a substring (no copy) when T is string
}

// bytes copies: a payload handed out must not alias the caller's buffer.
func (r *reader[T]) bytes() []byte {
	i, j := r.span(math.MaxInt)
	if r.err != nil {
		return nil
	}
	return append(make([]byte, 0, j-i), r.b[i:j]...)
}

func (r *reader[T]) time() time.Time {
	sec := r.varint()
	nsec := r.uvarint()
	if r.err == nil && nsec >= 1e9 {
		r.err = ErrCorrupt
	}
	if r.err != nil {
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec))
}

func (r *reader[T]) skipTime() int64 {
	sec := r.varint()
	nsec := r.uvarint()
	if r.err == nil && nsec >= 1e9 {
		r.err = ErrCorrupt
	}
	return unixNanos(sec, int64(nsec))
}

// header reads the version and the flags; tail is version 2's.
func (r *reader[T]) header() (flags byte, tail bool) {
	v := r.byte()
	if r.err == nil && v != Version && v != versionTail {
		r.err = fmt.Errorf("%w %d", ErrVersion, v)
	}
	flags = r.byte()
	if r.err == nil && flags&^flagsKnown != 0 {
		r.err = ErrCorrupt
	}
	if r.err == nil && v == versionTail && flags&flagNative == 0 {
		r.err = ErrCorrupt // a tail of nothing
	}
	return flags, v == versionTail
}

// tailLength reads version 2's payload length, bounded by what remains
// (the native bytes come later and must hold it: checked by the caller).
func (r *reader[T]) tailLength() int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)-r.off) {
		r.err = ErrTruncated
	}
	if r.err != nil {
		return 0
	}
	return int(n)
}

// Decode decodes a message. Nothing of the result aliases b, which may be
// reused (a bbolt value is valid only inside its transaction): b is copied
// once into a string that all the message's strings share, and the byte
// slices are copies of their own.
func Decode(b []byte) (*core.Message, error) { return decode(string(b)) }

// DecodeString decodes a message from a string (a Redis reply). Strings of
// the result share s's memory, which is immutable; byte slices are copies.
func DecodeString(s string) (*core.Message, error) { return decode(s) }

func decode[T bytesLike](b T) (*core.Message, error) {
	r := reader[T]{b: b}
	flags, tail := r.header()
	m := &core.Message{Retain: flags&flagRetain != 0, CorrelationKind: core.IDKind(flags&flagKind) >> kindShift}
	m.QoS = r.byte()
	m.PayloadFormat = r.byte()
	if flags&flagExpiry != 0 {
		m.Expiry = r.time()
	}
	if flags&flagCreated != 0 {
		m.Created = r.time()
	}
	m.Topic = r.string(core.MaxTopicLength)
	tailLen := 0
	if tail {
		tailLen = r.tailLength()
	} else {
		m.Payload = r.bytes()
	}
	m.ContentType = r.string(math.MaxInt)
	if cd := r.bytes(); flags&flagCorrelation != 0 {
		m.CorrelationData = cd
	} else if len(cd) != 0 {
		r.err = ErrCorrupt // data without its presence flag: not ours
	}
	m.ResponseTopic = r.string(math.MaxInt)
	n := r.uvarint()
	// Each property takes at least two bytes (two zero lengths): a count
	// beyond that is a lie meant to make us allocate a huge slice.
	if r.err == nil && (n > uint64(len(b)-r.off)/2 || n > 0 && flags&flagProps == 0) {
		r.err = ErrCorrupt
	}
	if r.err == nil && (n > 0 || flags&flagProps != 0) {
		m.UserProperties = make([]core.UserProperty, 0, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			k := r.string(math.MaxInt)
			v := r.string(math.MaxInt)
			m.UserProperties = append(m.UserProperties, core.UserProperty{Key: k, Value: v})
		}
	}
	m.Origin.Protocol = core.Protocol(r.string(math.MaxInt))
	m.Origin.Node = r.string(math.MaxInt)
	m.Origin.Client = r.string(math.MaxInt)
	if flags&flagNative != 0 {
		m.Native.Protocol = core.Protocol(r.string(math.MaxInt))
		m.Native.Bytes = r.bytes()
		if m.Native.Protocol == "" && r.err == nil {
			r.err = ErrCorrupt // the encoder writes a native encoding with its protocol only
		}
	}
	if tail && r.err == nil {
		n := m.Native.Bytes
		if tailLen > len(n) {
			r.err = ErrCorrupt
		} else {
			// Shares the native bytes, as a received message's does.
			m.Payload = n[len(n)-tailLen : len(n) : len(n)]
		}
	}
	if r.err == nil && r.off != len(b) {
		r.err = ErrCorrupt // trailing bytes
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// Meta is what the in-memory indexes keep about a stored message.
type Meta struct {
	Expiry int64 // unix nanoseconds; 0 never expires
	Size   int32 // core.Message.Size() of the message
}

// Expired reports whether the message is past its expiry at now (unix ns).
func (m Meta) Expired(now int64) bool { return m.Expiry != 0 && now >= m.Expiry }

// MetaOf is the Meta of m.
func MetaOf(m *core.Message) Meta {
	return Meta{Expiry: ExpiryNanos(m.Expiry), Size: int32(min(m.Size(), math.MaxInt32))}
}

// ReadMeta reads the expiry and size of an encoded message without
// allocating, validating the layout as Decode would.
func ReadMeta(b []byte) (Meta, error) { return readMeta(b) }

// ReadMetaString is ReadMeta for a string.
func ReadMetaString(s string) (Meta, error) { return readMeta(s) }

func readMeta[T bytesLike](b T) (Meta, error) {
	r := reader[T]{b: b}
	flags, tail := r.header()
	r.byte() // qos
	r.byte() // payload format
	var m Meta
	if flags&flagExpiry != 0 {
		m.Expiry = r.skipTime()
	}
	if flags&flagCreated != 0 {
		r.skipTime()
	}
	size := 0
	add := func(limit int) {
		i, j := r.span(limit)
		size += j - i
	}
	add(core.MaxTopicLength) // topic
	tailLen := 0
	var pi, pj int // the payload's span (version 1)
	if tail {
		tailLen = r.tailLength() // counted once, in the native bytes
	} else {
		pi, pj = r.span(math.MaxInt)
		size += pj - pi
	}
	add(math.MaxInt) // content type
	if i, j := r.span(math.MaxInt); j > i && flags&flagCorrelation == 0 {
		r.err = ErrCorrupt
	} else {
		size += j - i
	}
	add(math.MaxInt) // response topic
	n := r.uvarint()
	if r.err == nil && (n > uint64(len(b)-r.off)/2 || n > 0 && flags&flagProps == 0) {
		r.err = ErrCorrupt
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		add(math.MaxInt)
		add(math.MaxInt)
	}
	for range 3 { // origin
		r.span(math.MaxInt)
	}
	if flags&flagNative != 0 {
		if i, j := r.span(math.MaxInt); j == i && r.err == nil { // native protocol
			r.err = ErrCorrupt // none: as Decode
		}
		i, j := r.span(math.MaxInt)
		size += j - i // native bytes (Message.Size counts them)
		if tail && r.err == nil && tailLen > j-i {
			r.err = ErrCorrupt
		}
		// A payload that ends the native bytes is counted once, as
		// Message.Size does.
		if n := pj - pi; !tail && r.err == nil && n > 0 && n <= j-i && sameBytes(b, pi, j-n, n) {
			size -= n
		}
	}
	if r.err == nil && r.off != len(b) {
		r.err = ErrCorrupt
	}
	if r.err != nil {
		return Meta{}, r.err
	}
	m.Size = int32(min(size, math.MaxInt32))
	return m, nil
}
