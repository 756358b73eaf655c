package mqtt

import (
	"context"
	"log/slog"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tolsey/tolsey/core"
)

// Log lines must stay short and must not carry message contents).
// mochi logs whole packets: its "error processing packet" WARN and
// its debug lines print a packets.Packet with %+v, payload bytes, password
// and a topic of up to 64 KiB included, and a client id may be 64 KiB too.
// mochi takes its *slog.Logger from us, so rather than patch each of its log
// calls, the front-end's loggers (mochi's and ours) go through redactHandler:
//   - a packets.Packet (or *packets.Packet) becomes its type, packet id,
//     topic (shortened), payload size and filter count; never its payload;
//   - a mochi.Will becomes its topic (shortened) and payload size;
//   - a []byte becomes its size;
//   - a string over logStringMax bytes is shortened (core.Shorten), and so
//     is an error text over logErrorMax bytes.
//
// Upstream, the fix would be a LogValue method on packets.Packet (and on
// Will) that leaves the payload out: slog calls it for every handler.
const (
	logStringMax = 128
	logErrorMax  = 512
)

// redactHandler is a slog.Handler that redacts attributes as described above
// and hands the record on to next. It costs nothing for disabled levels.
type redactHandler struct{ next slog.Handler }

var _ slog.Handler = redactHandler{}

func newRedactedLogger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(redactHandler); ok {
		return l
	}
	return slog.New(redactHandler{next: l.Handler()})
}

func (h redactHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = redactAttr(a)
	}
	return redactHandler{next: h.next.WithAttrs(out)}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{next: h.next.WithGroup(name)}
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); len(s) > logStringMax {
			v = slog.StringValue(core.Shorten(s, logStringMax))
		}
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]slog.Attr, len(attrs))
		for i, x := range attrs {
			out[i] = redactAttr(x)
		}
		v = slog.GroupValue(out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case packets.Packet:
			v = packetValue(&x)
		case *packets.Packet:
			if x != nil {
				v = packetValue(x)
			}
		case mochi.Will:
			v = slog.GroupValue(slog.String("topic", core.Shorten(x.TopicName, logStringMax)),
				slog.Int("payload_bytes", len(x.Payload)))
		case []byte:
			v = slog.GroupValue(slog.Int("bytes", len(x)))
		case error:
			if s := x.Error(); len(s) > logErrorMax {
				v = slog.StringValue(core.Shorten(s, logErrorMax))
			}
		}
	}
	a.Value = v
	return a
}

// packetValue is what a log line shows of a packet: enough to tell which
// one it was, nothing it carried.
func packetValue(pk *packets.Packet) slog.Value {
	attrs := make([]slog.Attr, 0, 5)
	name, ok := packets.PacketNames[pk.FixedHeader.Type]
	if !ok {
		name = "unknown"
	}
	attrs = append(attrs, slog.String("type", name))
	if pk.PacketID != 0 {
		attrs = append(attrs, slog.Int("id", int(pk.PacketID)))
	}
	if pk.TopicName != "" {
		attrs = append(attrs, slog.String("topic", core.Shorten(pk.TopicName, logStringMax)))
	}
	if len(pk.Payload) > 0 {
		attrs = append(attrs, slog.Int("payload_bytes", len(pk.Payload)))
	}
	if n := len(pk.Filters); n > 0 {
		attrs = append(attrs, slog.Int("filters", n))
	}
	return slog.GroupValue(attrs...)
}
