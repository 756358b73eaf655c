package soak

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is one look at the gateway process and the load.
type Sample struct {
	At         time.Duration // since the load started
	RSS        int64         // bytes (VmRSS)
	Goroutines int           // go_goroutines from the admin API's /metrics
	FDs        int           // entries of /proc/<pid>/fd
	Sent, Got  int64         // all flows
	Errors     int64
	Churned    int64
}

// look samples the process pid and its admin API at admin.
func look(pid int, admin string) (Sample, error) {
	var s Sample
	var err error
	if s.RSS, err = rss(pid); err != nil {
		return s, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	s.Goroutines, err = goroutines(admin)
	return s, err
}

func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func goroutines(admin string) (int, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			_, _ = io.Copy(io.Discard, resp.Body)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no go_goroutines in %s/metrics", admin)
}

// slope is the least-squares slope of ys over xs (hours), per hour.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// Slopes are the least-squares slopes over the second half of the
// samples (the first half holds the warm-up: pools, caches, the heap
// finding its size), per hour.
type Slopes struct {
	RSS        float64 // bytes per hour
	Goroutines float64
	FDs        float64
	Over       time.Duration // the stretch they were fitted on
}

func fit(samples []Sample) Slopes {
	if len(samples) == 0 {
		return Slopes{}
	}
	half := samples[len(samples)-1].At / 2
	var xs, r, g, f []float64
	var from time.Duration = -1
	for _, s := range samples {
		if s.At < half {
			continue
		}
		if from < 0 {
			from = s.At
		}
		xs = append(xs, s.At.Hours())
		r = append(r, float64(s.RSS))
		g = append(g, float64(s.Goroutines))
		f = append(f, float64(s.FDs))
	}
	return Slopes{RSS: slope(xs, r), Goroutines: slope(xs, g), FDs: slope(xs, f),
		Over: samples[len(samples)-1].At - from}
}

var (
	logLevel = regexp.MustCompile(`\blevel=(WARN|ERROR)\b`)
	logMsg   = regexp.MustCompile(`\bmsg=("(?:[^"\\]|\\.)*"|\S+)`)
)

// LogLines counts the gateway's log lines at WARN and ERROR (text format)
// and how often each distinct "LEVEL msg" came.
type LogLines struct {
	Warn, Error int
	Distinct    map[string]int
}

// CountLog counts the WARN and ERROR lines of a gateway's text log.
func CountLog(lines []string) LogLines {
	l := LogLines{Distinct: map[string]int{}}
	for _, line := range lines {
		m := logLevel.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] == "WARN" {
			l.Warn++
		} else {
			l.Error++
		}
		msg := ""
		if mm := logMsg.FindStringSubmatch(line); mm != nil {
			msg = mm[1]
		}
		l.Distinct[m[1]+" "+msg]++
	}
	return l
}

func (l LogLines) String() string {
	keys := make([]string, 0, len(l.Distinct))
	for k := range l.Distinct {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "WARN %d, ERROR %d", l.Warn, l.Error)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %6d × %s", l.Distinct[k], k)
	}
	return b.String()
}

// MiB formats bytes as MiB with one decimal.
func MiB(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
