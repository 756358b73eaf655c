package selector

import (
	"testing"

	"github.com/tolsey/tolsey/core"
)

// TestJMSHeadersFromUserProperties: JMSType, JMSPriority and JMSTimestamp
// are the header user properties the AMQP front-end writes for a JMS
// message (or an MQTT publisher sets); a priority or time that does not
// parse counts as absent.
func TestJMSHeadersFromUserProperties(t *testing.T) {
	with := msg(core.PropSubject, "car", core.PropPriority, "9", core.PropCreationTime, "2023-11-14T22:13:20.123Z")
	millis := msg(core.PropCreationTime, "1700000000456")
	bad := msg(core.PropPriority, "high", core.PropCreationTime, "yesterday")
	for _, c := range []struct {
		m    *core.Message
		sel  string
		want bool
	}{
		{with, "JMSType = 'car'", true},
		{with, "JMSType LIKE 'c%' AND JMSPriority > 4", true},
		{with, "JMSPriority = 9", true},
		{with, "JMSTimestamp = 1700000000123", true},
		{millis, "JMSTimestamp = 1700000000456", true},
		{millis, "JMSType IS NULL AND JMSPriority = 4", true},
		{bad, "JMSPriority = 4 AND JMSTimestamp = 1700000000000", true},
	} {
		s, err := Parse(c.sel, Limits{})
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.sel, err)
		}
		if got := s.MatchMessage(c.m); got != c.want {
			t.Errorf("%q over %v: got %v, want %v", c.sel, c.m.UserProperties, got, c.want)
		}
	}
	s, _ := Parse("JMSType = 'car' AND JMSPriority > 4 AND JMSTimestamp > 0", Limits{})
	if n := testing.AllocsPerRun(100, func() { s.MatchMessage(with) }); n != 0 {
		t.Errorf("%v allocations per match over the header properties", n)
	}
}
