package gateway

import (
	"context"
	"os"
	"sync"
	"time"
)

// watchTLS reloads a TLS section when one of its files changes
// (tls.watch, docs/tls.md "Reload"), so that a rotation by cert-manager
// (a Kubernetes secret volume swaps its files at once) or certbot takes
// effect without a signal. Every interval it stats the files of each
// section (size and modification time, through symlinks); a section whose
// files changed is reloaded as SIGHUP would. A certificate written before
// its key fails to load (the pair does not match): the old pair stays and
// the section is tried again at the next check, until the files load or
// change again; the error is logged once per set of files, not every tick.
// One goroutine, ended by Stop.
func (g *Gateway) watchTLS(interval time.Duration) {
	if interval <= 0 || len(g.tls) == 0 {
		return
	}
	seen := make([]string, len(g.tls))   // the fingerprint loaded last
	failed := make([]string, len(g.tls)) // the fingerprint whose reload failed last
	for i, h := range g.tls {
		seen[i] = fingerprint(h.files)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			for i, h := range g.tls {
				fp := fingerprint(h.files)
				if fp == seen[i] {
					continue
				}
				g.reloadMu.Lock()
				err := h.cfg.Reload()
				g.reloadMu.Unlock()
				if err != nil {
					if fp != failed[i] {
						failed[i] = fp
						g.log.Warn("tls.watch: changed TLS files do not load yet, keeping the ones in use", "error", tlsKeyError(h.prefix, err))
					}
					continue
				}
				seen[i], failed[i] = fp, ""
				g.log.Info("tls.watch: TLS files changed, reloaded", "section", h.prefix)
			}
		}
	}()
	g.onStop(func(context.Context) error {
		close(done)
		wg.Wait()
		return nil
	})
}

// fingerprint is the size and modification time of each file ("-" for one
// that cannot be read now, as in the middle of a rotation).
func fingerprint(files []string) string {
	var b []byte
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			b = append(b, '-', 0)
			continue
		}
		b = fi.ModTime().AppendFormat(b, time.RFC3339Nano)
		b = append(b, ' ')
		b = append(b, []byte(time.Duration(fi.Size()).String())...)
		b = append(b, 0)
	}
	return string(b)
}
