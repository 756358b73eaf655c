package gateway

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set at build time (docs/deploy.md, "Building"):
//
//	go build -ldflags "-X github.com/tolsey/tolsey/gateway.version=1.2.0 \
//	  -X github.com/tolsey/tolsey/gateway.commit=$(git rev-parse HEAD) \
//	  -X github.com/tolsey/tolsey/gateway.buildDate=$(date -u +%FT%TZ)" ./cmd/gateway
//
// Left empty, commit and date come from the VCS stamp the Go toolchain
// writes into binaries built inside a git checkout, so a plain `go build`
// still says which commit it is.
var (
	version   = "dev"
	commit    string
	buildDate string
)

// BuildInfo is what `gateway --version` prints and what tolsey_build_info
// labels.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"goVersion"`
	Modified  bool   `json:"modified,omitempty"` // built from a checkout with uncommitted changes
}

// Build returns the binary's build information.
func Build() BuildInfo {
	b := BuildInfo{Version: version, Commit: commit, Date: buildDate, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true" && commit == ""
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// String is the --version line.
func (b BuildInfo) String() string {
	c := b.Commit
	if b.Modified {
		c += "+modified"
	}
	return fmt.Sprintf("gateway (Tolsey) %s, commit %s, built %s, %s", b.Version, c, b.Date, b.GoVersion)
}

// buildInfoGauge is tolsey_build_info: constant 1, the build in its labels,
// so a dashboard can show which version every gateway runs.
func buildInfoGauge(b BuildInfo) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tolsey_build_info",
		Help: "Build of this gateway (value 1; version, commit, date and Go version in the labels).",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "date": b.Date, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
