// Command soak is drill 8 of docs/reliability.md: it builds the
// gateway, finds the maximum rate of a mixed load with a short probe, then
// holds half of it for an hour on a fresh gateway (embedded retained store,
// durable queue, persistent MQTT sessions in the embedded store) while it
// samples the gateway's RSS, goroutines and open fds every 10 s. At the
// end it prints the slopes (least squares over the second half, per hour),
// the messages lost (must be 0), the errors and the gateway's WARN/ERROR
// log lines.
//
//	go run ./test/fault/cmd/soak                       # probe 20 s, soak 1 h
//	go run ./test/fault/cmd/soak -duration 2m -csv /tmp/soak.csv
//	go run ./test/fault/cmd/soak -duration 1m -online 300ms -offline 200ms  # many session takeovers
//
// ^C ends the soak early and still reports.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tolsey/tolsey/test/fault/soak"
	"github.com/tolsey/tolsey/test/internal/gwproc"
)

func main() {
	duration := flag.Duration("duration", time.Hour, "how long the soak runs")
	probe := flag.Duration("probe", 20*time.Second, "how long the max-rate probe runs")
	sample := flag.Duration("sample", 10*time.Second, "between samples")
	csvPath := flag.String("csv", "", "write the samples to this CSV file")
	online := flag.Duration("online", 20*time.Second, "how long the persistent subscribers stay online at a time")
	offline := flag.Duration("offline", 5*time.Second, "how long they stay offline at a time")
	flag.Parse()
	cycle = [2]time.Duration{*online, *offline}
	if err := run(*duration, *probe, *sample, *csvPath); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// cycle is the persistent subscribers' online and offline times.
var cycle [2]time.Duration

func run(duration, probe, sample time.Duration, csvPath string) error {
	dir, err := os.MkdirTemp("", "soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := gwproc.ModuleRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "gateway")
	if err := gwproc.BuildInto(root, bin); err != nil {
		return err
	}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "\nstopping the load early")
		close(stop)
	}()

	fmt.Printf("probe: %v of the mixed load as fast as it goes\n", probe)
	pr, _, err := once(bin, filepath.Join(dir, "probe"), soak.Config{Duration: probe, Sample: probe, Drain: 30 * time.Second, Stop: stop})
	if err != nil {
		return err
	}
	max := pr.Delivered()
	fmt.Printf("probe: delivered %v; errors %d, lost %d\n", max, pr.Errors, pr.Lost())
	rates := max.Half()
	fmt.Printf("soak: %v at %v\n", duration, rates)

	cfg := soak.Config{Duration: duration, Sample: sample, Rates: rates, Progress: os.Stdout, Stop: stop}
	if csvPath != "" {
		f, err := os.Create(csvPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.CSV = f
	}
	res, code, err := once(bin, filepath.Join(dir, "soak"), cfg)
	if err != nil {
		return err
	}
	report(res, rates, code)
	if res.Lost() != 0 || res.Errors != 0 || res.Log.Error != 0 {
		return errors.New("lost messages, errors or ERROR log lines (above)")
	}
	return nil
}

// once runs cfg against a fresh gateway whose data.dir is data, then
// stops it with SIGTERM and returns its exit code.
func once(bin, data string, cfg soak.Config) (*soak.Result, int, error) {
	cfg.Queue = "soak"
	cfg.Online, cfg.Offline = cycle[0], cycle[1]
	p, err := gwproc.Launch(bin, "--data.dir="+data, "--amqp.listen=127.0.0.1:0", "--retain.backend=embedded",
		"--mqtt.sessions.backend=embedded", `--queues.declare=[{"name":"soak"}]`)
	if err != nil {
		if p != nil {
			p.Kill()
		}
		return nil, 0, err
	}
	defer p.Kill()
	cfg.MQTT, cfg.AMQP, cfg.Admin, cfg.PID, cfg.Log = p.MQTT, p.AMQP, p.Admin, p.Cmd.Process.Pid, p.Lines
	res, err := soak.Run(cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("%w\ngateway output (tail):\n%s", err, tail(p.Output(), 30))
	}
	code, _ := p.Term(30 * time.Second)
	res.Log = soak.CountLog(p.Lines()) // with what the shutdown logged
	return res, code, nil
}

func report(r *soak.Result, rates soak.Rates, exit int) {
	fmt.Printf("\n== soak: %v of load at %v\n", r.Elapsed.Round(time.Second), rates)
	fmt.Printf("%-11s %10s %10s %7s %6s %6s %9s\n", "flow", "sent", "got", "errors", "lost", "dups", "got/s")
	for _, f := range r.Flows {
		lost := "-"
		if f.Receivers > 0 {
			lost = fmt.Sprint(f.Lost)
		}
		fmt.Printf("%-11s %10d %10d %7d %6s %6d %9.0f\n", f.Name, f.Sent, f.Got, f.Errors, lost, f.Dups, f.Rate(r.Elapsed))
		if f.Lost > 0 {
			fmt.Printf("  lost: %s\n", f.LostDesc)
		}
	}
	fmt.Printf("churn connections: %d (%.1f/s)\n", r.Churned, float64(r.Churned)/r.Elapsed.Seconds())
	if len(r.Samples) > 0 {
		first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
		var peak int64
		for _, s := range r.Samples {
			peak = max(peak, s.RSS)
		}
		fmt.Printf("RSS: before load %s, first sample %s, last %s, peak %s; slope %s/h\n", soak.MiB(float64(r.Before.RSS)),
			soak.MiB(float64(first.RSS)), soak.MiB(float64(last.RSS)), soak.MiB(float64(peak)), soak.MiB(r.Slopes.RSS))
		fmt.Printf("goroutines: before %d, first %d, last %d, after %d; slope %.1f/h\n", r.Before.Goroutines, first.Goroutines,
			last.Goroutines, r.After.Goroutines, r.Slopes.Goroutines)
		fmt.Printf("fds: before %d, first %d, last %d, after %d; slope %.1f/h\n", r.Before.FDs, first.FDs, last.FDs, r.After.FDs, r.Slopes.FDs)
		fmt.Printf("slopes fitted over the last %v (%d samples in all)\n", r.Slopes.Over.Round(time.Second), len(r.Samples))
	}
	fmt.Printf("RSS after the load, clients gone: %s\n", soak.MiB(float64(r.After.RSS)))
	fmt.Printf("client errors: %d\n", r.Errors)
	for _, e := range r.FirstErrors {
		fmt.Printf("  %s\n", e)
	}
	fmt.Printf("gateway log: %v\n", r.Log)
	fmt.Printf("gateway exit code after SIGTERM: %d\n", exit)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
