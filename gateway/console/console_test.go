package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

// Every file the page names (index.html's links, each module's imports)
// is embedded: a typo here is a blank console, and only the browser
// test would see it otherwise.
func TestEveryReferencedAssetIsEmbedded(t *testing.T) {
	refs := regexp.MustCompile(`(?:src|href)="/console/([^"]+)"|from '(\.{1,2}/[^']+)'`)
	n := 0
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(p, ".html") && !strings.HasSuffix(p, ".js")) {
			return err
		}
		b, err := fs.ReadFile(assets, p)
		if err != nil {
			return err
		}
		for _, m := range refs.FindAllStringSubmatch(string(b), -1) {
			target := "assets/" + m[1]
			if m[2] != "" {
				target = path.Join(path.Dir(p), m[2])
			}
			if _, err := fs.Stat(assets, target); err != nil {
				t.Errorf("%s names %s, which is not embedded", p, target)
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("only %d references found: the pattern no longer reads the assets", n)
	}
}

// The handler answers GET and HEAD of / and /console/*, with the CSP and
// a JavaScript type for modules; everything else goes to the API handler.
func TestHandler(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Handler(api)
	for _, c := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/console/js/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/console/style.css", 200, "text/css; charset=utf-8"},
		{"GET", "/console/icon.svg", 200, "image/svg+xml"},
		{"GET", "/console/", 404, ""},
		{"GET", "/console/js", 404, ""},
		{"GET", "/console/../api/v1/stats", 404, ""},
		{"GET", "/api/v1/stats", http.StatusTeapot, ""},
		{"GET", "/metrics", http.StatusTeapot, ""},
		{"POST", "/", http.StatusTeapot, ""},
		{"DELETE", "/console/js/app.js", http.StatusTeapot, ""},
	} {
		r := httptest.NewRequest(c.method, "http://x/", nil)
		r.URL.Path = c.path // as sent, uncleaned
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, w.Code, c.code)
			continue
		}
		if c.code == 200 {
			if got := w.Header().Get("Content-Type"); got != c.ctype {
				t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, got, c.ctype)
			}
			if !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'none'") {
				t.Errorf("%s %s: no CSP", c.method, c.path)
			}
		}
	}
}
