package amqp

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/core/coretest"
	"github.com/tolsey/tolsey/core/metrics"
	"github.com/tolsey/tolsey/core/queue"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is an in-process AMQP front-end on a free port with a real router
// and a memory retained store, stopped when the test ends.
type env struct {
	srv     *Server
	router  *core.Router
	queues  *queue.Engine // nil when a test's Options removed it
	store   retain.Store
	metrics *metrics.Metrics
	addr    string
}

func testLogger() *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("TOLSEY_TEST_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

func startServer(t testing.TB, mods ...func(*Options)) *env {
	t.Helper()
	store := memory.New(retain.Limits{})
	router := core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: store}, Node: "test-node"})
	met := metrics.New()
	eng, err := queue.New(context.Background(), queue.Options{Router: router, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Queues:         eng,
		Listen:         "127.0.0.1:0",
		Router:         router,
		Store:          store,
		Metrics:        met,
		Logger:         testLogger(),
		Node:           "test-node",
		MaxMessageSize: 16 << 20,
		IdleTimeout:    30 * time.Second,
		AllowAnonymous: true,
		Users:          map[string]string{"alice": "secret"},
	}
	for _, m := range mods {
		m(&opts)
	}
	st := opts.Store.(retain.Store) // a test's store is a whole one: its router writes it too
	if st != retain.Store(store) {
		router = core.NewRouter(core.RouterOptions{Retainer: retain.Retainer{Store: st}, Node: "test-node"})
		opts.Router = router
		if opts.Queues == eng {
			eng.Close()
			if eng, err = queue.New(context.Background(), queue.Options{Router: router, Logger: testLogger()}); err != nil {
				t.Fatal(err)
			}
			opts.Queues = eng
		}
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, router: router, queues: opts.Queues, store: st, metrics: met, addr: srv.Addr()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		eng.Close()
		store.Close()
	})
	return e
}

// dial connects a go-amqp client (SASL ANONYMOUS unless opts say
// otherwise) and closes it when the test ends.
func (e *env) dial(t testing.TB, opts *goamqp.ConnOptions) *goamqp.Conn {
	t.Helper()
	if opts == nil {
		opts = &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+e.addr, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// session opens a connection and a session on it.
func (e *env) session(t testing.TB) *goamqp.Session {
	t.Helper()
	c := e.dial(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	return s
}

func ctx5(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newReceiver(t testing.TB, s *goamqp.Session, source string, opts *goamqp.ReceiverOptions) *goamqp.Receiver {
	t.Helper()
	r, err := s.NewReceiver(ctx5(t), source, opts)
	if err != nil {
		t.Fatalf("receiver %q: %v", source, err)
	}
	return r
}

func newSender(t testing.TB, s *goamqp.Session, target string, opts *goamqp.SenderOptions) *goamqp.Sender {
	t.Helper()
	snd, err := s.NewSender(ctx5(t), target, opts)
	if err != nil {
		t.Fatalf("sender %q: %v", target, err)
	}
	return snd
}

func send(t testing.TB, snd *goamqp.Sender, m *goamqp.Message) {
	t.Helper()
	if err := snd.Send(ctx5(t), m, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func receive(t testing.TB, r *goamqp.Receiver) *goamqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	if err := r.AcceptMessage(ctx, m); err != nil {
		t.Fatalf("accept: %v", err)
	}
	return m
}

// body is a received message's payload, whatever section carried it.
func body(m *goamqp.Message) string {
	if m.Value != nil {
		switch v := m.Value.(type) {
		case string:
			return v
		case []byte:
			return string(v)
		}
	}
	return string(m.GetData())
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	coretest.Eventually(t, what, 10*time.Second, cond)
}

// dropped reads tolsey_messages_dropped_total{protocol="amqp",reason}.
func (e *env) dropped(reason string) float64 {
	var m dto.Metric
	if err := e.metrics.Dropped.WithLabelValues("amqp", reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
