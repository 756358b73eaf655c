package frames

import (
	"errors"
	"fmt"
	"io"

	"github.com/tolsey/tolsey/amqp/internal/buffer"
)

// ErrFrameTooLarge is returned when a frame header announces more bytes
// than the reader's MaxFrameSize.
var ErrFrameTooLarge = errors.New("amqp frames: frame exceeds max-frame-size")

// Frame is one unit read off the stream: either a protocol header
// (IsProtocolHeader) or a frame.
type Frame struct {
	IsProtocolHeader bool
	Protocol         ProtocolHeader // when IsProtocolHeader
	Header           Header         // otherwise
	// Body is the frame body after any extended header, aliasing the
	// reader's buffer: valid until the next call to Next or ReadFrame.
	Body []byte
}

// Reader splits a byte stream into protocol headers and frames. It reads
// ahead: bytes a pipelining client sent past the current frame (Proton and
// go-amqp send the SASL header, sasl-init and the AMQP header without
// waiting) stay buffered for the next call.
//
// A Reader is owned by the connection's reader goroutine.
type Reader struct {
	r   io.Reader
	buf []byte // buf[start:end] is read but unconsumed
	// start and end index buf.
	start, end int
	// MaxFrameSize bounds the frames accepted; the connection raises it
	// from MinMaxFrameSize to our advertised max-frame-size once open is
	// sent. The size field of a frame header is checked against it before
	// the body is read or buffer space allocated, so a peer announcing a
	// 4 GiB frame costs us nothing.
	MaxFrameSize uint32
	// headerOK: a protocol header may come next (at the start of the
	// stream, and after SASL frames, when the client restarts with the
	// AMQP header).
	headerOK bool
	// full: the last read filled the buffer, so the peer had more waiting
	// (a busy sender): the next compaction doubles the buffer, up to
	// maxReadAhead, and a read syscall then brings many frames instead of
	// three of 1 KiB. A quiet connection keeps the first 4 KiB.
	full bool
}

// maxReadAhead bounds the growth of the buffer for busy peers; a frame
// larger than it still gets a buffer of its size.
const maxReadAhead = 32 << 10

// NewReader returns a Reader on r accepting frames up to maxFrameSize.
func NewReader(r io.Reader, maxFrameSize uint32) *Reader {
	return &Reader{r: r, MaxFrameSize: maxFrameSize, headerOK: true}
}

// fill makes at least n unconsumed bytes available. n is at most
// MaxFrameSize (or 8), which bounds the buffer.
func (r *Reader) fill(n int) error {
	if r.end-r.start >= n {
		return nil
	}
	if len(r.buf)-r.start < n {
		// Not enough room after start: compact, growing if needed.
		if len(r.buf) < n || r.full && len(r.buf) < maxReadAhead {
			nb := make([]byte, max(n, min(2*len(r.buf), maxReadAhead), 4096))
			copy(nb, r.buf[r.start:r.end])
			r.buf = nb
		} else {
			copy(r.buf, r.buf[r.start:r.end])
		}
		r.end -= r.start
		r.start = 0
	}
	for r.end-r.start < n {
		m, err := r.r.Read(r.buf[r.end:])
		r.end += m
		r.full = r.end == len(r.buf)
		if err != nil {
			if r.end-r.start >= n {
				return nil
			}
			if err == io.EOF && r.end-r.start > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// ReadProtocolHeader reads an 8-byte protocol header. A header we don't
// speak returns a *ProtocolHeaderError.
func (r *Reader) ReadProtocolHeader() (ProtocolHeader, error) {
	if err := r.fill(8); err != nil {
		return ProtocolHeader{}, err
	}
	b := r.buf[r.start : r.start+8]
	r.start += 8
	r.headerOK = false
	return ParseProtocolHeader(b)
}

// Buffered hands over the bytes read past what was consumed and forgets
// them: a client that pipelined its TLS ClientHello behind the TLS header
// [5.2.1] sent them, and the TLS layer must read them first. The slice
// aliases the buffer; the Reader must not be used afterwards.
func (r *Reader) Buffered() []byte {
	b := r.buf[r.start:r.end]
	r.start = r.end
	return b
}

// ReadFrame reads one frame.
func (r *Reader) ReadFrame() (Frame, error) {
	if err := r.fill(HeaderSize); err != nil {
		return Frame{}, err
	}
	h, err := ParseHeader(r.buf[r.start : r.start+HeaderSize])
	if h.Size > r.MaxFrameSize {
		return Frame{}, fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, h.Size, r.MaxFrameSize)
	}
	if err != nil {
		return Frame{}, err
	}
	if err := r.fill(int(h.Size)); err != nil {
		return Frame{}, err
	}
	f := Frame{Header: h, Body: r.buf[r.start+4*int(h.DataOffset) : r.start+int(h.Size) : r.start+int(h.Size)]}
	r.start += int(h.Size)
	r.headerOK = h.Type == TypeSASL
	return f, nil
}

// FrameBuffered reports whether a whole frame is already buffered, so that
// the next ReadFrame returns without reading the stream. The connection
// layer uses it to batch its answers (dispositions, flows) to a burst of
// pipelined frames and send them just before it would block.
func (r *Reader) FrameBuffered() bool {
	n := r.end - r.start
	if n < HeaderSize {
		return false
	}
	b := r.buf[r.start:]
	size := int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])
	return size <= n
}

// Next reads whatever comes next: a protocol header where one may appear
// (at the start of the stream, and after SASL frames) and the bytes are
// "AMQP", otherwise a frame. Where a frame is expected, "AMQP" is read as a
// frame size of 0x414d5150 and fails the MaxFrameSize check.
func (r *Reader) Next() (Frame, error) {
	if r.headerOK {
		if err := r.fill(4); err != nil {
			return Frame{}, err
		}
		if string(r.buf[r.start:r.start+4]) == "AMQP" {
			ph, err := r.ReadProtocolHeader()
			return Frame{IsProtocolHeader: true, Protocol: ph}, err
		}
	}
	return r.ReadFrame()
}

// Writer writes frames to a stream through one reused buffer, so that
// writing allocates nothing in the steady state. It is owned by the
// connection's writer goroutine.
type Writer struct {
	w   io.Writer
	buf buffer.Buffer
	// MaxFrameSize is the peer's max-frame-size; larger frames are refused
	// (splitting a message over transfers is the link layer's job). 0
	// means no limit: the peer's open left max-frame-size absent.
	MaxFrameSize uint32
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer, maxFrameSize uint32) *Writer {
	return &Writer{w: w, MaxFrameSize: maxFrameSize}
}

// WriteProtocolHeader writes h.
func (w *Writer) WriteProtocolHeader(h ProtocolHeader) error {
	b := h.Bytes()
	_, err := w.w.Write(b[:])
	return err
}

// WriteFrame encodes and writes one frame. body may be nil (heartbeat).
func (w *Writer) WriteFrame(channel uint16, body Performative, payload []byte) error {
	typ := TypeAMQP
	if body != nil {
		typ = body.FrameType()
	}
	w.buf.Reset()
	if err := AppendFrame(&w.buf, typ, channel, body, payload); err != nil {
		return err
	}
	if w.MaxFrameSize != 0 && uint64(w.buf.Size()) > uint64(w.MaxFrameSize) {
		return fmt.Errorf("%w: %d > %d", ErrFrameTooLarge, w.buf.Size(), w.MaxFrameSize)
	}
	_, err := w.w.Write(w.buf.Written())
	return err
}
