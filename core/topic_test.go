package core

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTopic(t *testing.T) {
	long := strings.Repeat("a", MaxTopicLength)
	tests := []struct {
		topic string
		want  error
	}{
		{"a", nil},
		{"sport/tennis/player1", nil},
		{"/", nil},                // two empty levels [MQTT-4.7.3-1 allows]
		{"a//b", nil},             // an empty middle level
		{"/finance", nil},         // a leading empty level
		{"finance/", nil},         // a trailing empty level
		{"$SYS/broker/load", nil}, // '$' topics are valid names
		{"$share/g/f", nil},       // only filters give $share a meaning
		{" ", nil},
		{"ünïcødé/日本", nil},
		{long, nil},
		{long + "a", ErrTopicTooLong},
		{"", ErrEmptyTopic},
		{"a/+", ErrTopicWildcard},
		{"+", ErrTopicWildcard},
		{"#", ErrTopicWildcard},
		{"a/#", ErrTopicWildcard},
		{"sport+", ErrTopicWildcard},
		{"a\x00b", ErrTopicNUL},
		{"\x00", ErrTopicNUL},
		{"a/\xff", ErrTopicUTF8},
		{"\xc3\x28", ErrTopicUTF8},                    // bad continuation byte
		{"\xed\xa0\x80", ErrTopicUTF8},                // surrogate U+D800 [MQTT-1.5.4-1]
		{"\xc0\x80", ErrTopicUTF8},                    // overlong NUL
		{strings.Repeat("é", 32768), ErrTopicTooLong}, // 65536 bytes of valid UTF-8
	}
	for _, tt := range tests {
		name := tt.topic
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		if got := ValidateTopic(tt.topic); !errors.Is(got, tt.want) {
			t.Errorf("ValidateTopic(%q) = %v, want %v", name, got, tt.want)
		}
	}
}

func TestValidateFilter(t *testing.T) {
	long := strings.Repeat("a", MaxTopicLength)
	tests := []struct {
		filter string
		want   error
	}{
		{"a", nil},
		{"sport/tennis/player1", nil},
		{"#", nil},
		{"+", nil},
		{"/", nil},
		{"a//b", nil},
		{"+/+", nil},
		{"/+", nil},
		{"+/", nil},
		{"+/#", nil},
		{"sport/tennis/#", nil},
		{"sport/+/player1", nil},
		{"+/tennis/#", nil},
		{"$SYS/#", nil},
		{"$SYS/+/load", nil},
		{"/#", nil},
		{"a//#", nil},
		{long, nil},
		{strings.Repeat("+/", MaxTopicLength/2) + "#", nil}, // 65535 bytes
		{long + "a", ErrTopicTooLong},
		{strings.Repeat("+/", MaxTopicLength/2) + "/#", ErrTopicTooLong},
		{"", ErrEmptyTopic},
		{"a\x00", ErrTopicNUL},
		{"a/\xfe", ErrTopicUTF8},
		{"\xed\xbf\xbf/#", ErrTopicUTF8},

		// '#' [MQTT-4.7.1-1]
		{"sport/tennis#", ErrFilterHash},
		{"sport/#/ranking", ErrFilterHash},
		{"#/a", ErrFilterHash},
		{"##", ErrFilterHash},
		{"a/#/", ErrFilterHash},
		{"#+", ErrFilterHash},
		{"a/b#c", ErrFilterHash},

		// '+' [MQTT-4.7.1-2]
		{"sport+", ErrFilterPlus},
		{"sport/+tennis", ErrFilterPlus},
		{"+a", ErrFilterPlus},
		{"++", ErrFilterPlus},
		{"a/++/b", ErrFilterPlus},

		// Shared subscriptions [MQTT-4.8.2-1], [MQTT-4.8.2-2]
		{"$share/g/f", nil},
		{"$share/g/a/b", nil},
		{"$share/g/#", nil},
		{"$share/g/+/x/#", nil},
		{"$share/g//", nil}, // filter "/" is two empty levels
		{"$share/g/$SYS/#", nil},
		{"$share/g", ErrSharedFilter},
		{"$share/", ErrSharedFilter},
		{"$share//f", ErrSharedFilter},
		{"$share/g/", ErrSharedFilter},
		{"$share/g+/f", ErrSharedGroupChars},
		{"$share/+/f", ErrSharedGroupChars},
		{"$share/g#/f", ErrSharedGroupChars},
		{"$share/#/f", ErrSharedGroupChars},
		{"$share/g/sport#", ErrFilterHash},
		{"$share/g/#/a", ErrFilterHash},
		{"$share/g/a+", ErrFilterPlus},
		{"$share/g/\x00", ErrTopicNUL},
		{"$share", nil},      // no slash: an ordinary one-level filter
		{"$shared/g/f", nil}, // not the $share prefix
	}
	for _, tt := range tests {
		name := tt.filter
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		if got := ValidateFilter(tt.filter); !errors.Is(got, tt.want) {
			t.Errorf("ValidateFilter(%q) = %v, want %v", name, got, tt.want)
		}
	}
}

func TestSplitShared(t *testing.T) {
	tests := []struct {
		in        string
		group, f  string
		ok        bool
		hasWild   bool
		validated bool // ValidateFilter accepts it
	}{
		{"$share/g/f", "g", "f", true, false, true},
		{"$share/group1/sport/tennis/#", "group1", "sport/tennis/#", true, true, true},
		{"$share/g/+", "g", "+", true, true, true},
		{"$share/g//", "g", "/", true, false, true},
		{"$share/g", "", "$share/g", false, false, false},
		{"$share//f", "", "$share//f", false, false, false},
		{"$share/g/", "", "$share/g/", false, false, false},
		{"$share/", "", "$share/", false, false, false},
		{"a/b", "", "a/b", false, false, true},
		{"$SYS/#", "", "$SYS/#", false, true, true},
		{"$share/g+/f", "g+", "f", true, true, false}, // well-formed, but the group breaks [MQTT-4.8.2-2]
	}
	for _, tt := range tests {
		g, f, ok := SplitShared(tt.in)
		if g != tt.group || f != tt.f || ok != tt.ok {
			t.Errorf("SplitShared(%q) = %q, %q, %v; want %q, %q, %v", tt.in, g, f, ok, tt.group, tt.f, tt.ok)
		}
		if IsShared(tt.in) != tt.ok {
			t.Errorf("IsShared(%q) = %v, want %v", tt.in, !tt.ok, tt.ok)
		}
		if HasWildcard(tt.in) != tt.hasWild {
			t.Errorf("HasWildcard(%q) = %v, want %v", tt.in, !tt.hasWild, tt.hasWild)
		}
		if err := ValidateFilter(tt.in); (err == nil) != tt.validated {
			t.Errorf("ValidateFilter(%q) = %v, want valid=%v", tt.in, err, tt.validated)
		}
	}
}

// matchCases are MQTT 3.1.1 / 5.0 §4.7 examples and their edges. They feed
// both TestMatch and the index and router tests, so that all three matchers
// are held to the same table.
var matchCases = []struct {
	filter, topic string
	want          bool
}{
	// Exact.
	{"a", "a", true},
	{"a", "b", false},
	{"a/b", "a/b", true},
	{"a/b", "a", false},
	{"a", "a/b", false},
	{"a/b", "a/bc", false},
	{"A", "a", false}, // case-sensitive [MQTT-4.7.3-4]
	{"a ", "a", false},

	// '#' [MQTT-4.7.1-2]
	{"#", "a", true},
	{"#", "a/b/c", true},
	{"#", "/", true},
	{"#", "/a", true},
	{"sport/tennis/player1/#", "sport/tennis/player1", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/ranking", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true},
	{"sport/tennis/#", "sport/tennis", true},
	{"sport/#", "sport", true},
	{"sport/#", "sports", false},
	{"sport/#", "sport/", true},
	{"sport/tennis/#", "sport", false},
	{"sport/tennis/#", "sport/football", false},
	{"a/#", "b/a", false},
	{"/#", "/", true},
	{"/#", "a", false},
	{"a//#", "a/", true},
	{"a//#", "a//b", true},

	// '+' [MQTT-4.7.1-3]
	{"sport/tennis/+", "sport/tennis/player1", true},
	{"sport/tennis/+", "sport/tennis/player2", true},
	{"sport/tennis/+", "sport/tennis/player1/ranking", false},
	{"sport/tennis/+", "sport/tennis", false},
	{"sport/+", "sport", false},
	{"sport/+", "sport/", true}, // '+' matches an empty level
	{"+", "a", true},
	{"+", "/", false},
	{"+/+", "/finance", true},
	{"/+", "/finance", true},
	{"+", "/finance", false},
	{"+/+", "/", true},
	{"+/+", "a", false},
	{"+/+", "a/b/c", false},
	{"a/+/c", "a//c", true},
	{"a/+/c", "a/b/c", true},
	{"a/+/c", "a/b/d", false},
	{"+/tennis/#", "sport/tennis", true},
	{"+/tennis/#", "sport/tennis/x/y", true},
	{"+/#", "a", true},
	{"+/#", "a/b", true},
	{"a/+/#", "a", false},
	{"a/+/#", "a/b", true},
	{"+/+/#", "a", false},

	// Empty levels.
	{"/", "/", true},
	{"a//b", "a//b", true},
	{"a//b", "a/b", false},
	{"a/b", "a//b", false},
	{"/finance", "/finance", true},
	{"/finance", "finance", false},

	// '$' topics [MQTT-4.7.2-1]
	{"#", "$SYS", false},
	{"#", "$SYS/broker/load", false},
	{"+", "$SYS", false},
	{"+/monitor/Clients", "$SYS/monitor/Clients", false},
	{"+/#", "$SYS/x", false},
	{"$SYS/#", "$SYS/monitor/Clients", true},
	{"$SYS/#", "$SYS", true},
	{"$SYS/monitor/+", "$SYS/monitor/Clients", true},
	{"$SYS/+/Clients", "$SYS/monitor/Clients", true},
	{"$SYS/monitor/Clients", "$SYS/monitor/Clients", true},
	{"$SYS", "$SYS", true},
	{"a/+", "a/$x", true}, // only a leading level is protected
	{"a/#", "a/$x/y", true},
	{"/#", "/$x", true},
	{"+/$x", "a/$x", true},
	{"$", "$", true},
	{"+", "$", false},
	{"#", "x$", true},
}

func TestMatch(t *testing.T) {
	for _, tt := range matchCases {
		if err := ValidateFilter(tt.filter); err != nil {
			t.Fatalf("bad case: filter %q: %v", tt.filter, err)
		}
		if err := ValidateTopic(tt.topic); err != nil {
			t.Fatalf("bad case: topic %q: %v", tt.topic, err)
		}
		if got := Match(tt.filter, tt.topic); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
	}
}

// TestMatchExactIsEquality: a filter without wildcards matches only itself.
func TestMatchExactIsEquality(t *testing.T) {
	topics := []string{"a", "a/b", "/", "a//b", "$SYS", "$SYS/x", "a/", "/a"}
	for _, f := range topics {
		for _, tp := range topics {
			if got := Match(f, tp); got != (f == tp) {
				t.Errorf("Match(%q, %q) = %v", f, tp, got)
			}
		}
	}
}

func FuzzValidateFilter(f *testing.F) {
	for _, tt := range matchCases {
		f.Add(tt.filter, tt.topic)
	}
	f.Add("$share/g/a/#", "a")
	f.Add("$share//", "")
	f.Add("a/\xff", "a\x00")
	f.Fuzz(func(t *testing.T, filter, topic string) {
		ferr := ValidateFilter(filter)
		terr := ValidateTopic(topic)
		// A topic name is a filter without wildcards, except that a filter
		// starting "$share/" must then be a well-formed shared one.
		if terr == nil && !strings.HasPrefix(topic, sharePrefix) && ValidateFilter(topic) != nil {
			t.Fatalf("valid topic %q is not a valid filter", topic)
		}
		if ferr != nil || terr != nil || IsShared(filter) {
			return
		}
		m := Match(filter, topic)
		if !HasWildcard(filter) && m != (filter == topic) {
			t.Fatalf("Match(%q, %q) = %v for an exact filter", filter, topic, m)
		}
		if filter == "#" && m != (topic[0] != '$') {
			t.Fatalf("Match(#, %q) = %v", topic, m)
		}
		if m && filter != topic && !HasWildcard(filter) {
			t.Fatalf("Match(%q, %q) true without wildcards", filter, topic)
		}
	})
}
