// Package selector is the JMS message selector: the SQL-92 subset that
// Jakarta Messaging 3.1 §3.8.1.1 defines, parsed once (Parse) and then
// evaluated per message (Selector.Match) without allocating.
//
// It knows no protocol: a message is a Source (JMS header fields and
// properties by name). Message adapts a core.Message, whose properties are
// MQTT 5 user properties, that is untyped text (Text below); a front-end
// that keeps typed properties can offer its own Source and the JMS typing
// rules apply to them unchanged. docs/jms.md, "Selectors", is the user's
// page.
package selector

// Kind is the type of a Value.
type Kind uint8

// The kinds of value a selector computes with.
const (
	Null   Kind = iota // absent, or SQL NULL: comparisons with it are UNKNOWN
	Bool               // boolean
	Long               // exact numeric (Java byte, short, int, long)
	Double             // approximate numeric (Java float, double)
	String             // a typed string: only = and <>, LIKE, IN
	// Text is untyped text, what an MQTT 5 user property (and an AMQP
	// application property once in the core) is: it is a number where the
	// other operand or the operator wants one and the text reads as one
	// ("42", "-1.5e3"), a boolean where one is wanted and the text is
	// "true" or "false" (any case), and a string otherwise. A JMS
	// application sets typed properties and selects on them as typed
	// (price > 10 over setIntProperty("price", 12)), so the text the core
	// keeps must compare as the number it was; ActiveMQ Artemis and Qpid
	// Broker-J keep the types instead and never meet this case.
	Text
)

// Value is one operand: a property's value, a literal, an intermediate
// result. Only the field its Kind names is meaningful. A Value holds no
// pointer but S, so returning one costs no allocation.
type Value struct {
	Kind Kind
	B    bool
	I    int64
	F    float64
	S    string
}

// Constructors for the Values a Source returns.
func BoolValue(b bool) Value       { return Value{Kind: Bool, B: b} }
func LongValue(i int64) Value      { return Value{Kind: Long, I: i} }
func DoubleValue(f float64) Value  { return Value{Kind: Double, F: f} }
func StringValue(s string) Value   { return Value{Kind: String, S: s} }
func TextValue(s string) Value     { return Value{Kind: Text, S: s} }
func (v Value) isNumeric() bool    { return v.Kind == Long || v.Kind == Double }
func (v Value) isStringlike() bool { return v.Kind == String || v.Kind == Text }

// Header is a JMS header field a selector may name (§3.8.1.1: "Message
// header field references are restricted to JMSDeliveryMode, JMSPriority,
// JMSMessageID, JMSTimestamp, JMSCorrelationID, and JMSType"). Other names,
// JMSX ones included (JMSXDeliveryCount, JMSXGroupID), are properties.
type Header uint8

// The header fields, with the types a Source returns them as.
const (
	JMSDeliveryMode  Header = iota + 1 // String "PERSISTENT" or "NON_PERSISTENT"
	JMSPriority                        // Long 0..9
	JMSMessageID                       // String, or Null
	JMSTimestamp                       // Long, milliseconds since the epoch
	JMSCorrelationID                   // String, or Null
	JMSType                            // String, or Null
)

var headerNames = map[string]Header{
	"JMSDeliveryMode":  JMSDeliveryMode,
	"JMSPriority":      JMSPriority,
	"JMSMessageID":     JMSMessageID,
	"JMSTimestamp":     JMSTimestamp,
	"JMSCorrelationID": JMSCorrelationID,
	"JMSType":          JMSType,
}

// Source is a message as a selector sees it. Both methods are called once
// per reference per evaluation and must not allocate if evaluation is not
// to: return substrings of what the message holds.
type Source interface {
	// Header returns a header field (Null when the message has none).
	Header(h Header) Value
	// Property returns the property named name, Null when absent.
	Property(name string) Value
}

// Selector is a parsed selector. The nil *Selector selects every message,
// so a link without one can call Match unconditionally. A Selector is
// immutable: share it between goroutines freely.
type Selector struct {
	src  string
	root node
}

// String is the selector's text as given to Parse.
func (s *Selector) String() string {
	if s == nil {
		return ""
	}
	return s.src
}

// Match reports whether the message src selects: the selector evaluates
// to TRUE (FALSE and UNKNOWN do not select).
func (s *Selector) Match(src Source) bool {
	if s == nil || s.root == nil {
		return true
	}
	v := s.root.eval(src)
	return v.Kind == Bool && v.B || v.Kind == Text && truth(v.S) == 1
}

// node is one operator or operand of the parsed tree.
type node interface {
	eval(src Source) Value
}

// unknown is the UNKNOWN of three-valued logic.
var unknown = Value{}

// cond reads v as a condition: 1 TRUE, 0 FALSE, -1 UNKNOWN. A non-boolean
// value is UNKNOWN: it cannot select, with NOT or without.
func cond(v Value) int {
	switch v.Kind {
	case Bool:
		if v.B {
			return 1
		}
		return 0
	case Text:
		return truth(v.S)
	}
	return -1
}

// truth is cond for untyped text.
func truth(s string) int {
	switch {
	case equalFold(s, "true"):
		return 1
	case equalFold(s, "false"):
		return 0
	}
	return -1
}

func boolOf(c int) Value {
	if c < 0 {
		return unknown
	}
	return BoolValue(c == 1)
}

// equalFold is strings.EqualFold for an ASCII word w.
func equalFold(s, w string) bool {
	if len(s) != len(w) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}
