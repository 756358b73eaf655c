package rig

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RSS is the child's resident set size in bytes (VmRSS).
func (c *Child) RSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.PID))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", c.PID)
}

// CPU is the child's user+system CPU time so far (from /proc/PID/stat,
// assuming the usual 100 clock ticks per second).
func (c *Child) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.PID))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", c.PID)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/%d/stat", c.PID)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// SettledRSS waits until RSS stops moving (less than 1% over 2 s, at most
// maxWait) so that a collection in flight and the scavenger have had their
// say, and returns it. Nobody can force a GC in the gateway from outside, so
// both servers get the same treatment: time.
func (c *Child) SettledRSS(maxWait time.Duration) (int64, error) {
	deadline := time.Now().Add(maxWait)
	prev, err := c.RSS()
	if err != nil {
		return 0, err
	}
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		cur, err := c.RSS()
		if err != nil {
			return 0, err
		}
		d := cur - prev
		if d < 0 {
			d = -d
		}
		if float64(d) < 0.01*float64(prev) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// Metrics scrapes the gateway's /metrics and returns the samples without
// labels (name → value), e.g. go_memstats_heap_inuse_bytes.
func (c *Child) Metrics() (map[string]float64, error) {
	if c.Admin == "" {
		return nil, fmt.Errorf("%s has no admin API", c.Name)
	}
	resp, err := http.Get("http://" + c.Admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.Contains(line, "{") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// Percentile returns the p-th percentile (0-100) of sorted durations
// (nearest rank).
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// Sorted returns a sorted copy of ds.
func Sorted(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

// MiB formats bytes as MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Ms formats a duration in milliseconds.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// IntList parses a flag's comma-separated list of integers, each at least
// least.
func IntList(s string, least int) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < least {
			return nil, fmt.Errorf("bad number %q in %q (at least %d)", p, s, least)
		}
		out = append(out, v)
	}
	return out, nil
}

// SaveHeapProfile fetches the gateway's allocation profile (admin
// /debug/pprof/allocs: allocations since it started) into file. Two of
// them, before and after a phase, give the phase's allocations:
// go tool pprof -sample_index=alloc_objects -diff_base before after.
func SaveHeapProfile(admin, file string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/allocs", admin))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ProfileGateway fetches a CPU profile of the gateway whose admin API is
// at admin (/debug/pprof) over d into file, in the background; the
// returned channel says when it is written.
func ProfileGateway(admin string, d time.Duration, file string) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, max(int(d.Seconds()), 1)))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return done
}
