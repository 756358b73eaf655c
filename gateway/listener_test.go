//go:build linux

package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core/coretest"
)

// A listener whose socket stops working under it (shut down: accept then
// fails with EINVAL, an error no retry cures) makes /readyz answer 503
// naming it, and is logged at error level (the MQTT
// listener's accept loop used to end silently, with /readyz still 200).
// The admin listener serves /readyz itself: when it dies, Ready says so to
// whoever asks in the process, and the log says so at error level.
func TestDeadListenerFailsReadiness(t *testing.T) {
	for _, tc := range []struct {
		listener string
		addr     func(*Gateway) string
	}{
		{"mqtt-tcp", (*Gateway).MQTTAddr},
		{"mqtt-ws", (*Gateway).MQTTWSAddr},
		{"amqp", (*Gateway).AMQPAddr},
		{"admin", (*Gateway).AdminAddr},
		{"mqtt-tls", (*Gateway).MQTTTLSAddr},
		{"mqtt-wss", (*Gateway).MQTTWSSAddr},
		{"amqp-tls", (*Gateway).AMQPTLSAddr},
	} {
		t.Run(tc.listener, func(t *testing.T) {
			var log coretest.SyncBuffer
			// Every TLS listener too (args turns amqp.listen on).
			g := New(testConfig(t, newTLSFixture(t).args("none")...), slog.New(slog.NewJSONHandler(&log, nil)))
			if err := g.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := g.Stop(ctx); err != nil {
					t.Errorf("Stop after a listener died: %v", err)
				}
			}()
			if code, body := get(t, g, "/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz before: %d %s", code, body)
			}
			// Retried failures are counted, per listener, from the start.
			if _, body := get(t, g, "/metrics"); !strings.Contains(body, `tolsey_accept_failures_total{listener="`+tc.listener+`"} 0`) {
				t.Errorf("no accept failure counter for %s in /metrics", tc.listener)
			}

			shutdownListener(t, tc.addr(g))

			if tc.listener == "admin" {
				coretest.Eventually(t, "Ready to report the admin listener", 10*time.Second, func() bool {
					err := g.Ready()
					return err != nil && strings.Contains(err.Error(), "listener admin on ")
				})
			} else {
				coretest.Eventually(t, "/readyz to answer 503 naming "+tc.listener, 10*time.Second, func() bool {
					code, body := get(t, g, "/readyz")
					if code == http.StatusServiceUnavailable && strings.Contains(body, "listener "+tc.listener+" on ") {
						t.Logf("/readyz: %d %s", code, body)
						return true
					}
					return false
				})
			}
			logged := false
			for _, line := range strings.Split(log.String(), "\n") {
				logged = logged || strings.Contains(line, `"level":"ERROR","msg":"listener stopped accepting connections"`) &&
					strings.Contains(line, `"listener":"`+tc.listener+`"`)
			}
			if !logged {
				t.Errorf("no error line naming %s:\n%s", tc.listener, log.String())
			}
		})
	}
}

// get GETs path from the admin API.
func get(t *testing.T, g *Gateway, path string) (int, string) {
	t.Helper()
	return call(t, g, "GET", path, "")
}

// shutdownListener finds this process's listening socket bound to addr and
// shuts it down (shutdown(2)): the socket stays open, so the server's
// accept wakes up with EINVAL instead of the net.ErrClosed it would see if
// anything of ours had closed it.
func shutdownListener(t *testing.T, addr string) {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if on, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err != nil || on != 1 {
			continue // not a listening socket
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		if a, ok := sa.(*syscall.SockaddrInet4); ok && a.Port == port {
			if err := syscall.Shutdown(fd, syscall.SHUT_RDWR); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no listening socket on %s", addr)
}
