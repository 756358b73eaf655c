// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/xid"

	"github.com/mochi-mqtt/server/v2/mempool"
	"github.com/mochi-mqtt/server/v2/packets"
)

const (
	defaultKeepalive             uint16 = 10 // the default connection keepalive value in seconds.
	defaultClientProtocolVersion byte   = 4  // the default mqtt protocol version of connecting clients (if somehow unspecified).
	minimumKeepalive             uint16 = 5  // the minimum recommended keepalive - values under with display a warning.
)

var (
	ErrMinimumKeepalive = errors.New("client keepalive is below minimum recommended value and may exhibit connection instability")

	// ErrWriteFailed is the stop cause of a client whose socket write
	// failed or passed Options.WriteTimeout (gateway patch).
	ErrWriteFailed = errors.New("write to client failed")
	// ErrWriteBusy: a write that must not wait found another in progress
	// (gateway patch).
	ErrWriteBusy = errors.New("a write to the client is in progress")
)

// ReadFn is the function signature for the function used for reading and processing new packets.
type ReadFn func(*Client, packets.Packet) error

// Clients contains a map of the clients known by the broker.
type Clients struct {
	internal map[string]*Client // clients known by the broker, keyed on client id.
	sync.RWMutex
}

// NewClients returns an instance of Clients.
func NewClients() *Clients {
	return &Clients{
		internal: make(map[string]*Client),
	}
}

// Add adds a new client to the clients map, keyed on client id.
func (cl *Clients) Add(val *Client) {
	cl.Lock()
	defer cl.Unlock()
	cl.internal[val.ID] = val
}

// GetAll returns all the clients.
func (cl *Clients) GetAll() map[string]*Client {
	cl.RLock()
	defer cl.RUnlock()
	m := map[string]*Client{}
	for k, v := range cl.internal {
		m[k] = v
	}
	return m
}

// Get returns the value of a client if it exists.
func (cl *Clients) Get(id string) (*Client, bool) {
	cl.RLock()
	defer cl.RUnlock()
	val, ok := cl.internal[id]
	return val, ok
}

// Len returns the length of the clients map.
func (cl *Clients) Len() int {
	cl.RLock()
	defer cl.RUnlock()
	val := len(cl.internal)
	return val
}

// Delete removes a client from the internal map.
func (cl *Clients) Delete(id string) {
	cl.Lock()
	defer cl.Unlock()
	delete(cl.internal, id)
}

// DeleteIf removes id's client if it is val, and reports whether it did
// (gateway patch: Delete removes whichever client holds the id by then).
func (cl *Clients) DeleteIf(id string, val *Client) bool {
	cl.Lock()
	defer cl.Unlock()
	if cl.internal[id] != val {
		return false
	}
	delete(cl.internal, id)
	return true
}

// GetByListener returns clients matching a listener id.
func (cl *Clients) GetByListener(id string) []*Client {
	cl.RLock()
	defer cl.RUnlock()
	clients := make([]*Client, 0, cl.Len())
	for _, client := range cl.internal {
		if client.Net.Listener == id && !client.Closed() {
			clients = append(clients, client)
		}
	}
	return clients
}

// Client contains information about a client known by the broker.
type Client struct {
	Properties   ClientProperties // client properties
	State        ClientState      // the operational state of the client.
	Net          ClientConnection // network connection state of the client
	ID           string           // the client id.
	ops          *ops             // ops provides a reference to server ops.
	sync.RWMutex                  // mutex
}

// ClientConnection contains the connection transport and metadata for the client.
type ClientConnection struct {
	Conn   net.Conn      // the net.Conn used to establish the connection
	bconn  *bufio.Reader // a buffered net.Conn for reading packets
	outbuf *bytes.Buffer // a buffer for writing packets; guarded by wmu

	// wmu serialises writes to Conn and guards outbuf and writeRearm
	// (gateway patch). Upstream held the client's own lock across the
	// socket write, and that lock is also taken by NextPacketID, which
	// every publisher routing a QoS 1/2 message to this client calls: one
	// subscriber that stopped reading its socket froze every QoS 1/2
	// publisher behind its blocked write. Nothing but writes takes wmu.
	wmu        sync.Mutex
	writeRearm int64 // unix nanoseconds after which the write deadline is set again
	// inWrite is when the socket write under way began (monoNow), 0
	// between writes (gateway patch 37): a write that
	// takes long is a client not reading, which a stalled publisher
	// gives up on; a writer only late to run is a busy machine.
	inWrite atomic.Int64
	// pending is a DISCONNECT a write that must not wait left for
	// whoever held wmu, who writes it once done (writePending).
	pending atomic.Pointer[[]byte]
	// How a connection Stop ends is closed (gateway patch 20, close.go):
	// ending is set by Stop and done by whoever ends the writes; closeBy
	// bounds the writes that are left; closeRefs counts the two sides,
	// writes and reader, that must be done before the socket is closed.
	ending    atomic.Int32
	closeBy   atomic.Int64
	closeRefs atomic.Int32
	Remote    string    // the remote address of the client
	Listener  string    // listener id of the client
	Inline    bool      // if true, the client is the built-in 'inline' embedded client
	Stats     ConnStats // this connection's counters (gateway patch 31)
}

// ClientProperties contains the properties which define the client behaviour.
type ClientProperties struct {
	Props           packets.Properties
	Will            Will
	Username        []byte
	ProtocolVersion byte
	Clean           bool
}

// Will contains the last will and testament details for a client connection.
type Will struct {
	Payload           []byte                 // -
	User              []packets.UserProperty // -
	TopicName         string                 // -
	Flag              uint32                 // 0,1
	WillDelayInterval uint32                 // -
	Qos               byte                   // -
	Retain            bool                   // -

	// The will's other properties, which its PUBLISH carries (MQTT 5
	// 3.1.3.2; gateway patch: upstream kept only User).
	PayloadFormat         byte
	PayloadFormatFlag     bool
	MessageExpiryInterval uint32
	ContentType           string
	ResponseTopic         string
	CorrelationData       []byte

	// Ignore, set by an OnWill hook, keeps the will from mochi's fan-out
	// and retained store, as pk.Ignore does a publish: the hook delivers
	// it elsewhere (gateway patch: a will to a queue).
	Ignore bool
}

// PublishProperties returns the properties of the PUBLISH that sends the
// will (gateway patch).
func (w Will) PublishProperties() packets.Properties {
	return packets.Properties{
		PayloadFormat:         w.PayloadFormat,
		PayloadFormatFlag:     w.PayloadFormatFlag,
		MessageExpiryInterval: w.MessageExpiryInterval,
		ContentType:           w.ContentType,
		ResponseTopic:         w.ResponseTopic,
		CorrelationData:       w.CorrelationData,
		User:                  w.User,
	}
}

// ClientState tracks the state of the client.
type ClientState struct {
	TopicAliases    TopicAliases       // a map of topic aliases
	stopCause       atomic.Value       // reason for stopping
	Inflight        *Inflight          // a map of in-flight qos messages
	Subscriptions   *Subscriptions     // a map of the subscription filters a client maintains
	disconnected    int64              // the time the client disconnected in unix time, for calculating expiry
	outbound        outboundQueue      // queue for pending outbound packets (gateway patch: was a channel)
	acks            ackQueue           // acks of inbound publishes a hook answers later, in order (gateway patch 12)
	hold            publishHold        // PUBLISHes held back while a hook asks (gateway patch 13)
	held            heldAcks           // acks the reader holds until its burst ends (gateway patch 26); owned by the reader
	endOnce         sync.Once          // only end once
	isTakenOver     atomic.Bool        // used to identify orphaned clients
	takenOver       atomic.Bool        // another connection took the session: only its DISCONNECT is written (gateway patch)
	sessionTaken    atomic.Bool        // ... and carries the session on: no delayed will for this one (gateway patch)
	draining        atomic.Bool        // the connection is ending: its reader takes only a DISCONNECT, within the deadline set (gateway patch)
	writesDone      atomic.Bool        // a write failed: nothing more is written (gateway patch)
	writeErr        atomic.Value       // writeFailure: why writes ended (gateway patch)
	packetID        uint32             // the current highest packetID
	open            context.Context    // indicate that the client is open for packet exchange
	cancelOpen      context.CancelFunc // cancel function for open context
	outboundQty     int32              // number of messages currently in the outbound queue
	Keepalive       uint16             // the number of seconds the connection can wait
	ServerKeepalive bool               // keepalive was set by the server
}

// newClient returns a new instance of Client. This is almost exclusively used by Server
// for creating new clients, but it lives here because it's not dependent.
func newClient(c net.Conn, o *ops) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	cl := &Client{
		State: ClientState{
			Inflight:      NewInflights(),
			Subscriptions: NewSubscriptions(),
			TopicAliases:  NewTopicAliases(o.options.Capabilities.TopicAliasMaximum),
			open:          ctx,
			cancelOpen:    cancel,
			Keepalive:     defaultKeepalive,
		},
		Properties: ClientProperties{
			ProtocolVersion: defaultClientProtocolVersion, // default protocol version
		},
		ops: o,
	}

	if c != nil {
		cl.Net = ClientConnection{
			Conn:   c,
			bconn:  bufio.NewReaderSize(c, o.options.ClientNetReadBufferSize),
			Remote: c.RemoteAddr().String(),
		}
		cl.Net.Stats.Since = time.Now() // gateway patch 31
	}

	return cl
}

// outboundQueue holds the packets waiting to be written to a client (gateway
// patch). It replaces a channel of MaximumClientWritesPending slots, allocated
// when the client connects (64 KiB at mochi's default of 8192), with a ring
// that grows with use and is let go of when it empties; and the goroutine
// that writes it runs only while there is something to write, so an idle
// connection keeps neither a queue nor a writer's stack.
type outboundQueue struct {
	mu      sync.Mutex
	ring    []*packets.Packet // len is 0 or a power of two
	head    int               // index of the oldest packet in ring
	n       int               // packets in ring
	queued  atomic.Int32      // n, readable without mu
	writing bool              // a goroutine is running writeLoop

	// Publishers stalled on a full queue (gateway patch 22, enqueueStall):
	// room is made by the first of them and closed by pop once a quarter
	// of the queue is free; noStall is set when a stall ran out and
	// cleared when a quarter is free again (patch 37; before, only when
	// the queue emptied), so a subscriber that stopped reading stalls each
	// publisher once, not once per message, and one that was only late
	// (its writer not run in time on a busy machine) loses a quarter of a
	// queue at most, not a whole queue.
	room    chan struct{} // guarded by mu
	limit   int           // the queue's limit when room was made; guarded by mu
	noStall atomic.Bool
}

// keptRing is the largest ring an empty queue keeps.
const keptRing = 8

// push appends pk; the caller holds q.mu.
func (q *outboundQueue) push(pk *packets.Packet) {
	if q.n == len(q.ring) {
		ring := make([]*packets.Packet, max(keptRing, 2*len(q.ring)))
		for i := 0; i < q.n; i++ {
			ring[i] = q.ring[(q.head+i)&(len(q.ring)-1)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.n)&(len(q.ring)-1)] = pk
	q.n++
	q.queued.Store(int32(q.n))
}

// pop removes and returns the oldest packet, nil if there is none; the
// caller holds q.mu.
func (q *outboundQueue) pop() *packets.Packet {
	if q.n == 0 {
		return nil
	}
	pk := q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) & (len(q.ring) - 1)
	q.n--
	q.queued.Store(int32(q.n))
	if q.n <= q.limit-max(q.limit/4, 1) {
		if q.room != nil {
			close(q.room) // gateway patch 22: stalled publishers go on
			q.room = nil
		}
		if q.noStall.Load() {
			q.noStall.Store(false) // gateway patch 37: it reads again
		}
	}
	if q.n == 0 {
		q.head = 0
		if len(q.ring) > keptRing {
			q.ring = nil
		}
		q.noStall.Store(false)
	}
	return pk
}

// Len returns the number of packets waiting to be written.
func (q *outboundQueue) Len() int {
	return int(q.queued.Load())
}

// enqueue queues pk for writing, starting a writer if none is running. It
// reports false, queueing nothing, when MaximumClientWritesPending packets
// are already waiting.
func (cl *Client) enqueue(pk *packets.Packet) bool {
	ok, _ := cl.tryEnqueue(pk, false)
	return ok
}

// enqueueStall is enqueue for a QoS 0 PUBLISH on its publisher's reader
// (gateway patch 22): when the queue is full it waits up to stall for the
// writer to free a quarter of it, then tries once more. A subscriber that
// reads as fast as it can loses nothing to a burst from several
// publishers; one that stopped reading holds each publisher at most stall,
// once (noStall), and loses what does not fit, as before. Patch 37: stall
// bounds a wait without progress (each quarter freed starts it again), and
// a writer not held by its socket, only late to run, is waited for up to
// stallCap stalls. The wait ends early when the client stops. No lock is
// held while waiting.
func (cl *Client) enqueueStall(pk *packets.Packet, stall time.Duration) bool {
	q := &cl.State.outbound
	ok, room := cl.tryEnqueue(pk, !q.noStall.Load())
	if ok || room == nil {
		return ok
	}
	t := time.NewTimer(stall)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-room:
			// The writer went on (patch 37): the bound is on a stall
			// without progress, not on the wait of a publisher that lost
			// the freed room to others; stallCap stalls in all still.
			if time.Since(start) < stallCap*stall {
				t.Reset(stall)
			}
		case <-t.C:
			// Patch 37: a writer not held by its socket (no write under
			// way, or one begun less than stallCap stalls ago: a client
			// that is itself late to run on a busy machine) is not behind
			// a client that stopped reading: wait on, up to stallCap
			// stalls in all.
			if w := cl.Net.inWrite.Load(); (w == 0 || time.Duration(monoNow()-w) < stallCap*stall) &&
				time.Since(start) < stallCap*stall {
				t.Reset(stall)
				continue
			}
			q.noStall.Store(true)
			ok, _ = cl.tryEnqueue(pk, false)
			return ok
		case <-cl.Done():
			return false
		}
		if ok, room = cl.tryEnqueue(pk, true); ok || room == nil {
			return ok
		}
	}
}

// stallCap bounds a publisher's wait for a subscriber whose writer is
// late to run, in stalls (gateway patch 37).
const stallCap = 20

// monoBase and monoNow are a monotonic clock in an int64 (gateway patch
// 37, ClientConnection.inWrite): nanoseconds since the process began, at
// least 1 (0 is "no write").
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// tryEnqueue queues pk unless the queue is full; then, with wait, it
// returns the channel pop closes once there is room again.
func (cl *Client) tryEnqueue(pk *packets.Packet, wait bool) (bool, chan struct{}) {
	q := &cl.State.outbound
	q.mu.Lock()
	if limit := int(cl.ops.options.Capabilities.MaximumClientWritesPending); q.n >= limit {
		var room chan struct{}
		if wait {
			if q.room == nil {
				q.room, q.limit = make(chan struct{}), limit
			}
			room = q.room
		}
		q.mu.Unlock()
		return false, room
	}
	q.push(pk)
	atomic.AddInt32(&cl.State.outboundQty, 1)
	start := !q.writing
	q.writing = true
	q.mu.Unlock()
	if start {
		go cl.writeLoop()
	}
	return true, nil
}

// WriteLoop writes the queued packets to the client connection until the
// queue is empty or the client closes. Queueing a packet starts it when it is
// not running (gateway patch: it no longer runs for the whole connection).
func (cl *Client) WriteLoop() {
	q := &cl.State.outbound
	q.mu.Lock()
	if q.writing {
		q.mu.Unlock()
		return
	}
	q.writing = true
	q.mu.Unlock()
	cl.writeLoop()
}

// writeLoop is WriteLoop once it owns q.writing.
func (cl *Client) writeLoop() {
	q := &cl.State.outbound
	wrote := false
	for {
		q.mu.Lock()
		pk := q.pop()
		if pk == nil || cl.Closed() {
			for pk != nil { // closed: what is left is dropped, as before
				cl.ackWritten(pk) // gateway patch 12
				releaseShared(pk) // gateway patch 27
				atomic.AddInt32(&cl.State.outboundQty, -1)
				pk = q.pop()
			}
			q.writing = false
			q.mu.Unlock()
			// gateway patch 13: held PUBLISHes a full queue refused go
			// now (it was full, so this writer had something to write).
			if wrote {
				cl.sendHeld()
			}
			return
		}
		q.mu.Unlock()
		cl.writeQueued(pk)
		wrote = true
	}
}

// writeQueued writes one packet taken from the outbound queue. It keeps
// writeLoop's frame small (gateway patch).
//
//go:noinline
func (cl *Client) writeQueued(pk *packets.Packet) {
	if err := cl.writeQueuedPacket(pk); err != nil {
		// TODO : Figure out what to do with error
		cl.ops.log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", pk)
		// gateway patch: a packet refused before it was written (too
		// large, not encodable) must not strand what writes made while it
		// was queued left buffered (upstream kept a PUBACK there until
		// the next write).
		if cl.State.outbound.Len() == 0 {
			cl.Net.wmu.Lock()
			if err := cl.flushOutbuf(); err != nil {
				cl.failWrites(err)
			}
			cl.Net.wmu.Unlock()
			cl.writePending() // gateway patch 20: what a write that could not wait left
		}
	}
	cl.ackWritten(pk) // gateway patch 12
	atomic.AddInt32(&cl.State.outboundQty, -1)
	releaseShared(pk) // gateway patch 27; last: pk may be the shared encoding's own packet
}

// writeQueuedPacket is WritePacket(*pk) for a packet taken off the write
// queue; one whose encoding is shared (patch 27) is written from pk, not
// from two copies of it made on the way (gateway patch 47: 816 bytes each,
// for every delivered copy of a fan-out).
func (cl *Client) writeQueuedPacket(pk *packets.Packet) error {
	sp := pk.Mods.Shared
	if sp == nil {
		return cl.WritePacket(*pk)
	}
	if ok, err := cl.writable(pk.FixedHeader.Type); !ok {
		return err
	}
	return cl.writeShared(pk, sp.Bytes())
}

// writable is what every write of a packet of type typ checks first: a
// closed client, or one refusing typ, gets ErrConnectionClosed; without a
// connection (a test's, the inline client) nothing is written and nothing
// is wrong. ok reports whether to write.
func (cl *Client) writable(typ byte) (ok bool, err error) {
	if cl.Closed() || cl.refused(typ) {
		return false, ErrConnectionClosed
	}
	return cl.Net.Conn != nil, nil
}

// ParseConnect parses the connect parameters and properties for a client.
func (cl *Client) ParseConnect(lid string, pk packets.Packet) {
	cl.Net.Listener = lid

	cl.Properties.ProtocolVersion = pk.ProtocolVersion
	cl.Properties.Username = pk.Connect.Username
	cl.Properties.Clean = pk.Connect.Clean
	// gateway patch 42: the user properties are kept, not copied: the
	// packet is read only and dropped once parsed, and its user properties
	// are what the client sent (up to mqtt.maxPacketSize of them, 6.4 times
	// their wire size once decoded, before the client is authenticated).
	user := pk.Properties.User
	pk.Properties.User = nil
	cl.Properties.Props = pk.Properties.Copy(false)
	cl.Properties.Props.User = user

	if cl.Properties.Props.ReceiveMaximum > cl.ops.options.Capabilities.MaximumInflight { // 3.3.4 Non-normative
		cl.Properties.Props.ReceiveMaximum = cl.ops.options.Capabilities.MaximumInflight
	}

	if pk.Connect.Keepalive <= minimumKeepalive {
		cl.ops.log.Warn(
			ErrMinimumKeepalive.Error(),
			"client", cl.ID,
			"keepalive", pk.Connect.Keepalive,
			"recommended", minimumKeepalive,
		)
	}

	cl.State.Keepalive = pk.Connect.Keepalive                                              // [MQTT-3.2.2-22]
	cl.State.Inflight.ResetReceiveQuota(int32(cl.ops.options.Capabilities.ReceiveMaximum)) // server receive max per client
	cl.State.Inflight.ResetSendQuota(int32(cl.Properties.Props.ReceiveMaximum))            // client receive max
	cl.State.TopicAliases.Outbound = NewOutboundTopicAliases(cl.Properties.Props.TopicAliasMaximum)

	cl.ID = pk.Connect.ClientIdentifier
	if cl.ID == "" {
		cl.ID = xid.New().String() // [MQTT-3.1.3-6] [MQTT-3.1.3-7]
		cl.Properties.Props.AssignedClientID = cl.ID
	}

	if pk.Connect.WillFlag {
		cl.Properties.Will = Will{
			Qos:               pk.Connect.WillQos,
			Retain:            pk.Connect.WillRetain,
			Payload:           pk.Connect.WillPayload,
			TopicName:         pk.Connect.WillTopic,
			WillDelayInterval: pk.Connect.WillProperties.WillDelayInterval,
			User:              pk.Connect.WillProperties.User,

			PayloadFormat:         pk.Connect.WillProperties.PayloadFormat,
			PayloadFormatFlag:     pk.Connect.WillProperties.PayloadFormatFlag,
			MessageExpiryInterval: pk.Connect.WillProperties.MessageExpiryInterval,
			ContentType:           pk.Connect.WillProperties.ContentType,
			ResponseTopic:         pk.Connect.WillProperties.ResponseTopic,
			CorrelationData:       pk.Connect.WillProperties.CorrelationData,
		}
		if pk.Properties.SessionExpiryIntervalFlag &&
			pk.Properties.SessionExpiryInterval < pk.Connect.WillProperties.WillDelayInterval {
			cl.Properties.Will.WillDelayInterval = pk.Properties.SessionExpiryInterval
		}
		if pk.Connect.WillFlag {
			cl.Properties.Will.Flag = 1 // atomic for checking
		}
	}
}

// refreshDeadline refreshes the read/write deadline for the net.Conn connection.
func (cl *Client) refreshDeadline(keepalive uint16) {
	var expiry time.Time // nil time can be used to disable deadline if keepalive = 0
	if keepalive > 0 {
		expiry = time.Now().Add(time.Duration(keepalive+(keepalive/2)) * time.Second) // [MQTT-3.1.2-22]
	}

	if cl.Net.Conn == nil {
		return
	}
	if cl.ops.options.WriteTimeout > 0 {
		// gateway patch: writes have deadlines of their own
		// (armWriteDeadline); keep alive bounds the reads.
		_ = cl.Net.Conn.SetReadDeadline(expiry) // [MQTT-3.1.2-22]
		return
	}
	_ = cl.Net.Conn.SetDeadline(expiry) // [MQTT-3.1.2-22]
}

// NextPacketID returns the next available (unused) packet id for the client.
// If no unused packet ids are available, an error is returned and the client
// should be disconnected.
func (cl *Client) NextPacketID() (i uint32, err error) {
	cl.Lock()
	defer cl.Unlock()

	i = atomic.LoadUint32(&cl.State.packetID)
	started := i
	overflowed := false
	for {
		if overflowed && i == started {
			return 0, packets.ErrQuotaExceeded
		}

		if i >= cl.ops.options.Capabilities.maximumPacketID {
			overflowed = true
			i = 0
			continue
		}

		i++

		if _, ok := cl.State.Inflight.Get(uint16(i)); !ok {
			atomic.StoreUint32(&cl.State.packetID, i)
			return i, nil
		}
	}
}

// ResendInflightMessages attempts to resend any pending inflight messages to connected clients.
func (cl *Client) ResendInflightMessages(force bool) error {
	if cl.State.Inflight.Len() == 0 {
		return nil
	}

	for _, tk := range cl.State.Inflight.GetAll(false) {
		if tk.FixedHeader.Type == packets.Publish {
			if tk.Expiry < 0 {
				// gateway patch 13: held back, never sent: it goes as
				// the send quota allows (sendHeld), not twice.
				continue
			}
			tk.FixedHeader.Dup = true // [MQTT-3.3.1-1] [MQTT-3.3.1-3]
			// It counts against the new connection's Receive Maximum
			// (gateway patch 13); it is resent even when none is left.
			cl.State.Inflight.TakeSendQuota()
		}

		cl.ops.hooks.OnQosPublish(cl, tk, tk.Created, 0)
		err := cl.WritePacket(tk)
		if err != nil {
			return err
		}

		if tk.FixedHeader.Type == packets.Puback || tk.FixedHeader.Type == packets.Pubcomp {
			if ok := cl.State.Inflight.Delete(tk.PacketID); ok {
				cl.ops.hooks.OnQosComplete(cl, tk)
				atomic.AddInt64(&cl.ops.info.Inflight, -1)
			}
		}
	}

	return nil
}

// ClearInflights deletes all inflight messages for the client, e.g. for a disconnected user with a clean session.
func (cl *Client) ClearInflights() {
	for _, tk := range cl.State.Inflight.GetAll(false) {
		if ok := cl.State.Inflight.Delete(tk.PacketID); ok {
			cl.ops.hooks.OnQosDropped(cl, tk)
			atomic.AddInt64(&cl.ops.info.Inflight, -1)
		}
	}
}

// ClearExpiredInflights deletes any inflight messages which have expired.
//
// gateway patch 13: only those whose flow has not begun. A PUBLISH sent
// and not yet acknowledged (or its PUBREL) is kept: its delivery has begun
// [MQTT-3.3.2-5], it is resent on reconnection [MQTT-4.4.0-1], and it
// counts against the client's Receive Maximum until acknowledged
// [MQTT-3.3.4-9]. Upstream deleted it, so the late PUBACK found nothing and
// its unit of the send quota was lost for good (after Receive Maximum of
// them nothing more was sent); giving the unit back at expiry instead
// would let one more PUBLISH out than the client allows. Held messages
// (never sent, offline ones too) expire by the expiry they keep, and the
// next held one may then go.
func (cl *Client) ClearExpiredInflights(now, maximumExpiry int64) []uint16 {
	deleted := []uint16{}
	for _, tk := range cl.State.Inflight.GetAll(false) {
		if tk.Expiry >= 0 && (tk.FixedHeader.Type == packets.Publish || tk.FixedHeader.Type == packets.Pubrel) {
			continue // sent: kept until acknowledged
		}
		if inflightExpired(tk, now, maximumExpiry) {
			if ok := cl.State.Inflight.Delete(tk.PacketID); ok {
				cl.ops.hooks.OnQosDropped(cl, tk)
				atomic.AddInt64(&cl.ops.info.Inflight, -1)
				deleted = append(deleted, tk.PacketID)
			}
		}
	}
	if len(deleted) > 0 {
		cl.sendHeld()
	}

	return deleted
}

// inflightExpired reports whether the inflight packet tk has expired at
// now [MQTT-3.3.2-5], or outlived maximumExpiry.
func inflightExpired(tk packets.Packet, now, maximumExpiry int64) bool {
	expiry := expiryOf(tk)
	expired := tk.ProtocolVersion == 5 && expiry > 0 && expiry < now // [MQTT-3.3.2-5]

	// If the maximum message expiry interval is set (greater than 0), and the message
	// retention period exceeds the maximum expiry, the message will be forcibly removed.
	enforced := maximumExpiry > 0 && now-tk.Created > maximumExpiry
	return expired || enforced
}

// Read reads incoming packets from the connected client and transforms them into
// packets to be handled by the packetHandler.
func (cl *Client) Read(packetHandler ReadFn) error {
	for {
		if cl.readStops() {
			return cl.stoppedFor()
		}
		// gateway patch 24: this goroutine only waits for the next packet's
		// first byte; a pooled handler reads and handles what has arrived
		// (handlers.go), so this stack stays small.
		if err := cl.awaitInput(); err != nil {
			return cl.readEnded(err)
		}
		if err := cl.ops.handlers.run(cl, packetHandler); err != nil {
			return err
		}
	}
}

// readStops makes the reader ready for the next packet and reports whether
// it must stop instead (the client is closed): the checks upstream's Read
// made before each packet.
func (cl *Client) readStops() bool {
	if cl.Closed() {
		return true
	}
	if cl.ackRoomFull() { // gateway patch 12: backpressure while deferred acks hold the receive quota
		_ = cl.flushHeld() // gateway patch 26: not while waiting; a failed write ends the client
		cl.waitForAckRoom()
		if cl.Closed() {
			return true
		}
	}
	if !cl.State.draining.Load() { // gateway patch: the ending connection's deadline stands
		cl.refreshDeadline(cl.State.Keepalive)
		if cl.Closed() { // gateway patch 20: Stop's deadline, which this one may have replaced, stands
			return true
		}
	}
	return false
}

// awaitInput waits until the client has sent at least one byte (gateway
// patch 24).
func (cl *Client) awaitInput() error {
	if cl.Net.bconn == nil {
		return ErrConnectionClosed
	}
	_, err := cl.Net.bconn.Peek(1)
	return err
}

// readBurst reads and handles packets, on a handler goroutine, for as long
// as their bytes have arrived already (gateway patch 24). It returns nil
// when the next packet is not there yet or the client is closed (Read
// finds out which).
func (cl *Client) readBurst(packetHandler ReadFn) error {
	cl.State.held.on = true // gateway patch 26: the acks written meanwhile go out together
	err := cl.readHeld(packetHandler)
	cl.State.held.on = false
	if ferr := cl.flushHeld(); err == nil {
		err = ferr
	}
	return err
}

// readHeld is readBurst's loop.
func (cl *Client) readHeld(packetHandler ReadFn) error {
	for {
		fh := new(packets.FixedHeader)
		if err := cl.ReadFixedHeader(fh); err != nil {
			return cl.readEnded(err)
		}
		if err := cl.readAndHandle(fh, packetHandler); err != nil {
			return cl.readEnded(err)
		}
		if !cl.inputPending() || cl.readStops() {
			return nil
		}
		// Held acks wait only for packets already here: before a read
		// that may block (the next packet not whole in the buffer yet, or
		// only a WebSocket control frame ready), they go out.
		if cl.State.held.n > 0 && !cl.nextBuffered() {
			if err := cl.flushHeld(); err != nil {
				return err
			}
		}
	}
}

// nextBuffered reports whether the whole next packet is in the client's
// read buffer, so that reading it does not wait (gateway patch 26).
func (cl *Client) nextBuffered() bool {
	b := cl.Net.bconn
	n := b.Buffered()
	if n < 2 {
		return false
	}
	p, _ := b.Peek(min(n, 5)) // the type byte and at most 4 of remaining length
	rem, mul := 0, 1
	for i := 1; i < len(p); i++ {
		rem += int(p[i]&127) * mul
		if p[i]&128 == 0 {
			return n >= 1+i+rem
		}
		mul *= 128
	}
	return false
}

// inputPending reports whether bytes the client sent can be read without
// waiting: buffered in the client's reader, or ready in a connection that
// can tell (the gateway's listeners, method InputReady).
func (cl *Client) inputPending() bool {
	if cl.Net.bconn.Buffered() > 0 {
		return true
	}
	r, ok := cl.Net.Conn.(interface{ InputReady() bool })
	return ok && r.InputReady()
}

// readEnded is what Read returns for err: once the client is stopped, a
// read its deadline ended returns why it was stopped (gateway patch 20:
// Stop wakes the reader with a deadline; upstream closed the socket, and
// the read failed on the closed connection).
func (cl *Client) readEnded(err error) error {
	if cl.Closed() && errors.Is(err, os.ErrDeadlineExceeded) {
		if cause := cl.StopCause(); cause != nil {
			return cause
		}
		return net.ErrClosed
	}
	return err
}

// readAndHandle reads the rest of a packet and hands it to packetHandler. It is
// a function of its own so that Read's frame, on the stack while a connection
// waits for its next packet, stays small (gateway patch).
//
//go:noinline
func (cl *Client) readAndHandle(fh *packets.FixedHeader, packetHandler ReadFn) error {
	pk, err := cl.ReadPacket(fh)
	if err != nil {
		return err
	}

	return packetHandler(cl, pk) // Process inbound packet.
}

// Stop instructs the client to shut down all processing goroutines and disconnect.
func (cl *Client) Stop(err error) {
	cl.State.endOnce.Do(func() {
		if err != nil {
			cl.State.stopCause.Store(err)
		}

		if cl.State.cancelOpen != nil {
			cl.State.cancelOpen()
		}

		// gateway patch 20: upstream closed the socket first, before a
		// DISCONNECT left pending was written. endConn comes after
		// cancelOpen: a reader that refreshed its deadline over the one
		// endConn sets finds the client closed (Read).
		if cl.Net.Conn != nil {
			cl.endConn()
		}

		atomic.StoreInt64(&cl.State.disconnected, time.Now().Unix())
	})
}

// stoppedFor is what Read returns once the client is stopped: nil after a
// DISCONNECT the client sent, else why it was stopped (gateway patch:
// upstream returned nil, so a connection the server ended without a
// DISCONNECT, a refused topic for one, lost its will [MQTT-3.1.2-8]).
func (cl *Client) stoppedFor() error {
	cause := cl.StopCause()
	if cause == nil || cause == error(packets.CodeDisconnect) {
		return nil
	}
	return cause
}

// writeFailure wraps the error that ended a client's writes (atomic.Value
// needs one concrete type).
type writeFailure struct{ err error }

// WriteFailure is the error that ended the client's writes, wrapping
// ErrWriteFailed, or nil (gateway patch).
func (cl *Client) WriteFailure() error {
	if v, ok := cl.State.writeErr.Load().(writeFailure); ok {
		return v.err
	}
	return nil
}

// drainOnWriteFailure bounds how long the reader of a connection whose
// write failed is read for a DISCONNECT of the client's (gateway patch).
const drainOnWriteFailure = time.Second

// failWrites ends a connection whose write failed or ran past its deadline
// (gateway patch). The stream may hold part of a packet, so nothing more is
// written (upstream went on writing into it). The socket is not closed
// here: the reader takes what has arrived for at most drainOnWriteFailure,
// so that a DISCONNECT the client sent before it stopped reading still
// counts (no will), and ends the connection at the end of the stream or
// the deadline, which publishes the will as for any connection the server
// ends. A session taken over is already draining under takeOver.
func (cl *Client) failWrites(err error) {
	if cl.State.writesDone.Swap(true) {
		return
	}
	if cl.Net.ending.Load() != notEnding {
		return // gateway patch 20: a write cut short by Stop's deadline; the connection ends for Stop's cause
	}
	cl.State.writeErr.Store(writeFailure{fmt.Errorf("%w: %w", ErrWriteFailed, err)})
	if cl.State.draining.Swap(true) || cl.Net.Conn == nil {
		return
	}
	_ = cl.Net.Conn.SetReadDeadline(time.Now().Add(drainOnWriteFailure))
	cl.State.acks.wake() // gateway patch 12: a reader held back by deferred acks reads on
}

// StopCause returns the reason the client connection was stopped, if any.
func (cl *Client) StopCause() error {
	if cl.State.stopCause.Load() == nil {
		return nil
	}
	return cl.State.stopCause.Load().(error)
}

// StopTime returns the the time the client disconnected in unix time, else zero.
func (cl *Client) StopTime() int64 {
	return atomic.LoadInt64(&cl.State.disconnected)
}

// Done is closed once the client is stopped (gateway patch: a goroutine of
// the embedding application waiting on the client can end with it).
func (cl *Client) Done() <-chan struct{} {
	if cl.State.open == nil {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return cl.State.open.Done()
}

// Closed returns true if client connection is closed.
func (cl *Client) Closed() bool {
	return cl.State.open == nil || cl.State.open.Err() != nil
}

func (cl *Client) IsTakenOver() bool {
	return cl.State.isTakenOver.Load()
}

// ReadFixedHeader reads in the values of the next packet's fixed header.
func (cl *Client) ReadFixedHeader(fh *packets.FixedHeader) error {
	if cl.Net.bconn == nil {
		return ErrConnectionClosed
	}

	b, err := cl.Net.bconn.ReadByte()
	if err != nil {
		return err
	}

	err = fh.Decode(b)
	if err != nil {
		return err
	}

	var bu int
	fh.Remaining, bu, err = packets.DecodeLength(cl.Net.bconn)
	if err != nil {
		return err
	}

	// gateway patch: the whole packet counts, fixed header included
	// (upstream counted one byte of it), as the Maximum Packet Size the
	// CONNACK announces does [MQTT-3.1.2-24].
	if max := cl.ops.options.Capabilities.MaximumPacketSize; max > 0 && uint64(1+bu)+uint64(fh.Remaining) > uint64(max) {
		return packets.ErrPacketTooLarge // [MQTT-3.2.2-15]
	}

	atomic.AddInt64(&cl.ops.info.BytesReceived, int64(bu+1))
	cl.Net.Stats.BytesReceived.Add(int64(bu + 1)) // gateway patch 31
	return nil
}

// ReadPacket reads the remaining buffer into an MQTT packet.
func (cl *Client) ReadPacket(fh *packets.FixedHeader) (pk packets.Packet, err error) {
	atomic.AddInt64(&cl.ops.info.PacketsReceived, 1)

	pk.ProtocolVersion = cl.Properties.ProtocolVersion // inherit client protocol version for decoding
	pk.FixedHeader = *fh
	px, err := cl.readBody(pk.FixedHeader.Remaining)
	if err != nil {
		return pk, err
	}

	atomic.AddInt64(&cl.ops.info.BytesReceived, int64(len(px)))
	cl.Net.Stats.BytesReceived.Add(int64(len(px))) // gateway patch 31

	// px is the packet's own: decoding may keep slices of it.
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectDecode(px)
	case packets.Disconnect:
		err = pk.DisconnectDecode(px)
	case packets.Connack:
		err = pk.ConnackDecode(px)
	case packets.Publish:
		err = pk.PublishDecode(px)
		if err == nil {
			atomic.AddInt64(&cl.ops.info.MessagesReceived, 1)
			cl.Net.Stats.MessagesReceived.Add(1) // gateway patch 31
		}
	case packets.Puback:
		err = pk.PubackDecode(px)
	case packets.Pubrec:
		err = pk.PubrecDecode(px)
	case packets.Pubrel:
		err = pk.PubrelDecode(px)
	case packets.Pubcomp:
		err = pk.PubcompDecode(px)
	case packets.Subscribe:
		err = pk.SubscribeDecode(px)
	case packets.Suback:
		err = pk.SubackDecode(px)
	case packets.Unsubscribe:
		err = pk.UnsubscribeDecode(px)
	case packets.Unsuback:
		err = pk.UnsubackDecode(px)
	case packets.Pingreq:
	case packets.Pingresp:
	case packets.Auth:
		err = pk.AuthDecode(px)
	default:
		err = fmt.Errorf("invalid packet type; %v", pk.FixedHeader.Type)
	}

	if err != nil {
		return pk, err
	}

	if cl.ops.hooks.packetProvided(OnPacketRead, pk.FixedHeader.Type) { // gateway patch 36: no packet copies for no hook
		pk, err = cl.ops.hooks.OnPacketRead(cl, pk)
	}
	return
}

// readBodyChunk is the most of a packet body reserved before its bytes
// arrive (gateway patch).
const readBodyChunk = 4 << 10

// readBody reads a packet body of n bytes into a new slice. Upstream made
// the whole slice from the remaining length in the fixed header, before a
// byte of the body had arrived: one header, with the connection then left
// silent, reserved up to 256 MiB. A body larger than readBodyChunk now grows
// (doubling) as its bytes arrive, so memory follows what a client sent
// (gateway patch).
func (cl *Client) readBody(n int) ([]byte, error) {
	if n <= readBodyChunk {
		p := make([]byte, n)
		_, err := io.ReadFull(cl.Net.bconn, p)
		return p, err
	}
	p := make([]byte, 0, readBodyChunk)
	for len(p) < n {
		if len(p) == cap(p) {
			p = slices.Grow(p, min(len(p), n-len(p)))
		}
		m, err := io.ReadFull(cl.Net.bconn, p[len(p):min(cap(p), n)])
		p = p[:len(p)+m]
		if err != nil {
			return nil, err
		}
	}
	return p[:n:n], nil // no spare room after the body: its payload is shared (patch 33)
}

// WritePacket encodes and writes a packet to the client, waiting for a
// write in progress to end (at most the write timeout).
func (cl *Client) WritePacket(pk packets.Packet) error {
	return cl.writePacketMode(pk, writeWait)
}

// writePacket is WritePacket; with wait false it does not wait for a write
// in progress and returns ErrWriteBusy instead (gateway patch).
func (cl *Client) writePacket(pk packets.Packet, wait bool) error {
	if wait {
		return cl.writePacketMode(pk, writeWait)
	}
	return cl.writePacketMode(pk, writeNoWait)
}

// writeMode is how a write goes out (gateway patches 6 and 26).
type writeMode uint8

const (
	writeWait   writeMode = iota // wait for a write in progress (at most the write timeout)
	writeNoWait                  // refuse with ErrWriteBusy instead of waiting (a DISCONNECT is left pending)
	writeHold                    // as writeWait, but left in outbuf for the reader's flushHeld (patch 26)
)

// writePacketMode is writePacket with the write's mode.
func (cl *Client) writePacketMode(pk packets.Packet, mode writeMode) error {
	if ok, err := cl.writable(pk.FixedHeader.Type); !ok {
		return err
	}

	if sp := pk.Mods.Shared; sp != nil {
		return cl.writeShared(&pk, sp.Bytes()) // gateway patch 27
	}
	cl.prepareFields(&pk)
	pk = cl.ops.hooks.OnPacketEncode(cl, pk)

	buf := writeBufs.Get() // gateway patch 21: was new(bytes.Buffer), per packet
	err := cl.encodeWrite(&pk, buf, mode)
	writeBufs.Put(buf)
	return err
}

// prepareFields sets what pk's encoding for cl depends on, the message
// expiry interval left, cl's limits and what it asked for (gateway patch
// 27: a function of its own, shared with the encodings shared by several
// clients); the OnPacketEncode hooks run after it (patch 38: in place for
// a shared encoding, whose packet is on the heap already).
func (cl *Client) prepareFields(pk *packets.Packet) {
	if pk.Expiry > 0 {
		expiry := pk.Expiry - time.Now().Unix()
		if expiry < 1 {
			expiry = 1
		}
		pk.Properties.MessageExpiryInterval = uint32(expiry) // [MQTT-3.3.2-6]
	}

	pk.ProtocolVersion = cl.Properties.ProtocolVersion
	if pk.Mods.MaxSize == 0 { // NB we use this statement to embed client packet sizes in tests
		pk.Mods.MaxSize = cl.Properties.Props.MaximumPacketSize
	}

	if cl.Properties.Props.RequestProblemInfoFlag && cl.Properties.Props.RequestProblemInfo == 0x0 {
		pk.Mods.DisallowProblemInfo = true // [MQTT-3.1.2-29] strict, no problem info on any packet if set
	}

	if pk.FixedHeader.Type != packets.Connack || cl.Properties.Props.RequestResponseInfo == 0x1 || cl.ops.options.Capabilities.Compatibilities.AlwaysReturnResponseInfo {
		pk.Mods.AllowResponseInfo = true // [MQTT-3.1.2-28] we need to know which properties we can encode
	}

}

// writeBufs holds the buffers packets are encoded into and writes are
// batched in (gateway patch 21): taken for one packet or one batch and
// put back after it, so neither allocates per packet and an idle
// connection holds none. A buffer grown past 64 KiB is not kept.
var writeBufs = mempool.NewBuffer(64 << 10)

// encodeWrite is writePacket once pk is prepared: it encodes pk into buf
// and writes it. OnPacketSent gets buf's bytes, valid during the call only.
func (cl *Client) encodeWrite(pk *packets.Packet, buf *bytes.Buffer, mode writeMode) error {
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(buf)
	case packets.Connack:
		err = pk.ConnackEncode(buf)
	case packets.Publish:
		err = pk.PublishEncode(buf)
	case packets.Puback:
		err = pk.PubackEncode(buf)
	case packets.Pubrec:
		err = pk.PubrecEncode(buf)
	case packets.Pubrel:
		err = pk.PubrelEncode(buf)
	case packets.Pubcomp:
		err = pk.PubcompEncode(buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(buf)
	case packets.Suback:
		err = pk.SubackEncode(buf)
	case packets.Unsubscribe:
		err = pk.UnsubscribeEncode(buf)
	case packets.Unsuback:
		err = pk.UnsubackEncode(buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(buf)
	case packets.Pingresp:
		err = pk.PingrespEncode(buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(buf)
	case packets.Auth:
		err = pk.AuthEncode(buf)
	default:
		err = fmt.Errorf("%w: %v", packets.ErrNoValidPacketAvailable, pk.FixedHeader.Type)
	}
	if err != nil {
		return err
	}

	if pk.Mods.MaxSize > 0 && uint32(buf.Len()) > pk.Mods.MaxSize {
		return packets.ErrPacketTooLarge // [MQTT-3.1.2-24] [MQTT-3.1.2-25]
	}

	n, err := cl.writeEncoded(buf.Bytes(), pk.FixedHeader.Type, mode)
	if err != nil {
		return err
	}

	cl.sent(pk, buf.Bytes(), n)
	return err
}

// sent counts pk, written as b (n bytes), and tells the hooks.
func (cl *Client) sent(pk *packets.Packet, b []byte, n int64) {
	atomic.AddInt64(&cl.ops.info.BytesSent, n)
	atomic.AddInt64(&cl.ops.info.PacketsSent, 1)
	cl.Net.Stats.BytesSent.Add(n) // gateway patch 31
	if pk.FixedHeader.Type == packets.Publish {
		atomic.AddInt64(&cl.ops.info.MessagesSent, 1)
		cl.Net.Stats.MessagesSent.Add(1)
	}

	if cl.ops.hooks.provided(OnPacketSent) { // gateway patch 34: no packet copy for no hook
		cl.ops.hooks.OnPacketSent(cl, *pk, b)
	}
}

// refused reports whether a packet of type typ may no longer be written:
// after a failed write nothing is, after a takeover only the DISCONNECT
// [MQTT-3.14.4-1] (gateway patch).
func (cl *Client) refused(typ byte) bool {
	return cl.State.writesDone.Load() || cl.Net.ending.Load() == writesEnded || (cl.State.takenOver.Load() && typ != packets.Disconnect)
}

// writeEncoded writes one encoded packet of type typ (gateway patch: under
// wmu, not the client lock; see ClientConnection). While more packets are
// queued behind it, it is batched in outbuf up to the write buffer size; a
// DISCONNECT is always written at once. With wait false and another write
// in progress, it does not wait: a DISCONNECT is left for that write's
// goroutine to write after it (writePending), anything else is refused
// with ErrWriteBusy. A failed write ends the connection (failWrites).
// With writeHold it stays in outbuf for the reader to flush (patch 26).
func (cl *Client) writeEncoded(b []byte, typ byte, mode writeMode) (int64, error) {
	if mode != writeNoWait {
		cl.Net.wmu.Lock()
	} else if !cl.Net.wmu.TryLock() {
		if typ != packets.Disconnect {
			return 0, ErrWriteBusy
		}
		p := bytes.Clone(b) // written later by another goroutine; b's buffer goes back to the pool
		cl.Net.pending.Store(&p)
		cl.writePending()
		return int64(len(b)), nil
	}
	var n int64
	var err error
	if cl.refused(typ) { // again under wmu: a takeover may have come since
		err = ErrConnectionClosed
	} else if n, err = cl.writeLocked(b, typ == packets.Disconnect, mode == writeHold); err != nil {
		cl.failWrites(err)
	}
	cl.Net.wmu.Unlock()
	cl.writePending()
	return n, err
}

// writePending writes a DISCONNECT a write that must not wait left, if
// wmu is free, and then ends the writes of a stopped client (gateway patch
// 18: endWrites); whoever holds wmu calls it again once done, so neither is
// stranded.
func (cl *Client) writePending() {
	for cl.Net.pending.Load() != nil || cl.Net.ending.Load() == stopping {
		if !cl.Net.wmu.TryLock() {
			return
		}
		if p := cl.Net.pending.Swap(nil); p != nil && !cl.State.writesDone.Load() {
			if _, err := cl.writeLocked(*p, true, false); err != nil {
				cl.failWrites(err)
			}
		}
		if cl.Net.ending.Load() == stopping {
			cl.endWrites()
		}
		cl.Net.wmu.Unlock()
	}
}

// writeLocked writes b, or batches it in outbuf while more packets are
// queued or hold is set (patch 26: the reader flushes) and flush is not.
// The caller holds wmu.
func (cl *Client) writeLocked(b []byte, flush, hold bool) (int64, error) {
	if (cl.State.outbound.Len() == 0 && !hold) || flush {
		if cl.Net.outbuf == nil {
			return cl.writeOut(b)
		}
		// first write to buffer, then flush buffer
		n, _ := cl.Net.outbuf.Write(b) // will always be successful
		return int64(n), cl.flushOutbuf()
	}

	// there are more writes in the queue
	if cl.Net.outbuf == nil {
		if len(b) >= cl.ops.options.ClientNetWriteBufferSize {
			return cl.writeOut(b)
		}
		cl.Net.outbuf = writeBufs.Get() // gateway patch 21: was new(bytes.Buffer), per batch
	}

	n, _ := cl.Net.outbuf.Write(b) // will always be successful
	if cl.Net.outbuf.Len() < cl.ops.options.ClientNetWriteBufferSize {
		return int64(n), nil
	}
	return int64(n), cl.flushOutbuf()
}

// writeChunk is the most written to the socket under one write deadline.
const writeChunk = 64 << 10

// writeOut writes b to the socket under Options.WriteTimeout (gateway
// patch): a client that stops reading is disconnected once a write has
// waited that long, instead of holding its writer, and everything queued
// behind it, for ever. The timeout bounds a stall, not a whole packet: a
// large packet is written in chunks of writeChunk, each with a deadline of
// its own, so a client that reads slowly but steadily is not cut off.
// Setting a deadline costs a timer update, so for small writes it is set
// again only once half of it has gone (each has between half of
// WriteTimeout and all of it). The caller holds wmu.
func (cl *Client) writeOut(b []byte) (int64, error) {
	t := cl.ops.options.WriteTimeout
	big := len(b) > writeChunk
	var n int64
	defer cl.Net.inWrite.Store(0)
	for len(b) > 0 {
		if t > 0 {
			now := time.Now()
			if big || now.UnixNano() >= cl.Net.writeRearm {
				_ = cl.Net.Conn.SetWriteDeadline(now.Add(t))
				cl.Net.writeRearm = now.Add(t / 2).UnixNano()
				cl.keepCloseDeadline(now.Add(t)) // gateway patch 20
			}
		}
		cl.Net.inWrite.Store(monoNow()) // gateway patch 37
		m, err := cl.Net.Conn.Write(b[:min(len(b), writeChunk)])
		n += int64(m)
		b = b[m:]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// flushOutbuf writes what is buffered; the caller holds wmu.
func (cl *Client) flushOutbuf() (err error) {
	if cl.Net.outbuf == nil {
		return
	}

	_, err = cl.writeOut(cl.Net.outbuf.Bytes())
	if err == nil {
		writeBufs.Put(cl.Net.outbuf)
		cl.Net.outbuf = nil
	}
	return
}
