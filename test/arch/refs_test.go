package arch

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// issueRef is a reference to a tracker issue by number (the word
// "issue" followed by a number). Issue numbers mean nothing to a reader of the repository:
// code and docs cite the document that holds the decision or the goal
// (docs/architecture.md, docs/queues.md, …) instead. Upstream trackers
// are cited as owner/repo#N, which this does not match.
var issueRef = regexp.MustCompile(`\b[Ii]ssues? #?[0-9]+\b`)

// textFile reports whether a file is one of ours that a reader reads:
// sources, scripts, docs and configuration.
func textFile(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".md", ".sh", ".py", ".js", ".mjs", ".yaml", ".yml", ".java", ".xml", ".html", ".css", ".json", ".toml":
		return true
	}
	return filepath.Base(name) == "run"
}

// TestNoIssueNumbers keeps tracker issue numbers out of the repository's
// code and docs (docs/architecture.md, "Decisions": cite the document).
// The vendored mochi-mqtt copy keeps upstream's own text.
func TestNoIssueNumbers(t *testing.T) {
	gomod := strings.TrimSpace(string(goList(t, ".", "env", "GOMOD")))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatal("not inside the module: go env GOMOD is empty")
	}
	root := filepath.Dir(gomod)
	skip := map[string]bool{".git": true, "node_modules": true, "third_party": true, "testdata": true}
	var found []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !textFile(path) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for n := 1; sc.Scan(); n++ {
			if m := issueRef.FindString(sc.Text()); m != "" {
				rel, _ := filepath.Rel(root, path)
				found = append(found, rel+":"+strconv.Itoa(n)+": "+m)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("rule: cite the document, not a tracker issue number (docs/architecture.md); found:\n  %s",
			strings.Join(found, "\n  "))
	}
}

func TestIssueRefPattern(t *testing.T) {
	for s, want := range map[string]bool{
		"see " + "is" + "sue 12":       true,
		"Is" + "sue 7's goal":          true,
		"issues" + " 10":               true,
		"rabbitmq/rabbitmq-amqp1.0#50": false,
		"the issue's drills":           false,
		"mochi #488":                   false,
	} {
		if got := issueRef.MatchString(s); got != want {
			t.Errorf("%q: matched %v, want %v", s, got, want)
		}
	}
}
