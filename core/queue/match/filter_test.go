package match

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tolsey/tolsey/core"
)

// grammarCases is every form of the grammar (docs/queues.md, "Filter grammar
// and exceptions") with topics it must and must not match. Both the single
// filter (Filter.Matches) and the Index are held to it.
var grammarCases = []struct {
	filter string
	in     []string // topics it matches
	out    []string // topics it does not
}{
	// Literals.
	{"a/b", []string{"a/b"}, []string{"a", "a/b/c", "a/bb", "b/a", "A/b"}},
	{"a//b", []string{"a//b"}, []string{"a/b", "a/x/b"}},
	{"/", []string{"/"}, []string{"", "a", "a/", "/a"}},
	// MQTT `+`: one whole level, empty included.
	{"a/+", []string{"a/b", "a/", "a/*", "a/>"}, []string{"a", "a/b/c", "b/a"}},
	{"+/b", []string{"a/b", "/b"}, []string{"b", "a/c/b", "$SYS/b"}},
	{"+", []string{"a", ""}, []string{"a/b", "/", "$SYS"}},
	// MQTT `#`: the parent level and anything below.
	{"a/#", []string{"a", "a/", "a/b", "a/b/c"}, []string{"b", "ab", "b/a"}},
	{"#", []string{"a", "a/b", "/", "#"}, []string{"$SYS", "$SYS/x", "$"}},
	{"a/+/#", []string{"a/b", "a/b/c", "a/b/c/d"}, []string{"a"}},
	// `*` alone: one level, as `+`.
	{"a/*", []string{"a/b", "a/", "a/*"}, []string{"a", "a/b/c"}},
	{"*/b", []string{"x/b", "/b"}, []string{"b", "x/y/b", "$SYS/b"}},
	{"*", []string{"a", "*"}, []string{"a/b", "$SYS", "$"}},
	// `prefix*` at the end of a level: that prefix, then anything within the level.
	{"animals/f*", []string{"animals/fox", "animals/frog", "animals/f", "animals/f*"}, []string{"animals/fox/cub", "animals/cat", "animals/", "animals", "animal/fox"}},
	{"a/b*/c", []string{"a/b/c", "a/bee/c"}, []string{"a/b/d", "a/a/c", "a/bee/c/d", "a/bee"}},
	{"dev*", []string{"dev", "device"}, []string{"de", "device/1", "$dev"}},
	{"$SYS*/x", []string{"$SYS/x", "$SYSTEM/x"}, []string{"$SY/x", "SYS/x"}},
	{"a**", []string{"a*", "a*b"}, []string{"a", "ab"}},
	// `>` alone as the last level: one level or more, never the parent.
	{"a/b/>", []string{"a/b/c", "a/b/c/d", "a/b/"}, []string{"a/b", "a", "a/c/d"}},
	{">", []string{"a", "a/b", "/", ">"}, []string{"$SYS", "$SYS/a"}},
	// `*` and `>` elsewhere are literal characters.
	{"a*b", []string{"a*b"}, []string{"ab", "axb", "a*bc"}},
	{"a/*b", []string{"a/*b"}, []string{"a/b", "a/xb"}},
	{"a/>x", []string{"a/>x"}, []string{"a/x", "a/b"}},
	{"a/>/c", []string{"a/>/c"}, []string{"a/b/c", "a/c", "a/b/d/c"}},
	{">/a", []string{">/a"}, []string{"x/a", "a"}},
	{"x>", []string{"x>"}, []string{"x", "xy"}},
	// `$` topics: a leading wildcard does not match them [MQTT-4.7.2-1];
	// a literal `$` level does, with wildcards after it.
	{"$SYS/#", []string{"$SYS", "$SYS/a", "$SYS/a/b"}, []string{"SYS/a", "$SYSX"}},
	{"$SYS/+", []string{"$SYS/a"}, []string{"$SYS", "$SYS/a/b"}},
	{"$SYS/>", []string{"$SYS/a", "$SYS/a/b"}, []string{"$SYS"}},
	{"$SYS/*", []string{"$SYS/a"}, []string{"$SYS"}},
	{"+/a", []string{"x/a"}, []string{"$x/a"}},
	{"a/+", []string{"a/$x"}, nil}, // the rule is about the first level only
	{"a/#", []string{"a/$x"}, nil},
	// `!` is only special at the very start.
	{"a/!b", []string{"a/!b"}, []string{"a/b"}},
}

func TestGrammarMatches(t *testing.T) {
	for _, c := range grammarCases {
		f, err := Parse(c.filter)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.filter, err)
		}
		for _, topic := range c.in {
			if !f.Matches(topic) {
				t.Errorf("%q should match %q", c.filter, topic)
			}
		}
		for _, topic := range c.out {
			if f.Matches(topic) {
				t.Errorf("%q should not match %q", c.filter, topic)
			}
		}
	}
}

func TestParseLevels(t *testing.T) {
	for _, c := range []struct {
		filter string
		want   Filter
	}{
		{"a/+/#", Filter{Levels: []Level{{Kind: Literal, Text: "a"}, {Kind: Plus}, {Kind: Hash}}}},
		{"!animals/fox", Filter{Exception: true, Levels: []Level{{Kind: Literal, Text: "animals"}, {Kind: Literal, Text: "fox"}}}},
		{"animals/f*", Filter{Levels: []Level{{Kind: Literal, Text: "animals"}, {Kind: Prefix, Text: "f"}}}},
		{"*/a*b/>", Filter{Levels: []Level{{Kind: Star}, {Kind: Literal, Text: "a*b"}, {Kind: Tail}}}},
		{">/>x/>", Filter{Levels: []Level{{Kind: Literal, Text: ">"}, {Kind: Literal, Text: ">x"}, {Kind: Tail}}}},
		{"a**", Filter{Levels: []Level{{Kind: Prefix, Text: "a*"}}}},
		{"!!a", Filter{Exception: true, Levels: []Level{{Kind: Literal, Text: "!a"}}}},
		{"/", Filter{Levels: []Level{{Kind: Literal}, {Kind: Literal}}}},
	} {
		got, err := Parse(c.filter)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.filter, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", c.filter, got, c.want)
		}
		if s := got.String(); s != c.filter {
			t.Errorf("Parse(%q).String() = %q", c.filter, s)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		filter string
		want   error
		level  int
	}{
		{"", ErrEmpty, 0},
		{"!", ErrEmpty, 0},
		{"a/#/b", core.ErrFilterHash, 2},
		{"#/a", core.ErrFilterHash, 1},
		{"a#", core.ErrFilterHash, 1},
		{"a/b#", core.ErrFilterHash, 2},
		{"a/#x", core.ErrFilterHash, 2},
		{"!a/+#", core.ErrFilterHash, 2},
		{"a+", core.ErrFilterPlus, 1},
		{"a/+b/c", core.ErrFilterPlus, 2},
		{"a/++", core.ErrFilterPlus, 2},
		{"a/+*", core.ErrFilterPlus, 2},
		{"a/*+", core.ErrFilterPlus, 2},
		{"$share/g/a", ErrShared, 0},
		{"!$share/g/a/#", ErrShared, 0},
		{"a/\x00", core.ErrTopicNUL, 0},
		{"a/\xff", core.ErrTopicUTF8, 0},
		{strings.Repeat("a", core.MaxTopicLength+1), core.ErrTopicTooLong, 0},
	} {
		_, err := Parse(c.filter)
		if !errors.Is(err, c.want) {
			t.Errorf("Parse(%.20q) = %v, want %v", c.filter, err, c.want)
			continue
		}
		var fe *FilterError
		if !errors.As(err, &fe) || fe.Level != c.level || fe.Filter != c.filter {
			t.Errorf("Parse(%.20q): want a *FilterError at level %d, got %#v", c.filter, c.level, err)
		}
		// The text names the filter (shortened) and the rule.
		if msg := err.Error(); !strings.Contains(msg, c.want.Error()) || len(msg) > 400 {
			t.Errorf("Parse(%.20q): error text %q", c.filter, msg)
		}
	}
}

// FuzzParse: no input panics; an accepted filter prints back as given,
// parses again to the same thing, and matches as the reference says.
func FuzzParse(f *testing.F) {
	for _, c := range grammarCases {
		f.Add(c.filter)
		f.Add("!" + c.filter)
	}
	for _, s := range []string{"", "!", "!!", "#", "a/#/b", "a+", "$share/g/x", "*/*", ">/>", "a/**", "\xff", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		var x Index[int]
		if addErr := x.Add(1, s); (addErr == nil) != (err == nil) {
			t.Fatalf("Parse(%q) err %v, Index.Add err %v", s, err, addErr)
		}
		if err != nil {
			var fe *FilterError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%q): error %v is not a *FilterError", s, err)
			}
			return
		}
		if len(p.Levels) == 0 {
			t.Fatalf("Parse(%q): no levels", s)
		}
		if got := p.String(); got != s {
			t.Fatalf("Parse(%q).String() = %q", s, got)
		}
		again, err := Parse(p.String())
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("Parse(%q) again = %+v, %v; want %+v", s, again, err, p)
		}
		// The filter's text as a topic, and a few shapes around it.
		body := strings.TrimPrefix(s, "!")
		for _, topic := range []string{body, body + "/x", "x/" + body, "$" + body, strings.ReplaceAll(body, "*", "")} {
			want := naiveMatch(body, topic)
			if got := p.Matches(topic); got != want {
				t.Fatalf("%q.Matches(%q) = %v, reference %v", s, topic, got, want)
			}
			matched := slices.Contains(x.AppendMatches(nil, topic), 1)
			if wantIdx := want && !p.Exception; matched != wantIdx {
				t.Fatalf("Index{%q}.Match(%q) = %v, want %v", s, topic, matched, wantIdx)
			}
		}
	})
}
