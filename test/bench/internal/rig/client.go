package rig

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// Connect opens an MQTT 5 session (clean start) with paho.golang; onMsg,
// if set, is called on paho's reader goroutine for every PUBLISH received.
// QoS 1/2 acks may wait up to an hour (paho's PacketTimeout): a fence
// publish can queue behind a long pipelined backlog. Keepalive is off: a
// PINGREQ would queue behind that backlog too, and paho closes the
// connection when its PINGRESP is late.
func Connect(ctx context.Context, addr, id string, onMsg func(*paho.Publish)) (*paho.Client, error) {
	return ConnectWith(ctx, addr, id, Login{}, onMsg)
}

// Login is how ConnectWith connects: over TLS when TLS is set, with a user
// name and password when User is set.
type Login struct {
	TLS            *tls.Config
	User, Password string
}

// ConnectWith is Connect over TLS and/or with credentials.
func ConnectWith(ctx context.Context, addr, id string, login Login, onMsg func(*paho.Publish)) (*paho.Client, error) {
	var conn net.Conn
	var err error
	if login.TLS != nil {
		d := tls.Dialer{Config: login.TLS}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{ClientID: id, Conn: &bufConn{Conn: conn, r: bufio.NewReaderSize(conn, 16<<10)}, PacketTimeout: time.Hour}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			onMsg(pr.Packet)
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 0}
	if login.User != "" {
		cp.Username, cp.UsernameFlag = login.User, true
		cp.Password, cp.PasswordFlag = []byte(login.Password), true
	}
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect %s: %w", id, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	return c, nil
}

// Subscribe subscribes c to filter and checks the SUBACK.
func Subscribe(ctx context.Context, c *paho.Client, filter string, qos byte) error {
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		return fmt.Errorf("subscribe %s refused: %v", filter, sa.Reasons)
	}
	return nil
}

// bufConn buffers reads: paho.golang reads each packet header byte by byte
// straight from its Conn, a syscall per byte, which would make the client,
// not the server, the bottleneck. Wrapping the conn hides *net.TCPConn's
// writev from net.Buffers, so a packet is several Writes; paho takes the
// sync.Locker we offer around each packet so they never interleave.
type bufConn struct {
	net.Conn
	sync.Mutex
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
