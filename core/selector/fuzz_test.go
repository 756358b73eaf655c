package selector

import (
	"errors"
	"testing"
)

// FuzzParse: whatever a client sends as a selector, Parse returns a
// selector or an *Error that points inside it, never panics, and a
// selector it returns evaluates (over typed and untyped properties)
// without panicking. test/fuzz-short runs it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "color = 'red'", "a = 'it''s'", "price * 2 + 1 > 10.5e1 AND NOT vip",
		"x BETWEEN -1 AND 0x10 OR y NOT BETWEEN 1L AND .5",
		"c IN ('a', 'b') AND d NOT IN ('')", "p LIKE 'a!_%' ESCAPE '!' OR q NOT LIKE '_'",
		"z IS NULL OR z IS NOT NULL", "JMSPriority > 3 AND JMSDeliveryMode = 'PERSISTENT'",
		"((((a = 1))))", "NOT NOT NOT a", "-9223372036854775808 < a", "a / 0 = 1", "TRUE",
		"a = 1e309", "'unterminated", "é_ñ = 'ü'",
	} {
		f.Add(s)
	}
	srcs := []Source{
		Message(msg("a", "1", "x", "0.5", "y", "-3", "c", "a", "p", "a_bc", "vip", "TRUE", "price", "1e308", "z", "")),
		typedSource{"a": LongValue(1), "x": DoubleValue(-0.5), "c": StringValue("b"), "vip": BoolValue(false), "p": LongValue(3)},
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse(src, Limits{})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q): %T %v, want an *Error", src, err, err)
			}
			if e.Pos < 0 || e.Pos > len(src) && e.Pos != DefaultMaxLength {
				t.Fatalf("Parse(%q): position %d outside the selector", src, e.Pos)
			}
			return
		}
		if s.String() != src {
			t.Fatalf("String() = %q, want %q", s.String(), src)
		}
		for _, x := range srcs {
			s.Match(x)
		}
	})
}
