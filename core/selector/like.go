package selector

import "unicode/utf8"

// pattern is a compiled LIKE pattern: `_` stands for any one character,
// `%` for any sequence of characters (none included), anything else
// (and a wildcard after the ESCAPE character) for itself (§3.8.1.1).
// Characters are Unicode code points, as Java's are UTF-16 units: they
// differ only for characters outside the BMP, which `_` takes whole here.
type pattern []patElem

type patElem struct {
	kind byte // 0 a literal r, '_' any one, '%' any sequence
	r    rune
}

// compilePattern compiles p with the escape character esc (-1 for none).
// It fails on an escape character that escapes nothing at the end.
func compilePattern(p string, esc rune) (pattern, bool) {
	out := pattern{}
	escaped := false
	for _, r := range p {
		switch {
		case escaped:
			out = append(out, patElem{r: r})
			escaped = false
		case r == esc:
			escaped = true
		case r == '_' || r == '%':
			if r == '%' && len(out) > 0 && out[len(out)-1].kind == '%' {
				continue // %% is %: fewer backtracking points
			}
			out = append(out, patElem{kind: byte(r)})
		default:
			out = append(out, patElem{r: r})
		}
	}
	return out, !escaped
}

// match reports whether s matches p whole. The classic wildcard matcher:
// on a mismatch it backtracks to the last `%` only, so it runs in
// O(len(s)·len(p)) at worst and allocates nothing.
func (p pattern) match(s string) bool {
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(p) {
			e := p[pi]
			switch e.kind {
			case '%':
				starP, starS = pi, si
				pi++
				continue
			case '_':
				_, w := utf8.DecodeRuneInString(s[si:])
				si += w
				pi++
				continue
			default:
				if r, w := utf8.DecodeRuneInString(s[si:]); r == e.r {
					si += w
					pi++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		_, w := utf8.DecodeRuneInString(s[starS:])
		starS += w
		si, pi = starS, starP+1
	}
	for pi < len(p) && p[pi].kind == '%' {
		pi++
	}
	return pi == len(p)
}
