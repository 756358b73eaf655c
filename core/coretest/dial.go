package coretest

import (
	"net"
	"testing"
	"time"
)

// DialFrom opens a TCP connection to addr from the local address from,
// closed when the test ends. Linux routes all of 127.0.0.0/8 to the
// loopback interface, so tests of per-address limits dial from 127.0.0.2,
// 127.0.0.3, ... to be distinct clients.
func DialFrom(t testing.TB, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
