package retaintest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
	"github.com/tolsey/tolsey/retain"
)

// MemTestEnv enables the per-message memory measurements (slow, 1M
// messages); CI does not set it.
const MemTestEnv = "TOLSEY_MEMTEST"

// BenchTopic is the i-th topic of the benchmark layout: 100 topics per
// group, so "bench/<g>/+" matches exactly 100 whatever the total.
func BenchTopic(i int) string { return "bench/" + strconv.Itoa(i/100) + "/" + strconv.Itoa(i%100) }

// BenchPayload is the 64-byte payload of the benchmarks.
var BenchPayload = []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")

// BenchMessage is the i-th benchmark message: topic BenchTopic(i), a 64-byte
// payload, what an MQTT front-end sets, no expiry.
func BenchMessage(i int) *core.Message {
	return &core.Message{
		Topic:   BenchTopic(i),
		Payload: BenchPayload,
		QoS:     1,
		Retain:  true,
		Created: time.Unix(1700000000, 0),
		Origin:  core.Origin{Protocol: core.ProtocolMQTT, Node: "n1"},
	}
}

// BenchMatch measures Match of 100 topics out of total (loaded as
// BenchMessage(0..total-1)) and reports the p99 latency.
func BenchMatch(b *testing.B, s retain.Store, total int) {
	groups := max(total/100, 1)
	filters := make([]string, 1024)
	for i := range filters {
		filters[i] = "bench/" + strconv.Itoa(i*7919%groups) + "/+"
	}
	ctx := context.Background()
	var lat []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n := 0
		start := time.Now()
		err := s.Match(ctx, filters[i%len(filters)], func(*core.Message) bool { n++; return true })
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if n != min(100, total) {
			b.Fatalf("matched %d", n)
		}
		i++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchSet measures Set of 64-byte messages from 32 goroutines per CPU over
// 10,000 topics (replacing once they have all been set): a gateway with many
// publishers, whose Sets a batching store can commit together.
func BenchSet(b *testing.B, s retain.Store) {
	b.SetParallelism(32)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Set(ctx, BenchMessage(int(next.Add(1)%10_000))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// MemStats is a process's memory at one point.
type MemStats struct {
	Heap uint64 // live heap after GC, bytes
	RSS  uint64 // resident set, bytes
}

// ReadMem collects garbage, returns freed memory to the OS and reads the
// live heap and VmRSS.
func ReadMem(t testing.TB) MemStats {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return MemStats{Heap: ms.HeapAlloc, RSS: rss(t)}
}

func rss(t testing.TB) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// ReportPerMessage logs and returns the growth from before to after per
// message, in bytes.
func ReportPerMessage(t testing.TB, what string, n int, before, after MemStats) (heap, rss float64) {
	heap = (float64(after.Heap) - float64(before.Heap)) / float64(n)
	rss = (float64(after.RSS) - float64(before.RSS)) / float64(n)
	msg := fmt.Sprintf("%s: %d messages of %d B: heap %.0f B/msg, RSS %.0f B/msg (RSS total %.0f MiB)",
		what, n, len(BenchPayload), heap, rss, float64(after.RSS)/(1<<20))
	t.Log(msg)
	fmt.Println(msg)
	return heap, rss
}

// SkipUnlessMemTest skips memory measurements unless MemTestEnv is set.
func SkipUnlessMemTest(t testing.TB) {
	if os.Getenv(MemTestEnv) == "" {
		t.Skip("set " + MemTestEnv + "=1 to measure memory per retained message (1M messages)")
	}
}
