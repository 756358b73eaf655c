package selector

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tolsey/tolsey/core"
)

// msg is a core.Message with user properties given as k, v, k, v...
func msg(kv ...string) *core.Message {
	m := &core.Message{Topic: "t", QoS: 1, Created: time.UnixMilli(1700000000000)}
	for i := 0; i+1 < len(kv); i += 2 {
		m.UserProperties = append(m.UserProperties, core.UserProperty{Key: kv[i], Value: kv[i+1]})
	}
	return m
}

func TestMatchOverUserProperties(t *testing.T) {
	m := msg("color", "red", "price", "12", "weight", "2.5", "flag", "true", "name", "it's",
		"path", "a_b%c", "big", "99999999999999999999", "neg", "-3")
	cases := []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"   ", true},
		{"color = 'red'", true},
		{"color <> 'red'", false},
		{"color = 'blue'", false},
		{"name = 'it''s'", true},
		{"price = 12", true},
		{"price = 12.0", true},
		{"price = '12'", true},
		{"price > 10 AND price < 13", true},
		{"price >= 12 AND price <= 12", true},
		{"price * 2 + 1 = 25", true},
		{"price / 5 = 2", true},     // exact division
		{"price / 5.0 = 2.4", true}, // promoted
		{"price / 0 = 1", false},    // UNKNOWN
		{"NOT (price / 0 = 1)", false},
		{"-price = neg * 4", true},
		{"weight > 2", true},
		{"weight BETWEEN 2 AND 3", true},
		{"weight NOT BETWEEN 2 AND 3", false},
		{"price BETWEEN 13 AND 20", false},
		{"price NOT BETWEEN 13 AND 20", true},
		{"big > 1E19", true},
		{"color > 1", false}, // unlike types: FALSE
		{"color BETWEEN 1 AND 2", false},
		{"color NOT BETWEEN 1 AND 2", false}, // color < 1 OR color > 2: FALSE too (QPID-6717)
		{"missing NOT BETWEEN 1 AND 2", false},
		{"price NOT BETWEEN 1 AND missing", false}, // FALSE OR UNKNOWN
		{"price NOT BETWEEN 20 AND missing", true}, // TRUE OR UNKNOWN
		{"NOT color > 1", true},
		{"color = 1", false},
		{"color <> 1", false},
		{"flag", true},
		{"flag = TRUE", true},
		{"NOT flag", false},
		{"color", false}, // not a boolean: UNKNOWN
		{"NOT color", false},
		{"color IN ('green', 'red')", true},
		{"color NOT IN ('green', 'red')", false},
		{"missing IN ('a')", false},
		{"NOT missing IN ('a')", false}, // UNKNOWN
		{"missing NOT IN ('a')", false},
		{"color LIKE 'r%'", true},
		{"color LIKE 'r_d'", true},
		{"color LIKE '_'", false},
		{"color NOT LIKE '%e%'", false},
		{"path LIKE 'a\\_b\\%c' ESCAPE '\\'", true},
		{"path LIKE 'a!_b!%%' ESCAPE '!'", true},
		{"color LIKE 'a!_b' ESCAPE '!'", false},
		{"missing IS NULL", true},
		{"color IS NULL", false},
		{"color IS NOT NULL", true},
		{"missing = 1", false},
		{"NOT missing = 1", false},
		{"missing = 1 OR color = 'red'", true},
		{"missing = 1 AND color = 'blue'", false},
		{"NOT (missing = 1 AND color = 'red')", false}, // UNKNOWN
		{"missing = 1 OR color = 'blue'", false},
		{"TRUE", true},
		{"FALSE OR true", true},
		{"color='red'AND(price=12)", true},
		{"JMSDeliveryMode = 'PERSISTENT'", true},
		{"JMSPriority = 4", true},
		{"JMSTimestamp = 1700000000000", true},
		{"JMSMessageID IS NULL", true},
		{"JMSCorrelationID IS NULL", true},
		{"jmspriority IS NULL", true}, // identifiers are case-sensitive
		{"price = 0x0C", true},
		{"price = 12L", true},
		{"neg = -3 AND -9223372036854775808 < 0", true},
		{"weight = 25E-1 AND weight = .25e1", true},
		{"color = 'red' or price = 1 and weight = 0", true}, // AND binds tighter
		{"(color = 'red' or price = 1) and weight = 0", false},
	}
	for _, c := range cases {
		s, err := Parse(c.sel, Limits{})
		if err != nil {
			t.Errorf("Parse(%q): %v", c.sel, err)
			continue
		}
		if got := s.MatchMessage(m); got != c.want {
			t.Errorf("%q: got %v, want %v", c.sel, got, c.want)
		}
	}
}

// typed is a Source with typed properties, as a front-end that keeps AMQP
// application property types would offer: the JMS rules apply strictly.
type typedSource map[string]Value

func (t typedSource) Header(Header) Value        { return Value{} }
func (t typedSource) Property(name string) Value { return t[name] }

func TestTypedProperties(t *testing.T) {
	src := typedSource{"s": StringValue("12"), "i": LongValue(12), "b": BoolValue(true), "d": DoubleValue(12)}
	cases := []struct {
		sel  string
		want bool
	}{
		{"s = 12", false}, // a typed string is no number
		{"s = '12'", true},
		{"i = 12", true},
		{"i = d", true},
		{"i = '12'", false},
		{"b = TRUE", true},
		{"b = 'true'", false},
		{"s LIKE '1%'", true},
		{"i LIKE '1%'", false},
		{"i IN ('12')", false},
		{"d > 11.5 AND i < 12.5", true},
	}
	for _, c := range cases {
		s, err := Parse(c.sel, Limits{})
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.sel, err)
		}
		if got := s.Match(src); got != c.want {
			t.Errorf("%q: got %v, want %v", c.sel, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		sel string
		pos int // 1-based, as Error says it
		msg string
	}{
		{"color = ", 9, "unexpected end"},
		{"color = 'red", 9, "not terminated"},
		{"color == 'red'", 8, "unexpected"},
		{"color = 'red' AND", 18, "unexpected end"},
		{"(a = 1", 7, `expected ")"`},
		{"a = 1)", 6, "unexpected"},
		{"a # 1", 3, "unexpected character"},
		{"'a' + 1 = 2", 5, "wants a number"},
		{"a < 'b'", 3, "wants a number"},
		{"a AND 3", 1, "wants a boolean"},
		{"1 + 2", 1, "not a condition"},
		{"'abc'", 1, "not a condition"},
		{"a = NULL", 5, "IS [NOT] NULL"},
		{"a LIKE b", 8, "string literal"},
		{"a LIKE 'x!' ESCAPE '!'", 8, "escape"},
		{"a LIKE 'x' ESCAPE 'ab'", 19, "one character"},
		{"a IN ()", 7, "string literals"},
		{"a IN (1)", 7, "string literals"},
		{"1 IN ('a')", 3, "identifier"},
		{"a NOT 1", 7, "after NOT"},
		{"a IS 1", 6, "expected NULL"},
		{"a BETWEEN 1 OR 2", 13, "expected AND"},
		{"a = 9223372036854775808", 5, "range of a long"},
		{"a = 1e999", 5, "out of range"},
		{"a = 12abc", 7, "after a number"},
		{"a = 1e", 5, "exponent"},
		{"NOT", 4, "unexpected end"},
	}
	for _, c := range cases {
		_, err := Parse(c.sel, Limits{})
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%q): %v, want an *Error", c.sel, err)
			continue
		}
		if e.Pos+1 != c.pos || !strings.Contains(e.Error(), c.msg) {
			t.Errorf("Parse(%q) = %q (position %d), want position %d and %q", c.sel, e.Error(), e.Pos+1, c.pos, c.msg)
		}
	}
}

func TestLimits(t *testing.T) {
	long := "a = '" + strings.Repeat("x", 100) + "'"
	if _, err := Parse(long, Limits{MaxLength: 50}); err == nil || !strings.Contains(err.Error(), "longer than 50") {
		t.Errorf("a selector over MaxLength: %v", err)
	}
	if _, err := Parse(long, Limits{MaxLength: 200}); err != nil {
		t.Errorf("a selector within MaxLength: %v", err)
	}
	deep := strings.Repeat("(", 100) + "a = 1" + strings.Repeat(")", 100)
	if _, err := Parse(deep, Limits{}); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("100 parentheses: %v", err)
	}
	nots := strings.Repeat("NOT ", 100) + "a = 1"
	if _, err := Parse(nots, Limits{}); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("100 NOTs: %v", err)
	}
	sum := "a = 1" + strings.Repeat(" + 1", 100)
	if _, err := Parse(sum, Limits{}); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("a chain of 100 +: %v", err)
	}
	// A long OR chain is one level: generated "id = 1 OR id = 2 …"
	// selectors are common.
	var ors []string
	for i := range 300 {
		ors = append(ors, "id = "+strings.Repeat("1", i%9+1))
	}
	s, err := Parse(strings.Join(ors, " OR "), Limits{MaxLength: 1 << 16})
	if err != nil {
		t.Fatalf("300 ORs: %v", err)
	}
	if !s.MatchMessage(msg("id", "111")) || s.MatchMessage(msg("id", "5")) {
		t.Error("300 ORs select wrongly")
	}
}

func TestLikePattern(t *testing.T) {
	cases := []struct {
		pat, s string
		want   bool
	}{
		{"%", "", true},
		{"_", "", false},
		{"_", "é", true},
		{"a%b%c", "aXXbYYc", true},
		{"a%b%c", "aXXbYY", false},
		{"%%%a", "bbba", true},
		{"%ab%ab%", "xabyab", true},
		{"%ab%ab%", "xaby", false},
		{"a_c", "abbc", false},
	}
	for _, c := range cases {
		p, _ := compilePattern(c.pat, -1)
		if got := p.match(c.s); got != c.want {
			t.Errorf("%q LIKE %q: got %v", c.s, c.pat, got)
		}
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	s, m := benchSelector(t)
	if !s.MatchMessage(m) {
		t.Fatal("the benchmark's selector does not select its message")
	}
	if n := testing.AllocsPerRun(100, func() { s.MatchMessage(m) }); n != 0 {
		t.Errorf("Match allocates %v times per message", n)
	}
}

// benchSelector is a typical selector over a message with 10 properties.
func benchSelector(tb testing.TB) (*Selector, *core.Message) {
	tb.Helper()
	s, err := Parse("region IN ('eu-west', 'eu-north') AND (price * 1.2 > 100 OR vip = TRUE) AND "+
		"sku LIKE 'AB-%' AND qty BETWEEN 1 AND 50 AND JMSDeliveryMode = 'PERSISTENT' AND coupon IS NULL", Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	return s, msg("region", "eu-west", "price", "99.5", "vip", "false", "sku", "AB-1234", "qty", "7",
		"currency", "EUR", "customer", "c-42", "channel", "web", "warehouse", "w3", "note", "fragile")
}

func BenchmarkMatch(b *testing.B) {
	s, m := benchSelector(b)
	b.ReportAllocs()
	for b.Loop() {
		if !s.MatchMessage(m) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	src := "region IN ('eu-west', 'eu-north') AND (price * 1.2 > 100 OR vip = TRUE) AND sku LIKE 'AB-%'"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(src, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
