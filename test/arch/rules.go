// Package arch holds the dependency rules of docs/architecture.md as a table
// and the checker that applies them to the module's import graph. Its test
// (arch_test.go) reads the graph with `go list` and fails on a forbidden
// import, naming the rule it breaks; `go test ./...`, and so test/run, runs
// it.
//
// It sits under test/ beside the end-to-end tests because, like them, it
// looks at the whole module rather than one package, and because test/ is
// the one room every rule lets import anything (but cmd): no production
// package carries it, and it imports nothing of ours.
//
// Every rule is checked on direct imports, from _test.go files too. That is
// enough for paths through several packages: the rooms rule puts every
// package under the table, and each room's allowed imports are closed (core
// imports only core, retain only core and retain), so a forbidden path
// always begins with a forbidden edge somewhere along it.
package arch

import (
	"fmt"
	"slices"
	"strings"
)

// Rooms are the top-level folders a package may live in: those that
// docs/architecture.md's package map describes. A new room is a change to
// that map first, then to this list.
var Rooms = []string{"amqp", "bridge", "cmd", "core", "gateway", "mqtt", "retain", "test"}

// RoomsRule names the rule that every package lives in a room of Rooms.
const RoomsRule = "every package lives in a room of the package map"

// Rule is one dependency rule. Patterns are module-relative import paths:
// "core" is that package alone, "core/..." is core and every package below
// it, "..." is every package of the module. Only packages of the module are
// checked; the standard library and other modules are out of scope.
type Rule struct {
	Name string // as docs/architecture.md words it, "Dependency rules"

	// The packages bound: those matching From and none of Except.
	From, Except []string
	// What they must not import: the module packages matching Deny, or,
	// when Only is set, every module package matching none of Only.
	Deny, Only []string
	// TestsMay: imports from _test.go files are allowed (the rule is about
	// what production code links).
	TestsMay bool
}

// Rules is the table docs/architecture.md, "Dependency rules", describes.
var Rules = []Rule{
	{
		Name: "the core imports nothing of ours",
		From: []string{"core/..."},
		// retain/redistest, which runs a real redis-server, is the one
		// exception, for core/queue/redis's tests: the rule "test helpers
		// are for tests" keeps it out of production code.
		Only: []string{"core/...", "retain/redistest"},
	},
	{
		// core itself, the router and the topic grammar, imports no other
		// package of ours either, not even the leaves under core/
		// (core/metrics, core/accept, core/limits, core/tlsconf,
		// core/auth/httpauth): docs/architecture.md, "Why core/metrics
		// sits in core/".
		Name: "the core imports nothing of ours",
		From: []string{"core"},
		Only: []string{"core"},
	},
	{
		Name: "stores know no protocol",
		From: []string{"retain/..."},
		Only: []string{"core/...", "retain/..."},
	},
	{
		Name: "mqtt and amqp meet only in the core",
		From: []string{"mqtt/..."},
		Deny: []string{"amqp/..."},
	},
	{
		Name: "mqtt and amqp meet only in the core",
		From: []string{"amqp/..."},
		Deny: []string{"mqtt/..."},
	},
	{
		Name: "a front-end imports only its own packages, the core and retain",
		From: []string{"mqtt/..."},
		Only: []string{"mqtt/...", "core/...", "retain/..."},
	},
	{
		Name: "a front-end imports only its own packages, the core and retain",
		From: []string{"amqp/..."},
		Only: []string{"amqp/...", "core/...", "retain/..."},
	},
	{
		// mqtt/session stores keyed bytes for the front-end: no mochi (out
		// of this checker's sight, see the package's doc) and nothing of
		// the front-end it serves.
		Name: "the session store knows no MQTT",
		From: []string{"mqtt/session/..."},
		// retain/redistest for its Redis backend's tests, as in rule 1.
		Only: []string{"mqtt/session/...", "core/...", "retain/redistest"},
	},
	{
		Name: "the bridge imports only its own packages, the core and retain",
		From: []string{"bridge/..."},
		Only: []string{"bridge/...", "core/...", "retain/..."},
	},
	{
		Name: "the bridge imports only its own packages, the core and retain",
		From: []string{"bridge/cluster/..."},
		Only: []string{"bridge/cluster/...", "core/..."},
	},
	{
		Name:   "only gateway knows every part",
		From:   []string{"..."},
		Except: []string{"gateway/...", "cmd/...", "test/..."},
		Deny:   []string{"gateway/..."},
	},
	{
		Name:   "nothing imports cmd",
		From:   []string{"..."},
		Except: []string{"cmd/..."},
		Deny:   []string{"cmd/..."},
	},
	{
		Name: "cmd imports gateway only",
		From: []string{"cmd/..."},
		Only: []string{"gateway", "cmd/..."},
	},
	{
		Name:     "test helpers are for tests",
		From:     []string{"..."},
		Except:   []string{"test/...", "retain/redistest", "retain/retaintest", "core/coretest", "core/queue/queuetest", "core/tlsconf/tlstest", "core/auth/httpauth/httpauthtest", "core/auth/scramtest"},
		Deny:     []string{"retain/redistest", "retain/retaintest", "core/coretest", "core/queue/queuetest", "core/tlsconf/tlstest", "core/auth/httpauth/httpauthtest", "core/auth/scramtest"},
		TestsMay: true,
	},
}

// Import is one edge of the graph: From imports To. Test says the import
// is in a _test.go file of From (its own or its external test package).
// Paths are full import paths.
type Import struct {
	From, To string
	Test     bool
}

// Violation is one import, or one package, that breaks a rule.
type Violation struct {
	Rule   string
	Import Import // To is empty for a package outside every room
}

func (v Violation) String() string {
	if v.Import.To == "" {
		return fmt.Sprintf("%s is in no room: breaks %q (docs/architecture.md, \"Package map\"; test/arch.Rooms)",
			v.Import.From, v.Rule)
	}
	where := ""
	if v.Import.Test {
		where = " (in a _test.go file)"
	}
	return fmt.Sprintf("%s imports %s%s: breaks %q (docs/architecture.md, \"Dependency rules\")",
		v.Import.From, v.Import.To, where, v.Rule)
}

// Check applies rules and rooms to the packages and imports of module (its
// module path). Imports whose From or To lies outside module are ignored.
func Check(module string, pkgs []string, imports []Import, rules []Rule, rooms []string) []Violation {
	var out []Violation
	for _, p := range pkgs {
		rel, ok := relative(module, p)
		if !ok {
			continue
		}
		room, _, _ := strings.Cut(rel, "/")
		if !slices.Contains(rooms, room) {
			out = append(out, Violation{Rule: RoomsRule, Import: Import{From: p}})
		}
	}
	for _, im := range imports {
		from, ok1 := relative(module, im.From)
		to, ok2 := relative(module, im.To)
		if !ok1 || !ok2 || from == to {
			continue
		}
		for _, r := range rules {
			if r.breaks(from, to, im.Test) {
				out = append(out, Violation{Rule: r.Name, Import: im})
			}
		}
	}
	return out
}

// breaks reports whether the import from → to (module-relative) breaks r.
func (r *Rule) breaks(from, to string, test bool) bool {
	if test && r.TestsMay {
		return false
	}
	if !matchAny(r.From, from) || matchAny(r.Except, from) {
		return false
	}
	if r.Only != nil {
		return !matchAny(r.Only, to)
	}
	return matchAny(r.Deny, to)
}

// relative strips module from path: "" for the module's root package.
func relative(module, path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

func matchAny(patterns []string, rel string) bool {
	for _, p := range patterns {
		if match(p, rel) {
			return true
		}
	}
	return false
}

// match is the go command's pattern rule, module-relative: "x/..." matches
// x and everything below it; "..." matches everything.
func match(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == dir || strings.HasPrefix(rel, dir+"/")
	}
	return rel == pattern
}
