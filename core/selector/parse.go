package selector

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits bound what Parse accepts: a selector comes from a client and is
// parsed on the attach path, then evaluated for every message.
type Limits struct {
	// MaxLength is the longest selector in bytes; 0 means DefaultMaxLength.
	MaxLength int
	// MaxDepth bounds the nesting of the parsed tree (parentheses, NOT,
	// unary signs, operator chains; a chain of AND or of OR counts once):
	// both the parser and the evaluation recurse that deep. 0 means
	// DefaultMaxDepth.
	MaxDepth int
}

// Defaults of Limits.
const (
	DefaultMaxLength = 4096
	DefaultMaxDepth  = 64
)

// Error is a selector that does not parse: Pos is the byte offset (from 0)
// where the parser stopped, Msg what it expected.
type Error struct {
	Pos int
	Msg string
}

func (e *Error) Error() string {
	return fmt.Sprintf("selector: at position %d: %s", e.Pos+1, e.Msg)
}

// Parse parses a selector. An empty (or blank) one selects every message:
// Match of the result is always true. The grammar and its typing rules are
// Jakarta Messaging 3.1 §3.8.1.1; a selector whose types cannot work
// (`'a' + 1`, `1 < 'b'`, `price AND 3`) fails here rather than
// selecting nothing forever. Literals: 'text' (” is a quote), 57, +62,
// 0x1F and 10L (long), 7E3, 7., .5 (double), TRUE, FALSE; keywords in
// any case; identifiers as Java's, case-sensitive.
func Parse(src string, lim Limits) (*Selector, error) {
	if lim.MaxLength <= 0 {
		lim.MaxLength = DefaultMaxLength
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultMaxDepth
	}
	if len(src) > lim.MaxLength {
		return nil, &Error{Pos: lim.MaxLength, Msg: fmt.Sprintf("longer than %d bytes", lim.MaxLength)}
	}
	p := &parser{src: src, maxDepth: lim.MaxDepth}
	p.next()
	if p.tok.kind == tEOF {
		return &Selector{src: src}, nil
	}
	root, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.errorf("unexpected %s", p.tok)
	}
	if root.t == tyNum || root.t == tyStr {
		return nil, &Error{Pos: 0, Msg: "not a condition: the selector must be a boolean expression"}
	}
	return &Selector{src: src, root: root.n}, nil
}

// Static types, checked at parse time. An identifier is tyAny: its value's
// type is known only per message.
type ty uint8

const (
	tyAny ty = iota
	tyBool
	tyNum
	tyStr
)

// typed is a parsed subtree, its static type and its depth.
type typed struct {
	n     node
	t     ty
	depth int
	ident bool // a bare identifier (IN, LIKE and IS NULL want one)
}

// Token kinds.
const (
	tEOF = iota
	tIdent
	tKeyword // Text upper-cased
	tString
	tLong
	tDouble
	tOp // Text: = <> < <= > >= + - * / ( ) ,
	tBad
)

type token struct {
	kind int
	pos  int
	text string // identifier, keyword, operator, or the string literal's value
	i    int64
	f    float64
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of selector"
	case tString:
		return "string " + strconv.Quote(t.text)
	case tLong, tDouble:
		return "number"
	}
	return strconv.Quote(t.text)
}

var keywords = map[string]bool{
	"NOT": true, "AND": true, "OR": true, "BETWEEN": true, "LIKE": true, "IN": true,
	"IS": true, "NULL": true, "TRUE": true, "FALSE": true, "ESCAPE": true,
}

type parser struct {
	src      string
	pos      int
	tok      token
	err      *Error // a lexical error, reported when the parser reaches it
	depth    int
	maxDepth int
}

func (p *parser) errorf(format string, args ...any) *Error {
	if p.err != nil {
		return p.err
	}
	return &Error{Pos: p.tok.pos, Msg: fmt.Sprintf(format, args...)}
}

// next reads the next token into p.tok.
func (p *parser) next() {
	s := p.src
	for p.pos < len(s) {
		r, w := utf8.DecodeRuneInString(s[p.pos:])
		if !unicode.IsSpace(r) {
			break
		}
		p.pos += w
	}
	start := p.pos
	p.tok = token{kind: tEOF, pos: start}
	if start == len(s) {
		return
	}
	c := s[start]
	switch {
	case c == '\'':
		p.lexString()
	case isDigit(c) || c == '.' && start+1 < len(s) && isDigit(s[start+1]):
		p.lexNumber()
	case strings.ContainsRune("=+-*/(),", rune(c)):
		p.pos++
		p.tok = token{kind: tOp, pos: start, text: s[start:p.pos]}
	case c == '<' || c == '>':
		p.pos++
		if p.pos < len(s) && (s[p.pos] == '=' || c == '<' && s[p.pos] == '>') {
			p.pos++
		}
		p.tok = token{kind: tOp, pos: start, text: s[start:p.pos]}
	default:
		r, w := utf8.DecodeRuneInString(s[start:])
		if !isIdentStart(r) {
			p.bad(start, fmt.Sprintf("unexpected character %q", r))
			return
		}
		p.pos += w
		for p.pos < len(s) {
			r, w := utf8.DecodeRuneInString(s[p.pos:])
			if !isIdentStart(r) && !unicode.IsDigit(r) {
				break
			}
			p.pos += w
		}
		word := s[start:p.pos]
		if up := strings.ToUpper(word); keywords[up] {
			p.tok = token{kind: tKeyword, pos: start, text: up}
		} else {
			p.tok = token{kind: tIdent, pos: start, text: word}
		}
	}
}

func isIdentStart(r rune) bool { return r == '_' || r == '$' || unicode.IsLetter(r) }

func (p *parser) bad(pos int, msg string) {
	p.err = &Error{Pos: pos, Msg: msg}
	p.tok = token{kind: tBad, pos: pos, text: msg}
	p.pos = len(p.src)
}

// lexString reads 'text', where ” stands for one quote.
func (p *parser) lexString() {
	s, start := p.src, p.pos
	var b strings.Builder
	for i := start + 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		p.pos = i + 1
		p.tok = token{kind: tString, pos: start, text: b.String()}
		return
	}
	p.bad(start, "string literal not terminated")
}

// lexNumber reads an exact (57, 0x1F, 10L) or approximate (7E3, 7., .5)
// literal. Its sign is a unary operator: the parser folds it.
func (p *parser) lexNumber() {
	s, start := p.src, p.pos
	i := start
	if s[i] == '0' && i+1 < len(s) && (s[i+1] == 'x' || s[i+1] == 'X') {
		i += 2
		h := i
		for i < len(s) && strings.IndexByte("0123456789abcdefABCDEF", s[i]) >= 0 {
			i++
		}
		v, err := strconv.ParseUint(s[h:i], 16, 64)
		if err != nil || v > math.MaxInt64 {
			p.bad(start, "bad hexadecimal literal")
			return
		}
		p.endNumber(start, i, token{kind: tLong, i: int64(v)})
		return
	}
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	approx := false
	if i < len(s) && s[i] == '.' {
		approx = true
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		approx = true
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		e := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == e {
			p.bad(start, "bad exponent")
			return
		}
	}
	if approx {
		f, err := strconv.ParseFloat(s[start:i], 64)
		if err != nil {
			p.bad(start, "approximate literal out of range")
			return
		}
		p.endNumber(start, i, token{kind: tDouble, f: f})
		return
	}
	lit := s[start:i]
	if i < len(s) && (s[i] == 'l' || s[i] == 'L') {
		i++
	}
	v, err := strconv.ParseUint(lit, 10, 64)
	if err != nil || v > 1<<63 {
		p.bad(start, "exact literal out of the range of a long")
		return
	}
	// 1<<63 is only valid negated (-9223372036854775808): the parser
	// checks, and stores it as its two's complement.
	p.endNumber(start, i, token{kind: tLong, i: int64(v), text: lit})
}

func (p *parser) endNumber(start, end int, t token) {
	if end < len(p.src) {
		if r, _ := utf8.DecodeRuneInString(p.src[end:]); isIdentStart(r) || r == '.' || unicode.IsDigit(r) {
			p.bad(end, fmt.Sprintf("unexpected %q after a number", r))
			return
		}
	}
	t.pos = start
	p.pos = end
	p.tok = t
}

func (p *parser) isOp(op string) bool { return p.tok.kind == tOp && p.tok.text == op }
func (p *parser) isKw(kw string) bool { return p.tok.kind == tKeyword && p.tok.text == kw }
func (p *parser) expect(op string) error {
	if !p.isOp(op) {
		return p.errorf("expected %q, found %s", op, p.tok)
	}
	p.next()
	return nil
}

// enter counts one level of nesting; leave must follow.
func (p *parser) enter() error {
	p.depth++
	if p.depth > p.maxDepth {
		return p.errorf("nested deeper than %d", p.maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// mk builds a node over kids, checking the tree's depth.
func (p *parser) mk(pos int, n node, t ty, kids ...typed) (typed, error) {
	d := 0
	for _, k := range kids {
		d = max(d, k.depth)
	}
	if d+1 > p.maxDepth {
		return typed{}, &Error{Pos: pos, Msg: fmt.Sprintf("nested deeper than %d", p.maxDepth)}
	}
	return typed{n: n, t: t, depth: d + 1}, nil
}

// want checks that x may be an operand of op, whose operands are of type t.
func want(x typed, t ty, pos int, op string) error {
	if x.t == tyAny || x.t == t {
		return nil
	}
	what := map[ty]string{tyBool: "a boolean", tyNum: "a number", tyStr: "a string"}
	return &Error{Pos: pos, Msg: fmt.Sprintf("%s wants %s operand, not %s", op, what[t], what[x.t])}
}

// expr := and (OR and)*
func (p *parser) expr() (typed, error) {
	return p.chain("OR", p.and, 1)
}

// and := not (AND not)*
func (p *parser) and() (typed, error) {
	return p.chain("AND", p.not, 0)
}

// chain parses a chain of one boolean operator into one n-ary node, so
// that `a=1 OR a=2 OR … OR a=500` is one level deep, not 500.
func (p *parser) chain(kw string, sub func() (typed, error), decides int) (typed, error) {
	pos := p.tok.pos
	first, err := sub()
	if err != nil || !p.isKw(kw) {
		return first, err
	}
	kids := []typed{first}
	for p.isKw(kw) {
		p.next()
		x, err := sub()
		if err != nil {
			return typed{}, err
		}
		kids = append(kids, x)
	}
	xs := make([]node, len(kids))
	for i, k := range kids {
		if err := want(k, tyBool, pos, kw); err != nil {
			return typed{}, err
		}
		xs[i] = k.n
	}
	return p.mk(pos, &chainNode{xs: xs, decides: decides}, tyBool, kids...)
}

// not := NOT not | comparison
func (p *parser) not() (typed, error) {
	if !p.isKw("NOT") {
		return p.comparison()
	}
	pos := p.tok.pos
	if err := p.enter(); err != nil {
		return typed{}, err
	}
	defer p.leave()
	p.next()
	x, err := p.not()
	if err != nil {
		return typed{}, err
	}
	if err := want(x, tyBool, pos, "NOT"); err != nil {
		return typed{}, err
	}
	return p.mk(pos, &notNode{x.n}, tyBool, x)
}

var cmpOps = map[string]byte{"=": '=', "<>": 'n', "<": '<', "<=": 'l', ">": '>', ">=": 'g'}

// comparison := sum [ cmp-op sum | [NOT] BETWEEN sum AND sum
//
//	| [NOT] IN ( 'a', … ) | [NOT] LIKE 'p' [ESCAPE 'c'] | IS [NOT] NULL ]
func (p *parser) comparison() (typed, error) {
	l, err := p.sum()
	if err != nil {
		return typed{}, err
	}
	pos := p.tok.pos
	if op, ok := cmpOps[p.tok.text]; ok && p.tok.kind == tOp {
		what := "comparison " + p.tok.text
		p.next()
		r, err := p.sum()
		if err != nil {
			return typed{}, err
		}
		if op != '=' && op != 'n' {
			for _, x := range []typed{l, r} {
				if err := want(x, tyNum, pos, what); err != nil {
					return typed{}, err
				}
			}
		}
		return p.mk(pos, &cmpNode{op: op, l: l.n, r: r.n}, tyBool, l, r)
	}
	if p.isKw("IS") {
		p.next()
		not := p.isKw("NOT")
		if not {
			p.next()
		}
		if !p.isKw("NULL") {
			return typed{}, p.errorf("expected NULL, found %s", p.tok)
		}
		p.next()
		if !l.ident {
			return typed{}, &Error{Pos: pos, Msg: "IS NULL applies to an identifier"}
		}
		return p.mk(pos, &nullNode{x: l.n, not: not}, tyBool, l)
	}
	not := p.isKw("NOT")
	if not {
		p.next()
	}
	switch {
	case p.isKw("BETWEEN"):
		p.next()
		lo, err := p.sum()
		if err != nil {
			return typed{}, err
		}
		if !p.isKw("AND") {
			return typed{}, p.errorf("expected AND, found %s", p.tok)
		}
		p.next()
		hi, err := p.sum()
		if err != nil {
			return typed{}, err
		}
		for _, x := range []typed{l, lo, hi} {
			if err := want(x, tyNum, pos, "BETWEEN"); err != nil {
				return typed{}, err
			}
		}
		return p.mk(pos, &betweenNode{x: l.n, lo: lo.n, hi: hi.n, not: not}, tyBool, l, lo, hi)
	case p.isKw("IN"):
		p.next()
		set, err := p.stringList()
		if err != nil {
			return typed{}, err
		}
		if !l.ident {
			return typed{}, &Error{Pos: pos, Msg: "IN applies to an identifier"}
		}
		return p.mk(pos, &inNode{x: l.n, set: set, not: not}, tyBool, l)
	case p.isKw("LIKE"):
		p.next()
		if p.tok.kind != tString {
			return typed{}, p.errorf("LIKE wants a string literal, found %s", p.tok)
		}
		pat, patPos := p.tok.text, p.tok.pos
		p.next()
		esc := rune(-1)
		if p.isKw("ESCAPE") {
			p.next()
			if p.tok.kind != tString || utf8.RuneCountInString(p.tok.text) != 1 {
				return typed{}, p.errorf("ESCAPE wants a string of one character, found %s", p.tok)
			}
			esc, _ = utf8.DecodeRuneInString(p.tok.text)
			p.next()
		}
		cp, ok := compilePattern(pat, esc)
		if !ok {
			return typed{}, &Error{Pos: patPos, Msg: "LIKE pattern ends with its escape character"}
		}
		if !l.ident {
			return typed{}, &Error{Pos: pos, Msg: "LIKE applies to an identifier"}
		}
		return p.mk(pos, &likeNode{x: l.n, pat: cp, not: not}, tyBool, l)
	case not:
		return typed{}, p.errorf("expected BETWEEN, IN or LIKE after NOT, found %s", p.tok)
	}
	return l, nil
}

// stringList := ( 'a' [, 'b']* )
func (p *parser) stringList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var set []string
	for {
		if p.tok.kind != tString {
			return nil, p.errorf("IN wants string literals, found %s", p.tok)
		}
		set = append(set, p.tok.text)
		p.next()
		if !p.isOp(",") {
			break
		}
		p.next()
	}
	return set, p.expect(")")
}

// sum := product ((+|-) product)*
func (p *parser) sum() (typed, error) {
	return p.arith(p.product, "+", "-")
}

// product := unary ((*|/) unary)*
func (p *parser) product() (typed, error) {
	return p.arith(p.unary, "*", "/")
}

func (p *parser) arith(sub func() (typed, error), op1, op2 string) (typed, error) {
	l, err := sub()
	if err != nil {
		return typed{}, err
	}
	for p.isOp(op1) || p.isOp(op2) {
		pos, op := p.tok.pos, p.tok.text
		p.next()
		r, err := sub()
		if err != nil {
			return typed{}, err
		}
		for _, x := range []typed{l, r} {
			if err := want(x, tyNum, pos, "operator "+op); err != nil {
				return typed{}, err
			}
		}
		if l, err = p.mk(pos, &arithNode{op: op[0], l: l.n, r: r.n}, tyNum, l, r); err != nil {
			return typed{}, err
		}
	}
	return l, nil
}

// unary := (+|-) unary | primary
func (p *parser) unary() (typed, error) {
	if !p.isOp("-") && !p.isOp("+") {
		return p.primary()
	}
	pos, neg := p.tok.pos, p.isOp("-")
	if err := p.enter(); err != nil {
		return typed{}, err
	}
	defer p.leave()
	p.next()
	if neg && p.tok.kind == tLong { // fold, so that the smallest long parses
		t := p.tok
		p.next()
		return typed{n: &literal{LongValue(-t.i)}, t: tyNum, depth: 1}, nil
	}
	x, err := p.unary()
	if err != nil {
		return typed{}, err
	}
	if err := want(x, tyNum, pos, "sign"); err != nil {
		return typed{}, err
	}
	if !neg {
		return x, nil
	}
	return p.mk(pos, &negNode{x.n}, tyNum, x)
}

// primary := literal | identifier | ( expr )
func (p *parser) primary() (typed, error) {
	t := p.tok
	switch t.kind {
	case tString:
		p.next()
		return typed{n: &literal{StringValue(t.text)}, t: tyStr, depth: 1}, nil
	case tLong:
		if uint64(t.i) == 1<<63 {
			return typed{}, &Error{Pos: t.pos, Msg: "exact literal out of the range of a long"}
		}
		p.next()
		return typed{n: &literal{LongValue(t.i)}, t: tyNum, depth: 1}, nil
	case tDouble:
		p.next()
		return typed{n: &literal{DoubleValue(t.f)}, t: tyNum, depth: 1}, nil
	case tIdent:
		p.next()
		if h, ok := headerNames[t.text]; ok {
			return typed{n: &header{h}, t: tyAny, depth: 1, ident: true}, nil
		}
		return typed{n: &prop{t.text}, t: tyAny, depth: 1, ident: true}, nil
	case tKeyword:
		switch t.text {
		case "TRUE", "FALSE":
			p.next()
			return typed{n: &literal{BoolValue(t.text == "TRUE")}, t: tyBool, depth: 1}, nil
		case "NULL":
			// §3.8.1.1 has NULL only in IS [NOT] NULL; a NULL operand
			// would make every comparison UNKNOWN, a selector that never
			// selects: refused as the mistake it is.
			return typed{}, p.errorf("NULL is only allowed in IS [NOT] NULL")
		}
	case tOp:
		if t.text == "(" {
			if err := p.enter(); err != nil {
				return typed{}, err
			}
			defer p.leave()
			p.next()
			x, err := p.expr()
			if err != nil {
				return typed{}, err
			}
			if err := p.expect(")"); err != nil {
				return typed{}, err
			}
			x.ident = false
			return p.mk(t.pos, x.n, x.t, x)
		}
	}
	return typed{}, p.errorf("unexpected %s", t)
}
