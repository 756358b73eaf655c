package metrics

import (
	"testing"
	"time"
)

// gathered returns the value of each series of family name in m's registry:
// counters by value, histograms by sample count.
func gathered(t *testing.T, m *Metrics, name string) []float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			if h := x.GetHistogram(); h != nil {
				out = append(out, float64(h.GetSampleCount()))
			} else {
				out = append(out, x.GetCounter().GetValue())
			}
		}
	}
	return out
}

// An Outlet counts into the same series as Out.
func TestOutletCountsLikeOut(t *testing.T) {
	m := New()
	o := m.Outlet("mqtt")
	m.Out("mqtt", time.Now())
	o.Out(time.Now().Add(-time.Millisecond))
	o.Out(time.Time{}) // counted, no latency
	if got := gathered(t, m, "tolsey_messages_out_total"); len(got) != 1 || got[0] != 3 {
		t.Fatalf("messages out = %v, want one series at 3", got)
	}
	if got := gathered(t, m, "tolsey_publish_to_deliver_seconds"); len(got) != 1 || got[0] != 2 {
		t.Fatalf("latency samples = %v, want one series with 2", got)
	}
	var nilM *Metrics
	nilM.Outlet("mqtt").Out(time.Now()) // records nothing, does not panic
	if n := testing.AllocsPerRun(100, func() { o.Out(time.Now()) }); n != 0 {
		t.Fatalf("Outlet.Out allocates %v times", n)
	}
}

func BenchmarkOut(b *testing.B) {
	m := New()
	created := time.Now()
	b.Run("Metrics.Out", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Out("mqtt", created)
		}
	})
	b.Run("Outlet.Out", func(b *testing.B) {
		o := m.Outlet("mqtt")
		b.ReportAllocs()
		for b.Loop() {
			o.Out(created)
		}
	})
}
