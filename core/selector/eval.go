package selector

import (
	"math"
	"strconv"
)

// Evaluation (Jakarta Messaging 3.1 §3.8.1.1). Three-valued logic: a
// condition is TRUE, FALSE or UNKNOWN (Null); a NULL operand makes a
// comparison, arithmetic, BETWEEN, IN or LIKE UNKNOWN; "if the comparison
// of non-like type values is attempted, the value of the operation is
// false" (so `s > 1` over a string s is FALSE, and `NOT (s > 1)` TRUE).
// Arithmetic on a non-numeric operand, and exact division by zero (which
// would throw in Java), are UNKNOWN. Numeric promotion as in Java: exact
// with exact stays exact (int64, wrapping on overflow as Java's long
// does), anything with an approximate operand is a double.

type (
	literal struct{ v Value }
	prop    struct{ name string }
	header  struct{ h Header }
	notNode struct{ x node }
	// chainNode is a chain of AND (decides 0: one FALSE makes it FALSE)
	// or of OR (decides 1: one TRUE makes it TRUE).
	chainNode struct {
		xs      []node
		decides int
	}
	negNode struct{ x node }
	cmpNode struct {
		op   byte // '=', 'n' (<>), '<', 'l' (<=), '>', 'g' (>=)
		l, r node
	}
	arithNode struct {
		op   byte // + - * /
		l, r node
	}
	betweenNode struct {
		x, lo, hi node
		not       bool
	}
	inNode struct {
		x   node
		set []string
		not bool
	}
	likeNode struct {
		x   node
		pat pattern
		not bool
	}
	nullNode struct {
		x   node
		not bool
	}
)

func (n *literal) eval(Source) Value     { return n.v }
func (n *prop) eval(src Source) Value    { return src.Property(n.name) }
func (n *header) eval(src Source) Value  { return src.Header(n.h) }
func (n *notNode) eval(src Source) Value { return boolOf(not(cond(n.x.eval(src)))) }

func not(c int) int {
	if c < 0 {
		return c
	}
	return 1 - c
}

func (n *chainNode) eval(src Source) Value {
	r := 1 - n.decides
	for _, x := range n.xs {
		switch c := cond(x.eval(src)); c {
		case n.decides:
			return BoolValue(c == 1)
		case -1:
			r = -1
		}
	}
	return boolOf(r)
}

func (n *negNode) eval(src Source) Value {
	v, ok := numeric(n.x.eval(src))
	switch {
	case !ok:
		return unknown
	case v.Kind == Long:
		return LongValue(-v.I)
	}
	return DoubleValue(-v.F)
}

func (n *arithNode) eval(src Source) Value {
	a, ok1 := numeric(n.l.eval(src))
	b, ok2 := numeric(n.r.eval(src))
	if !ok1 || !ok2 {
		return unknown
	}
	if a.Kind == Long && b.Kind == Long {
		switch n.op {
		case '+':
			return LongValue(a.I + b.I)
		case '-':
			return LongValue(a.I - b.I)
		case '*':
			return LongValue(a.I * b.I)
		}
		if b.I == 0 {
			return unknown
		}
		return LongValue(a.I / b.I)
	}
	x, y := float(a), float(b)
	switch n.op {
	case '+':
		return DoubleValue(x + y)
	case '-':
		return DoubleValue(x - y)
	case '*':
		return DoubleValue(x * y)
	}
	return DoubleValue(x / y)
}

func (n *cmpNode) eval(src Source) Value {
	a, b := n.l.eval(src), n.r.eval(src)
	switch n.op {
	case '=', 'n':
		e := equal(a, b)
		switch {
		case e == mismatch:
			return BoolValue(false)
		case n.op == 'n':
			e = not(e)
		}
		return boolOf(e)
	}
	return boolOf(order(n.op, a, b))
}

func (n *betweenNode) eval(src Source) Value {
	x, lo, hi := n.x.eval(src), n.lo.eval(src), n.hi.eval(src)
	if n.not {
		// x < lo OR x > hi, as §3.8.1.1 defines it: not NOT BETWEEN's
		// negation, which differs for unlike types (FALSE both ways).
		return boolOf(or3(order('<', x, lo), order('>', x, hi)))
	}
	return boolOf(and3(order('g', x, lo), order('l', x, hi)))
}

func and3(a, b int) int {
	if a == 0 || b == 0 {
		return 0
	}
	return min(a, b)
}

func or3(a, b int) int {
	if a == 1 || b == 1 {
		return 1
	}
	return min(a, b)
}

// notString answers IN and LIKE for an operand that is not a string:
// NULL is UNKNOWN, another type FALSE (unlike types, NOT or not).
func notString(x Value) (Value, bool) {
	switch {
	case x.Kind == Null:
		return unknown, true
	case !x.isStringlike():
		return BoolValue(false), true
	}
	return Value{}, false
}

func (n *inNode) eval(src Source) Value {
	x := n.x.eval(src)
	if r, ok := notString(x); ok {
		return r
	}
	for _, s := range n.set {
		if s == x.S {
			return BoolValue(!n.not)
		}
	}
	return BoolValue(n.not)
}

func (n *likeNode) eval(src Source) Value {
	x := n.x.eval(src)
	if r, ok := notString(x); ok {
		return r
	}
	return BoolValue(n.pat.match(x.S) != n.not)
}

func (n *nullNode) eval(src Source) Value {
	return BoolValue((n.x.eval(src).Kind == Null) != n.not)
}

// mismatch is equal's answer for operands of unlike types.
const mismatch = -2

// equal compares a and b for =: 1 equal, 0 not, -1 UNKNOWN (a NULL),
// mismatch (unlike types).
func equal(a, b Value) int {
	if a.Kind == Null || b.Kind == Null {
		return -1
	}
	if a.Kind == Text && b.Kind != Text { // untyped text takes the other's type
		a, b = b, a
	}
	if b.Kind == Text {
		switch {
		case a.isStringlike():
			return bit(a.S == b.S)
		case a.Kind == Bool:
			t := truth(b.S)
			if t < 0 {
				return mismatch
			}
			return bit(a.B == (t == 1))
		}
		nb, ok := parseNumber(b.S)
		if !ok {
			return mismatch
		}
		b = nb
	}
	switch {
	case a.isNumeric() && b.isNumeric():
		if a.Kind == Long && b.Kind == Long {
			return bit(a.I == b.I)
		}
		return bit(float(a) == float(b))
	case a.Kind == String && b.Kind == String:
		return bit(a.S == b.S)
	case a.Kind == Bool && b.Kind == Bool:
		return bit(a.B == b.B)
	}
	return mismatch
}

// order compares a and b for op ('<', 'l' <=, '>', 'g' >=): numbers only.
func order(op byte, a, b Value) int {
	if a.Kind == Null || b.Kind == Null {
		return -1
	}
	x, ok1 := numeric(a)
	y, ok2 := numeric(b)
	if !ok1 || !ok2 {
		return 0
	}
	c := 0
	if x.Kind == Long && y.Kind == Long {
		switch {
		case x.I < y.I:
			c = -1
		case x.I > y.I:
			c = 1
		}
	} else {
		f, g := float(x), float(y)
		switch {
		case math.IsNaN(f) || math.IsNaN(g):
			return 0
		case f < g:
			c = -1
		case f > g:
			c = 1
		}
	}
	switch op {
	case '<':
		return bit(c < 0)
	case 'l':
		return bit(c <= 0)
	case '>':
		return bit(c > 0)
	}
	return bit(c >= 0)
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

func float(v Value) float64 {
	if v.Kind == Long {
		return float64(v.I)
	}
	return v.F
}

// numeric returns v as a number: a numeric value as it is, untyped text
// that reads as one; ok is false otherwise.
func numeric(v Value) (Value, bool) {
	switch v.Kind {
	case Long, Double:
		return v, true
	case Text:
		return parseNumber(v.S)
	}
	return Value{}, false
}

// parseNumber reads untyped text as a Java literal would read it: an
// optional sign, digits, and for a double a point and/or an exponent. It
// checks the syntax itself before strconv sees the text, because a
// strconv error allocates and most text that is not a number fails here.
func parseNumber(s string) (Value, bool) {
	i, n := 0, len(s)
	if i < n && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits, exact := 0, true
	var acc uint64
	for ; i < n && isDigit(s[i]); i++ {
		digits++
		if acc > (math.MaxInt64-9)/10 {
			exact = false // too long for a long: read as a double below
		}
		acc = acc*10 + uint64(s[i]-'0')
	}
	if i < n && s[i] == '.' {
		exact = false
		for i++; i < n && isDigit(s[i]); i++ {
			digits++
		}
	}
	if digits == 0 {
		return Value{}, false
	}
	if i < n && (s[i] == 'e' || s[i] == 'E') {
		exact = false
		i++
		if i < n && (s[i] == '+' || s[i] == '-') {
			i++
		}
		e := i
		for ; i < n && isDigit(s[i]); i++ {
		}
		if i == e {
			return Value{}, false
		}
	}
	if i != n {
		return Value{}, false
	}
	if exact {
		v := int64(acc)
		if s[0] == '-' {
			v = -v
		}
		return LongValue(v), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // out of range: ±Inf with ErrRange, still a number
		return DoubleValue(f), !math.IsNaN(f)
	}
	return DoubleValue(f), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
