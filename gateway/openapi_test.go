package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"github.com/eclipse/paho.golang/paho"
	"go.yaml.in/yaml/v3"
)

// docs/openapi.yaml is checked against the real admin API: every route
// registered on the admin mux is described there, every operation there is
// a route of the mux, and the answers of the list and detail routes, with
// real traffic behind them, validate against its schemas.

// openAPI is docs/openapi.yaml, decoded.
type openAPI map[string]any

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Into a plain map: yaml.v3 gives nested mappings the type of the
	// outer one.
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	doc := openAPI(m)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1") {
		t.Fatalf("docs/openapi.yaml: openapi %q, want 3.1", v)
	}
	return doc
}

// operations are the file's operations as mux patterns: "GET /api/v1/x/{id}".
func (doc openAPI) operations() []string {
	var out []string
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		for m := range item.(map[string]any) {
			switch m {
			case "get", "put", "post", "delete", "patch", "head":
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// resolve follows a $ref within the file.
func (doc openAPI) resolve(t *testing.T, node map[string]any) map[string]any {
	t.Helper()
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		var cur any = map[string]any(doc)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		next, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("docs/openapi.yaml: $ref %s leads nowhere", ref)
		}
		node = next
	}
}

// responseSchema is the JSON schema of operation op's answer code.
func (doc openAPI) responseSchema(t *testing.T, op string, code int) map[string]any {
	t.Helper()
	method, path, _ := strings.Cut(op, " ")
	item, _ := doc["paths"].(map[string]any)[path].(map[string]any)
	o, _ := item[strings.ToLower(method)].(map[string]any)
	resp, _ := o["responses"].(map[string]any)[strconv.Itoa(code)].(map[string]any)
	if resp == nil {
		t.Fatalf("docs/openapi.yaml: %s has no %d response", op, code)
	}
	resp = doc.resolve(t, resp)
	content, _ := resp["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	schema, _ := media["schema"].(map[string]any)
	if schema == nil {
		t.Fatalf("docs/openapi.yaml: %s %d has no application/json schema", op, code)
	}
	return schema
}

// validate checks v (decoded JSON) against schema: the subset of JSON
// Schema the file uses (type, possibly a list; required; properties, an
// undeclared one refused unless additionalProperties allows it; items;
// enum; format date-time; $ref).
func (doc openAPI) validate(t *testing.T, schema map[string]any, v any, at string) []string {
	t.Helper()
	schema = doc.resolve(t, schema)
	var errs []string
	if types := schemaTypes(schema["type"]); len(types) > 0 && !slices.Contains(types, jsonType(v)) &&
		(jsonType(v) != "integer" || !slices.Contains(types, "number")) {
		return []string{fmt.Sprintf("%s: %s, want %v", at, jsonType(v), types)}
	}
	if enum, ok := schema["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		errs = append(errs, fmt.Sprintf("%s: %v is not one of %v", at, v, enum))
	}
	if s, ok := v.(string); ok && schema["format"] == "date-time" {
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a date-time", at, s))
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for _, r := range asList(schema["required"]) {
			if _, ok := x[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required %q missing", at, r))
			}
		}
		props, _ := schema["properties"].(map[string]any)
		for k, val := range x {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, doc.validate(t, ps, val, at+"."+k)...)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case bool:
				if !ap {
					errs = append(errs, fmt.Sprintf("%s: property %q is not in the schema", at, k))
				}
			case map[string]any:
				errs = append(errs, doc.validate(t, ap, val, at+"."+k)...)
			default:
				errs = append(errs, fmt.Sprintf("%s: property %q is not in the schema", at, k))
			}
		}
	case []any:
		if items, ok := schema["items"].(map[string]any); ok {
			for i, e := range x {
				errs = append(errs, doc.validate(t, items, e, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	return errs
}

func schemaTypes(v any) []string {
	if s, ok := v.(string); ok {
		return []string{s}
	}
	var out []string
	for _, e := range asList(v) {
		out = append(out, e.(string))
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// registeredRoutes are the patterns the package's own code registers
// (every mux.Handle and mux.HandleFunc call with a literal pattern),
// found in its source as the mux keeps no list.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle" {
				return true
			}
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				p, _ := strconv.Unquote(lit.Value)
				out = append(out, p)
			}
			return true
		})
	}
	slices.Sort(out)
	return out
}

// documented are the routes the file must describe: the API and the
// health and metrics paths. Others are not an API: Go's profiler
// (docs/admin-api.md, "Profiles") and the web console's pages.
var documented = regexp.MustCompile(`^[A-Z]+ (/api/|/healthz$|/readyz$|/metrics$)`)

func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	ops := doc.operations()
	code := registeredRoutes(t)
	if len(code) < 20 {
		t.Fatalf("found only %d registered routes in the source: %v", len(code), code)
	}
	for _, r := range code {
		if documented.MatchString(r) && !slices.Contains(ops, r) {
			t.Errorf("route %q is registered but not in docs/openapi.yaml", r)
		}
	}
	// The mux itself says which of its patterns serves each operation.
	a := newAdminServer(New(testConfig(t), quiet()))
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		concrete := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "x")
		_, pattern := a.mux.Handler(httptest.NewRequest(method, concrete, nil))
		switch {
		case pattern == op:
		default:
			t.Errorf("docs/openapi.yaml has %s, but the admin mux serves it with %q", op, pattern)
		}
	}
}

// TestOpenAPIResponsesValidate calls every list and detail route, and the
// mutating routes that answer with a body, of a gateway with MQTT and
// AMQP clients, a queue, a retained message, and checks each answer
// against its schema.
func TestOpenAPIResponsesValidate(t *testing.T) {
	doc := loadOpenAPI(t)
	g := startGateway(t, "--data.dir="+t.TempDir(), "--amqp.listen=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	mc, as := bothClients(ctx, t, g, paho.ClientConfig{}, "dev-1", "app", "a/#", "$share/g/b/+")
	if _, err := as.NewReceiver(ctx, "a/#", nil); err != nil {
		t.Fatal(err)
	}
	snd, err := as.NewSender(ctx, "a/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("hi")), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Publish(ctx, &paho.Publish{Topic: "a/r", QoS: 1, Retain: true, Payload: []byte("kept")}); err != nil {
		t.Fatal(err)
	}

	check := func(op, path, body string, want int) string {
		t.Helper()
		method, _, _ := strings.Cut(op, " ")
		code, got := call(t, g, method, path, body)
		if code != want {
			t.Fatalf("%s: %d %s, want %d", path, code, got, want)
		}
		var v any
		if err := json.Unmarshal([]byte(got), &v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, got)
		}
		for _, e := range doc.validate(t, doc.responseSchema(t, op, want), v, path) {
			t.Error(e)
		}
		return got
	}
	check("PUT /api/v1/queues/{name}", "/api/v1/queues/jobs", `{"subscriptions":["jobs/#"],"maxMessages":100}`, http.StatusCreated)
	check("POST /api/v1/publish", "/api/v1/publish", `{"topic":"jobs/1","payload":"one","qos":1,"userProperties":{"k":"v"}}`, http.StatusOK)

	list := check("GET /api/v1/connections", "/api/v1/connections", "", http.StatusOK)
	var conns []connJSON
	if err := json.Unmarshal([]byte(list), &conns); err != nil || len(conns) != 2 {
		t.Fatalf("connections: %v %s", err, list)
	}
	for _, c := range conns {
		check("GET /api/v1/connections/{id}", "/api/v1/connections/"+c.ID, "", http.StatusOK)
	}
	for _, c := range []struct{ op, path string }{
		{"GET /api/v1/subscriptions", "/api/v1/subscriptions"},
		{"GET /api/v1/topics", "/api/v1/topics"},
		{"GET /api/v1/retained", "/api/v1/retained?filter=%23"},
		{"GET /api/v1/queues", "/api/v1/queues"},
		{"GET /api/v1/queues/{name}", "/api/v1/queues/jobs"},
		{"GET /api/v1/queues/{name}/messages", "/api/v1/queues/jobs/messages"},
		{"GET /api/v1/sessions", "/api/v1/sessions"},
		{"GET /api/v1/bridges", "/api/v1/bridges"},
		{"GET /api/v1/cluster", "/api/v1/cluster"},
	} {
		check(c.op, c.path, "", http.StatusOK)
	}
	if _, p := g.admin.mux.Handler(httptest.NewRequest("GET", "/api/v1/stats", nil)); p != "" {
		check("GET /api/v1/stats", "/api/v1/stats", "", http.StatusOK)
	}
	check("POST /api/v1/queues/{name}/purge", "/api/v1/queues/jobs/purge", "", http.StatusOK)
	check("DELETE /api/v1/retained", "/api/v1/retained?filter=a/r", "", http.StatusOK)
	// An error answer has its schema too.
	check("GET /api/v1/connections/{id}", "/api/v1/connections/mqtt:nobody", "", http.StatusNotFound)
}

// TestAdminWhileStarting: the admin API serves before the parts it reports
// on exist (it starts first, so that /readyz answers); every documented GET
// answers then, 503 "starting" for the API, instead of reading parts not
// made yet (a nil store or router: a panic, and a data race with Start).
func TestAdminWhileStarting(t *testing.T) {
	doc := loadOpenAPI(t)
	a := newAdminServer(New(testConfig(t), quiet()))
	for _, op := range doc.operations() {
		method, path, _ := strings.Cut(op, " ")
		if method != "GET" {
			continue
		}
		concrete := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "x")
		if strings.HasPrefix(path, "/api/v1/retained") {
			concrete += "?filter=%23"
		}
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s while starting: panic %v", op, p)
				}
			}()
			a.mux.ServeHTTP(rec, httptest.NewRequest(method, concrete, nil))
		}()
		want := http.StatusServiceUnavailable
		switch path {
		case "/healthz", "/metrics", "/api/v1/cluster":
			want = http.StatusOK // nothing that Start makes (the cluster is an atomic pointer)
		case "/api/v1/stats":
			want = http.StatusOK // says "ready": false, for the console
		}
		if rec.Code != want {
			t.Errorf("%s while starting: %d %s, want %d", op, rec.Code, rec.Body, want)
		}
	}
}
