// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package mqtt

import "github.com/mochi-mqtt/server/v2/packets"

// Acks the reader writes go out together at the end of its burst (gateway
// patch 26).
//
// A QoS 1 publisher's PUBLISHes arrive several per read, and the reader
// wrote each one's PUBACK with a system call of its own: ~1 write per
// message in test/bench/mqttload's QoS 1 scenarios, where the deliveries
// to subscribers, batched by the writer, cost 0.04. While readBurst runs
// (the packets handled are those already received), an ack the reader
// writes itself is left in outbuf, in order with everything written there,
// and the burst's end writes them all at once: nothing waits for bytes
// that have not arrived (before a read of a packet not yet whole in the
// read buffer, or of input that is only a WebSocket control frame, the
// held acks are written: nextBuffered). Every write made meanwhile (the writer's, a
// DISCONNECT) writes what outbuf holds first. The reader flushes before it
// waits for ack room (readStops), and after heldAcksMax acks, so a long
// burst does not keep a publisher waiting for its window back.

// heldAcksMax is the most acks the reader holds before it writes them.
const heldAcksMax = 64

// heldAcks is owned by the client's reader (the goroutine in readBurst).
type heldAcks struct {
	on bool // readBurst runs: writeAck holds what it writes at once otherwise
	n  int  // acks held in outbuf since the last flushHeld
}

// writeReaderAck writes ack, the PUBACK/PUBREC the reader answers an
// inbound PUBLISH with: held for the rest of the burst while readBurst
// runs, at once otherwise (a packet handled by a direct call).
func (cl *Client) writeReaderAck(ack packets.Packet) error {
	if !cl.State.held.on {
		return cl.WritePacket(ack)
	}
	if err := cl.writePacketMode(ack, writeHold); err != nil {
		return err
	}
	if cl.State.held.n++; cl.State.held.n >= heldAcksMax {
		return cl.flushHeld()
	}
	return nil
}

// flushHeld writes the acks the reader holds, with whatever else outbuf
// has gathered (another goroutine's write may have sent them already). A
// failed write ends the connection (failWrites), as any write's does.
func (cl *Client) flushHeld() error {
	if cl.State.held.n == 0 {
		return nil
	}
	cl.State.held.n = 0
	var err error
	cl.Net.wmu.Lock()
	if !cl.refused(packets.Puback) {
		if err = cl.flushOutbuf(); err != nil {
			cl.failWrites(err)
		}
	}
	cl.Net.wmu.Unlock()
	cl.writePending()
	return err
}
