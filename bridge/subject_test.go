package bridge

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tolsey/tolsey/core"
)

// topicCases is the mapping table of docs/bridge.md: each topic and the
// subject NATS's MQTT support publishes it on, or "" when we refuse it.
// The rows marked live are also checked against a real NATS server
// (subject_nats_test.go).
var topicCases = []struct {
	topic, subject string
	why            string // what the row shows
}{
	// Plain.
	{"a", "a", "one level: no conversion, no copy"},
	{"sensors/room1/temp", "sensors.room1.temp", "'/' ⇄ '.'"},
	{"a/b/c/d/e/f/g/h", "a.b.c.d.e.f.g.h", "many levels"},
	{"a-b_c~!@%^&()=,;:'\"", "a-b_c~!@%^&()=,;:'\"", "punctuation is kept"},
	{"a*b/c>d", "a*b.c>d", "'*' and '>' inside a level are literals in NATS too"},
	{"A/B/c", "A.B.c", "case is kept"},
	// Dots in levels, Sparkplug.
	{"a.b", "a//b", "'.' in a level ⇄ '//'"},
	{"a.b/c.d", "a//b.c//d", ""},
	{"a..b", "a////b", "two dots"},
	{".", "//", "a level that is one dot"},
	{"./a", "//.a", ""},
	{"a/.", "a.//", ""},
	{"a/./b", "a.//.b", ""},
	{"a./b", "a//.b", "a dot before a separator"},
	{"a/.b", "a.//b", "a dot after a separator"},
	{"...", "//////", ""},
	{"spBv1.0/group1/NBIRTH/edge1", "spBv1//0.group1.NBIRTH.edge1", "Sparkplug B"},
	{"spBv1.0/group1/DDATA/edge1/device.1", "spBv1//0.group1.DDATA.edge1.device//1", "Sparkplug B, device id with a dot"},
	{"spBv1.0/STATE/host1", "spBv1//0.STATE.host1", "Sparkplug host state"},
	{"192.168.1.10/status", "192//168//1//10.status", "an address as a level"},
	// Empty levels: the token "/".
	{"/", "/./", "two empty levels"},
	{"//", "/././", "three empty levels"},
	{"/a", "/.a", "leading '/'"},
	{"a/", "a./", "trailing '/'"},
	{"/a/", "/.a./", "both"},
	{"a//b", "a./.b", "doubled '/'"},
	{"a///b", "a././.b", "tripled '/'"},
	{"//a", "/./.a", ""},
	{"a//", "a././", ""},
	{"/./", "/.//./", "empty, dot, empty"},
	{"/a/b/c", "/.a.b.c", ""},
	// Unicode.
	{"température/été", "température.été", "UTF-8 is kept"},
	{"日本/東京/温度", "日本.東京.温度", ""},
	{"🌡/𝄞.x", "🌡.𝄞//x", "4-byte runes, and a dot beside them"},
	{"a\u00a0b", "a\u00a0b", "no-break space is not ASCII whitespace: kept"},
	// $ topics.
	{"$SYS/broker/load", "$SYS.broker.load", "'$' topics map like any other"},
	{"$sparkplug/certificates/spBv1.0/g/NBIRTH/e", "$sparkplug.certificates.spBv1//0.g.NBIRTH.e", ""},
	{"$MQTT/x", "$MQTT.x", "a topic may map into $MQTT. (a Mapping will not send it there)"},
	// Refused.
	{"", "", "empty topic [MQTT-4.7.3-1]"},
	{"a b", "", "space: NATS refuses it too"},
	{"a/b\tc", "", "tab: NATS refuses it too"},
	{"a\nb", "", "newline: NATS refuses it too"},
	{"a\rb", "", "carriage return: NATS refuses it too"},
	{"a\fb", "", "form feed: NATS refuses it too"},
	{"a\x7fb", "", "DEL: NATS refuses it too"},
	{"a\x01b", "", "control character: NATS would take it, we do not"},
	{"a\vb", "", "vertical tab: NATS would take it, we do not"},
	{"a\x00b", "", "NUL [MQTT-1.5.4-2]"},
	{"a/*", "", "a '*' level would be a NATS wildcard"},
	{"*", "", "so would a lone '*'"},
	{">/a", "", "and a '>' level"},
	{"a/+", "", "wildcard in a topic name [MQTT-3.3.2-2]"},
	{"a/#", "", "wildcard in a topic name [MQTT-3.3.2-2]"},
	{"a+b", "", "a '+' anywhere in a topic name [MQTT-3.3.2-2]"},
	{"\xff", "", "not UTF-8 [MQTT-1.5.4-1]"},
}

func TestTopicToSubject(t *testing.T) {
	for _, c := range topicCases {
		got, err := TopicToSubject(c.topic)
		if c.subject == "" {
			if err == nil {
				t.Errorf("TopicToSubject(%q) = %q, want ErrUnmappable (%s)", c.topic, got, c.why)
			} else if !errors.Is(err, ErrUnmappable) {
				t.Errorf("TopicToSubject(%q): %v is not ErrUnmappable", c.topic, err)
			}
			continue
		}
		if err != nil || got != c.subject {
			t.Errorf("TopicToSubject(%q) = %q, %v; want %q (%s)", c.topic, got, err, c.subject, c.why)
			continue
		}
		if back, err := SubjectToTopic(got); err != nil || back != c.topic {
			t.Errorf("SubjectToTopic(%q) = %q, %v; want %q", got, back, err, c.topic)
		}
		if want := natsCharRules(c.topic); got != want {
			t.Errorf("TopicToSubject(%q) = %q; NATS's character rules give %q", c.topic, got, want)
		}
	}
}

// The error says what was wrong, and keeps the core error it came from.
func TestMappingErrorDetail(t *testing.T) {
	_, err := TopicToSubject("a/+")
	var me *MappingError
	if !errors.As(err, &me) || me.Name != "a/+" || !errors.Is(err, core.ErrTopicWildcard) {
		t.Fatalf("TopicToSubject(\"a/+\") error %v: want a *MappingError naming the topic and wrapping core.ErrTopicWildcard", err)
	}
	_, err = TopicToSubject("a b")
	if !errors.As(err, &me) || !strings.Contains(me.Reason, "whitespace") {
		t.Fatalf("TopicToSubject(\"a b\") error %v: want a reason naming whitespace", err)
	}
}

func TestFilterToSubjects(t *testing.T) {
	for _, c := range []struct {
		filter string
		want   []string // nil: refused
	}{
		{"a", []string{"a"}},
		{"a/b", []string{"a.b"}},
		{"+", []string{"*"}},
		{"#", []string{">"}},
		{"a/+", []string{"a.*"}},
		{"a/#", []string{"a.>", "a"}},
		{"+/#", []string{"*.>", "*"}},
		{"a/+/c/#", []string{"a.*.c.>", "a.*.c"}},
		{"+/+/+", []string{"*.*.*"}},
		{"spBv1.0/+/NBIRTH/#", []string{"spBv1//0.*.NBIRTH.>", "spBv1//0.*.NBIRTH"}},
		{"/#", []string{"/.>", "/"}},
		{"/+", []string{"/.*"}},
		{"+/", []string{"*./"}},
		{"a//+", []string{"a./.*"}},
		{"a.b/#", []string{"a//b.>", "a//b"}},
		{"$SYS/#", []string{"$SYS.>", "$SYS"}},
		{"$MQTT/msgs/#", nil},
		{"$share/g/a/#", nil},
		{"a/*", nil},
		{"a/>", nil},
		{"a/#/b", nil},
		{"a+/b", nil},
		{"a b/#", nil},
		{"", nil},
	} {
		got, err := FilterToSubjects(c.filter)
		if c.want == nil {
			if err == nil || !errors.Is(err, ErrUnmappable) {
				t.Errorf("FilterToSubjects(%q) = %q, %v; want ErrUnmappable", c.filter, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("FilterToSubjects(%q) = %q, %v; want %q", c.filter, got, err, c.want)
			continue
		}
		if back, err := SubjectToFilter(got[0]); err != nil || back != c.filter {
			t.Errorf("SubjectToFilter(%q) = %q, %v; want %q", got[0], back, err, c.filter)
		}
	}
}

// Subjects no topic maps to: NATS's own MQTT support delivers some of them
// under another name (subject_nats_test.go shows which); we refuse them.
func TestSubjectToTopicRefuses(t *testing.T) {
	for _, s := range []string{
		"",
		"a..b", ".a", "a.", ".", // empty tokens
		"a/b", "/a", "a/", "///", "a.///.b", // a lone '/' in a token
		"a.*", "*", ">", "a.>", // wildcards in a message subject
		"a.+", "a.#", "a+b", // would be MQTT wildcards
		"a b", "a\tb", "a\x7f", "a\x01", // bytes no subject has
		"/",      // one empty level: the empty topic
		"\xffab", // not UTF-8
	} {
		if got, err := SubjectToTopic(s); err == nil || !errors.Is(err, ErrUnmappable) {
			t.Errorf("SubjectToTopic(%q) = %q, %v; want ErrUnmappable", s, got, err)
		}
	}
	for _, s := range []string{"a.>.b", "a..*", "a.+", "a/b.*"} {
		if got, err := SubjectToFilter(s); err == nil || !errors.Is(err, ErrUnmappable) {
			t.Errorf("SubjectToFilter(%q) = %q, %v; want ErrUnmappable", s, got, err)
		}
	}
}

func TestNewMappingRefuses(t *testing.T) {
	for _, c := range [][2]string{
		{"sensors/#", "iot.sensors.*"},     // '#' against '*'
		{"sensors/+", "iot.sensors.>"},     // '+' against '>'
		{"sensors/+/temp", "iot.*.temp.x"}, // the tails differ
		{"sensors/+/temp", "iot.*.t"},      // a literal after the wildcard differs
		{"sensors/#", "iot.*.sensors.>"},   // a wildcard in the remote prefix
		{"sensors/a", "iot.>"},             // a wildcard on one side only
		{"sensors/#", "iot..>"},            // empty token
		{"sensors/#", "iot.>.x"},           // '>' not last
		{"sensors/#", "iot sensors.>"},     // whitespace
		{"sensors/#", ""},                  // empty
		{"sensors/#/x", "iot.>"},           // not a filter
		{"$share/g/a/#", "a.>"},            // shared
		{"a/*/#", "x.>"},                   // a prefix that has no subject
		{"a/#", "$MQTT.msgs.>"},            // NATS's own MQTT state
	} {
		if m, err := NewMapping(c[0], c[1]); err == nil {
			t.Errorf("NewMapping(%q, %q) = %+v, want an error", c[0], c[1], m)
		}
	}
}

func TestMapping(t *testing.T) {
	type row struct {
		topic, subject string
		out            error // the error Out gives, when it is not subject
		in             bool  // also check In(subject) == topic
	}
	for _, c := range []struct {
		local, remote string
		subjects      []string
		rows          []row
	}{
		{"sensors/#", "iot.sensors.>", []string{"iot.sensors.>", "iot.sensors"}, []row{
			{"sensors/room1/temp", "iot.sensors.room1.temp", nil, true},
			{"sensors", "iot.sensors", nil, true},
			{"sensors/", "iot.sensors./", nil, true},
			{"sensors//x", "iot.sensors./.x", nil, true},
			{"sensors/a.b", "iot.sensors.a//b", nil, true},
			{"sensors/$x", "iot.sensors.$x", nil, true},
			{"sensorsX/a", "", ErrOutsideRule, false},
			{"other/a", "", ErrOutsideRule, false},
			{"sensors/a b", "", ErrUnmappable, false},
			{"sensors/*", "", ErrUnmappable, false},
		}},
		{"#", ">", []string{">"}, []row{
			{"a/b", "a.b", nil, true},
			{"/a", "/.a", nil, true},
			{"spBv1.0/g/NDATA/e", "spBv1//0.g.NDATA.e", nil, true},
			{"$SYS/x", "", ErrOutsideRule, false}, // [MQTT-4.7.2-1]
		}},
		{"#", "site1.>", []string{"site1.>"}, []row{
			{"a", "site1.a", nil, true},
			{"a/b.c", "site1.a.b//c", nil, true},
			{"/", "site1././", nil, true},
		}},
		{"spBv1.0/#", "plant.spBv1//0.>", []string{"plant.spBv1//0.>", "plant.spBv1//0"}, []row{
			{"spBv1.0/g/NBIRTH/e", "plant.spBv1//0.g.NBIRTH.e", nil, true},
			{"spBv1.0", "plant.spBv1//0", nil, true},
		}},
		{"sensors/#", "raw.>", []string{"raw.>", "raw"}, []row{
			{"sensors/a/b", "raw.a.b", nil, true},
			{"sensors", "raw", nil, true},
		}},
		{"sensors/#", ">", []string{">"}, []row{
			{"sensors/a", "a", nil, true},
			{"sensors", "", ErrUnmappable, false},           // no subject left for the parent level
			{"sensors/$JS/API/x", "", ErrUnmappable, false}, // NATS's '$' namespace
		}},
		{"sensors/+/temp", "iot.*.temp", []string{"iot.*.temp"}, []row{
			{"sensors/r1/temp", "iot.r1.temp", nil, true},
			{"sensors/r.1/temp", "iot.r//1.temp", nil, true},
			{"sensors/r1/hum", "", ErrOutsideRule, false},
		}},
		{"+/#", "dev.*.>", []string{"dev.*.>", "dev.*"}, []row{
			{"a", "dev.a", nil, true},
			{"a/b", "dev.a.b", nil, true},
			{"$SYS/b", "", ErrOutsideRule, false},
		}},
		{"/#", "lead.>", []string{"lead.>"}, []row{
			{"/a", "lead.a", nil, true},
			{"/", "lead./", nil, true},
			{"a", "", ErrOutsideRule, false},
		}},
		{"a/b", "x.y.z", []string{"x.y.z"}, []row{
			{"a/b", "x.y.z", nil, true},
			{"a/c", "", ErrOutsideRule, false},
		}},
		{"$SYS/#", "$SYS.>", []string{"$SYS.>", "$SYS"}, []row{
			{"$SYS/broker/load", "$SYS.broker.load", nil, true},
		}},
	} {
		m, err := NewMapping(c.local, c.remote)
		if err != nil {
			t.Errorf("NewMapping(%q, %q): %v", c.local, c.remote, err)
			continue
		}
		if !slices.Equal(m.Subjects(), c.subjects) {
			t.Errorf("NewMapping(%q, %q).Subjects() = %q, want %q", c.local, c.remote, m.Subjects(), c.subjects)
		}
		for _, r := range c.rows {
			got, err := m.Out(r.topic)
			if r.out != nil {
				if !errors.Is(err, r.out) {
					t.Errorf("%s ⇄ %s: Out(%q) = %q, %v; want %v", c.local, c.remote, r.topic, got, err, r.out)
				}
				continue
			}
			if err != nil || got != r.subject {
				t.Errorf("%s ⇄ %s: Out(%q) = %q, %v; want %q", c.local, c.remote, r.topic, got, err, r.subject)
				continue
			}
			if r.in {
				if back, err := m.In(got); err != nil || back != r.topic {
					t.Errorf("%s ⇄ %s: In(%q) = %q, %v; want %q", c.local, c.remote, got, back, err, r.topic)
				}
			}
		}
	}
}

func TestMappingInRefuses(t *testing.T) {
	for _, c := range []struct {
		local, remote, subject string
		want                   error
	}{
		{"sensors/#", "iot.sensors.>", "iot.other.x", ErrOutsideRule},
		{"sensors/#", "iot.sensors.>", "iot.sensorsX.a", ErrOutsideRule},
		{"sensors/#", "iot.sensors.>", "iot", ErrOutsideRule},
		{"sensors/#", "iot.sensors.>", "iot.sensors.a/b", ErrUnmappable},
		{"sensors/#", "iot.sensors.>", "iot.sensors.", ErrUnmappable},
		{"sensors/#", "iot.sensors.>", "iot.sensors..a", ErrUnmappable},
		{"sensors/#", "iot.sensors.>", "iot.sensors.*", ErrUnmappable},
		{"sensors/#", "iot.sensors.>", "iot.sensors.+", ErrUnmappable},
		{"sensors/#", ">", "$JS.API.INFO", ErrOutsideRule},
		{"#", ">", "$MQTT.sess.x", ErrOutsideRule},
		{"#", "site.>", "site", ErrOutsideRule}, // "#" has no parent level
		{"sensors/+/temp", "iot.*.temp", "iot.a.b.temp", ErrOutsideRule},
		{"a/b", "x.y", "x.z", ErrOutsideRule},
	} {
		m, err := NewMapping(c.local, c.remote)
		if err != nil {
			t.Fatalf("NewMapping(%q, %q): %v", c.local, c.remote, err)
		}
		if got, err := m.In(c.subject); !errors.Is(err, c.want) {
			t.Errorf("%s ⇄ %s: In(%q) = %q, %v; want %v", c.local, c.remote, c.subject, got, err, c.want)
		}
	}
}

// A subject a NATS server would cut the connection for is not sent.
func TestMappingOutLongSubject(t *testing.T) {
	m, err := NewMapping("#", ">")
	if err != nil {
		t.Fatal(err)
	}
	topic := strings.Repeat("a.", MaxSubjectLength/3+1) // each '.' doubles
	if got, err := m.Out(topic[2:]); err != nil {
		t.Fatalf("Out(%d-byte topic) = %d bytes, %v; want it sent", len(topic)-2, len(got), err)
	}
	if got, err := m.Out(topic); !errors.Is(err, ErrUnmappable) {
		t.Fatalf("Out(%d-byte topic) = %d bytes, %v; want ErrUnmappable", len(topic), len(got), err)
	}
}

// natsCharRules restates, a character at a time, how nats-server v2.15.2
// converts an MQTT topic or filter (mqttToNATSSubjectConversion, the rules
// in its comment and the "previous output was a separator" case in its
// code): '/' is "/." at the start or after a separator, "./" before another
// '/' or at the end, '.' otherwise; '.' is "//"; '+' '*', '#' '>'; a
// trailing '.' gets a '/'. Written apart from subject.go's level-by-level
// form, so the fuzzer can check that the two agree.
func natsCharRules(topic string) string {
	var out []byte
	for i := 0; i < len(topic); i++ {
		switch c := topic[i]; c {
		case '/':
			switch {
			case i == 0 || out[len(out)-1] == '.':
				out = append(out, '/', '.')
			case i == len(topic)-1 || topic[i+1] == '/':
				out = append(out, '.', '/')
			default:
				out = append(out, '.')
			}
		case '.':
			out = append(out, '/', '/')
		case '+':
			out = append(out, '*')
		case '#':
			out = append(out, '>')
		default:
			out = append(out, c)
		}
	}
	if len(out) > 0 && out[len(out)-1] == '.' {
		out = append(out, '/')
	}
	return string(out)
}

var fuzzSeeds = []string{
	"a", "a/b", "a.b", "/", "//", "/a", "a/", "a//b", "./.", "spBv1.0/g/NBIRTH/e",
	"a/./b", "$SYS/x", "é/日本", "a/*", "a b", "+/#", "a/+/b/#", "a/b/", "iot.sensors.>",
	"a./b", "a/.b", "...", "/./", "a\x01b", "a/b//", "a//b/", "/.a./", "a////b",
}

// Whatever the topic, when TopicToSubject maps it: SubjectToTopic maps the
// subject back to it, NATS's character rules give the same subject, and the
// subject is a valid literal one (non-empty tokens, no wildcard token).
func FuzzTopicRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		s, err := TopicToSubject(topic)
		if err != nil {
			if !errors.Is(err, ErrUnmappable) {
				t.Fatalf("TopicToSubject(%q): %v is not ErrUnmappable", topic, err)
			}
			return
		}
		if nats := natsCharRules(topic); s != nats {
			t.Fatalf("TopicToSubject(%q) = %q; NATS's rules give %q", topic, s, nats)
		}
		for tok := range strings.SplitSeq(s, ".") {
			if tok == "" || tok == "*" || tok == ">" {
				t.Fatalf("TopicToSubject(%q) = %q: token %q", topic, s, tok)
			}
		}
		back, err := SubjectToTopic(s)
		if err != nil || back != topic {
			t.Fatalf("SubjectToTopic(TopicToSubject(%q) = %q) = %q, %v", topic, s, back, err)
		}
	})
}

// Whatever the subject, when SubjectToTopic maps it, TopicToSubject maps the
// topic back to it: one subject per topic, one topic per subject.
func FuzzSubjectRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		topic, err := SubjectToTopic(subject)
		if err != nil {
			if !errors.Is(err, ErrUnmappable) {
				t.Fatalf("SubjectToTopic(%q): %v is not ErrUnmappable", subject, err)
			}
			return
		}
		if !utf8.ValidString(topic) {
			t.Fatalf("SubjectToTopic(%q) = %q: not UTF-8", subject, topic)
		}
		back, err := TopicToSubject(topic)
		if err != nil || back != subject {
			t.Fatalf("TopicToSubject(SubjectToTopic(%q) = %q) = %q, %v", subject, topic, back, err)
		}
	})
}

// A filter and its subjects round-trip the same way, and the first subject
// is NATS's.
func FuzzFilterRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, filter string) {
		ss, err := FilterToSubjects(filter)
		if err != nil {
			return
		}
		if nats := natsCharRules(filter); ss[0] != nats {
			t.Fatalf("FilterToSubjects(%q) = %q; NATS's rules give %q", filter, ss, nats)
		}
		back, err := SubjectToFilter(ss[0])
		if err != nil || back != filter {
			t.Fatalf("SubjectToFilter(%q) = %q, %v; want %q", ss[0], back, err, filter)
		}
	})
}

// Out and In are inverse for every topic a rule covers.
func FuzzMappingRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	rules := [][2]string{{"#", ">"}, {"sensors/#", "iot.s.>"}, {"+/#", "x.*.>"}, {"/#", "y.>"}, {"a/+/b/#", "z.*.b.>"}}
	var ms []*Mapping
	for _, r := range rules {
		m, err := NewMapping(r[0], r[1])
		if err != nil {
			f.Fatal(err)
		}
		ms = append(ms, m)
	}
	f.Fuzz(func(t *testing.T, tail string) {
		for _, m := range ms {
			for _, topic := range []string{tail, "sensors/" + tail, "a/" + tail + "/b/c"} {
				s, err := m.Out(topic)
				if err != nil {
					continue
				}
				back, err := m.In(s)
				if err != nil || back != topic {
					t.Fatalf("%s ⇄ %s: In(Out(%q) = %q) = %q, %v", m.Local(), m.Remote(), topic, s, back, err)
				}
			}
		}
	})
}

// go test -run '^$' -bench 'Subject|Topic|Mapping' -benchmem ./bridge/
func BenchmarkTopicToSubject(b *testing.B) {
	for _, topic := range []string{"temperature", "sensors/room1/temp", "spBv1.0/group1/DDATA/edge1/device1"} {
		b.Run(topic, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := TopicToSubject(topic); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSubjectToTopic(b *testing.B) {
	for _, subject := range []string{"temperature", "sensors.room1.temp", "spBv1//0.group1.DDATA.edge1.device1"} {
		b.Run(subject, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := SubjectToTopic(subject); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMapping(b *testing.B) {
	m, err := NewMapping("sensors/#", "iot.sensors.>")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Out", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Out("sensors/room1/temp"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("In", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.In("iot.sensors.room1.temp"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
