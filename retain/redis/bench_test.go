package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tolsey/tolsey/core/codec"
	"github.com/tolsey/tolsey/retain"
	"github.com/tolsey/tolsey/retain/redistest"
	"github.com/tolsey/tolsey/retain/retaintest"
)

// bulkLoad writes n benchmark messages under prefix straight into Redis in
// pipelines, as another gateway would have left them; Open then rebuilds
// its index by SCAN.
func bulkLoad(tb testing.TB, addr, prefix string, n int) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	const perPipe = 10_000
	for lo := 0; lo < n; lo += perPipe {
		p := c.Pipeline()
		for i := lo; i < min(lo+perPipe, n); i++ {
			m := retaintest.BenchMessage(i)
			p.Set(ctx, prefix+"msg:"+m.Topic, codec.Encode(m), 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}

func usedMemory(tb testing.TB, addr string) int64 {
	v, ok := infoField(tb, addr, "memory", "used_memory:")
	if !ok {
		tb.Fatal("no used_memory")
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func BenchmarkMatch(b *testing.B) {
	srv := redistest.Start(b)
	for _, total := range []int{10_000, 1_000_000} {
		p := newPrefix()
		bulkLoad(b, srv.Addr, p, total)
		start := time.Now()
		s := open(b, srv.URL(), p, retain.Limits{})
		if s.Stats().Count != total {
			b.Fatalf("index holds %d of %d", s.Stats().Count, total)
		}
		b.Logf("index of %d rebuilt by SCAN in %v", total, time.Since(start))
		b.Run(fmt.Sprintf("total=%d/matches=100", total), func(b *testing.B) { retaintest.BenchMatch(b, s, total) })
	}
}

// BenchmarkSet stores from many goroutines at once, as a bridge or many
// MQTT publishers do, and reports the CPU each Set costs this process and
// redis-server: on a shared machine those are steadier than ns/op.
func BenchmarkSet(b *testing.B) {
	srv := redistest.Start(b)
	s := open(b, srv.URL(), newPrefix(), retain.Limits{})
	redis0, self0 := redisCPU(b, srv.Addr), selfCPU()
	retaintest.BenchSet(b, s)
	b.ReportMetric(float64(redisCPU(b, srv.Addr)-redis0)/float64(time.Microsecond)/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64(selfCPU()-self0)/float64(time.Microsecond)/float64(b.N), "self-µs/op")
}

// redisCPU is redis-server's CPU time so far (INFO cpu).
func redisCPU(tb testing.TB, addr string) time.Duration {
	var total time.Duration
	for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
		v, ok := infoField(tb, addr, "cpu", f)
		if !ok {
			tb.Fatalf("no %s in INFO cpu", f)
		}
		sec, _ := strconv.ParseFloat(v, 64)
		total += time.Duration(sec * float64(time.Second))
	}
	return total
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func infoField(tb testing.TB, addr, section, field string) (string, bool) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			return v, true
		}
	}
	return "", false
}

func TestMemoryPerMessage(t *testing.T) {
	retaintest.SkipUnlessMemTest(t)
	const n = 1_000_000
	srv := redistest.Start(t)
	p := newPrefix()
	redisBefore := usedMemory(t, srv.Addr)
	bulkLoad(t, srv.Addr, p, n)
	redisAfter := usedMemory(t, srv.Addr)
	before := retaintest.ReadMem(t)
	start := time.Now()
	s := open(t, srv.URL(), p, retain.Limits{})
	rebuilt := time.Since(start)
	after := retaintest.ReadMem(t)
	if s.Stats().Count != n {
		t.Fatal("not all indexed")
	}
	_, rss := retaintest.ReportPerMessage(t, "redis (gateway side: topic index only)", n, before, after)
	msg := fmt.Sprintf("redis (redis-server used_memory): %.0f B/msg; index rebuilt by SCAN in %v",
		float64(redisAfter-redisBefore)/n, rebuilt)
	t.Log(msg)
	fmt.Println(msg)
	if rss > 1024 {
		t.Errorf("%.0f B of RSS per message, budget 1 KiB", rss)
	}
}
