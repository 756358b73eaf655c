// Package console is the gateway's web console: one HTML page, plain ES
// modules and a style sheet, embedded in the binary and served by the
// admin listener at "/" (docs/console.md). It holds no data and knows no
// gateway type: the pages run in the browser and call the admin API
// (/api/v1/...) with the operator's bearer token, so everything they can
// do, curl can do, and the API's token check is the only gate.
//
// It must not import the gateway or any part of it (test/arch): the
// admin server wraps its handler with this one, nothing more.
package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// Prefix is where the assets are served; "/" serves index.html.
const Prefix = "/console/"

// csp keeps the page to its own origin: no inline script, no CDN, no
// framing. A token in sessionStorage is worth protecting from injected
// script; the pages build the DOM with textContent, never innerHTML.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// modTime is the same for every asset (embed keeps none): the binary's
// start, so a new binary's assets are fetched again after a restart.
var modTime = time.Now()

// Handler serves GET and HEAD of "/" and of Prefix+<asset> from the
// embedded files, without asking for a token (they hold no data; the API
// calls they make do ask), and hands every other request to api.
//
// A path under Prefix is answered here whatever it is, 404 when it names
// no asset: "/console/../api/v1/x" is not cleaned into an API path that
// would then skip the token check in front of api.
func Handler(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			api.ServeHTTP(w, r)
			return
		}
		var name string
		switch {
		case r.URL.Path == "/":
			name = "index.html"
		case strings.HasPrefix(r.URL.Path, Prefix):
			name = strings.TrimPrefix(r.URL.Path, Prefix)
		default:
			api.ServeHTTP(w, r)
			return
		}
		serve(w, r, name)
	})
}

func serve(w http.ResponseWriter, r *http.Request, name string) {
	b, err := fs.ReadFile(assets, "assets/"+name)
	if !fs.ValidPath(name) || err != nil {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// Revalidated every time (Last-Modified answers 304): a console
	// half from the old binary and half from the new one would break.
	h.Set("Cache-Control", "no-cache")
	switch path.Ext(name) {
	case ".js":
		// Module scripts need a JavaScript type (HTML, "fetch a single
		// module script"); the system's MIME table may not say so.
		h.Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		h.Set("Content-Type", "text/css; charset=utf-8")
	case ".html":
		h.Set("Content-Type", "text/html; charset=utf-8")
	case ".svg":
		h.Set("Content-Type", "image/svg+xml")
	}
	http.ServeContent(w, r, name, modTime, bytes.NewReader(b))
}
