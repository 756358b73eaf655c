package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tolsey/tolsey/core"
	"go.yaml.in/yaml/v3"
)

// ParseError says where in the users file a value is wrong: its line and
// its path (users[2].password, acl[0].topic), and the user it belongs to.
type ParseError struct {
	Line int
	Path string
	User string // "" outside a user entry
	Err  error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	fmt.Fprintf(&b, "%s: %v", e.Path, e.Err)
	if e.User != "" {
		fmt.Fprintf(&b, " (user %q)", e.User)
	}
	return b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

func errAt(n *yaml.Node, path string, format string, args ...any) error {
	return &ParseError{Line: n.Line, Path: path, Err: fmt.Errorf(format, args...)}
}

// Parse reads a users file (docs/security.md, "The users file"). Unknown
// keys, duplicate users, plain-text passwords and bad topic filters are
// errors naming their place.
func Parse(b []byte) (*Store, error) { return parse(b, false) }

// ParseACL reads an ACL file (acl.file): the acl and default sections of
// a users file, and no users. WithACL puts its rules with a users file's
// users.
func ParseACL(b []byte) (*Store, error) { return parse(b, true) }

// LoadACL reads and parses the ACL file at path.
func LoadACL(path string) (*Store, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseACL(b)
}

// WithACL returns a Store with s's users and rules's ACL rules and default
// policy. It refuses when s has ACL rules of its own (an acl or default
// section): two lists whose combined meaning depends on how they are
// merged are a mistake to point out, not to guess at.
func (s *Store) WithACL(rules *Store) (*Store, error) {
	if s.hasRules {
		return nil, errors.New("the users file has acl rules (an acl or default section) too: keep them in one file")
	}
	out := &Store{users: s.users, acl: rules.acl, secret: s.secret, decoyOf: s.decoyOf, hasRules: true}
	return out, nil
}

func parse(b []byte, aclOnly bool) (*Store, error) {
	s := &Store{users: map[string]*user{}}
	s.acl.defaultAllow = true
	rand.Read(s.secret[:])
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return s, nil // an empty file: no users, no rules
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, errAt(root, "(top)", "want a mapping with users, acl and default")
	}
	var def *yaml.Node
	hasACL := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "users":
			if aclOnly {
				return nil, errAt(k, k.Value, "users belong in the users file (auth.file); this file holds acl and default")
			}
			if err := s.parseUsers(v); err != nil {
				return nil, err
			}
		case "acl":
			hasACL = true
			s.hasRules = true
			if err := s.parseACL(v); err != nil {
				return nil, err
			}
		case "default":
			def = v
			s.hasRules = true
		default:
			if aclOnly {
				return nil, errAt(k, k.Value, "unknown key (acl, default)")
			}
			return nil, errAt(k, k.Value, "unknown key (users, acl, default)")
		}
	}
	// The default is deny once the file has rules: a rule list is an
	// allow list unless it says otherwise.
	s.acl.defaultAllow = !hasACL
	if def != nil {
		switch def.Value {
		case "allow":
			s.acl.defaultAllow = true
		case "deny":
			s.acl.defaultAllow = false
		default:
			return nil, errAt(def, "default", "%q: want allow or deny", def.Value)
		}
	}
	return s, nil
}

func (s *Store) parseUsers(seq *yaml.Node) error {
	if seq.Kind != yaml.SequenceNode {
		return errAt(seq, "users", "want a list")
	}
	for i, n := range seq.Content {
		path := fmt.Sprintf("users[%d]", i)
		if n.Kind != yaml.MappingNode {
			return errAt(n, path, "want a mapping with name, password, scram, groups")
		}
		u := &user{}
		var pw, sc *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			var err error
			switch k.Value {
			case "name":
				u.name, err = scalar(v, path+".name")
			case "password":
				pw = v
			case "scram":
				sc = v
			case "groups":
				u.groups, err = names(v, path+".groups")
			default:
				err = errAt(k, path+"."+k.Value, "unknown key (name, password, scram, groups)")
			}
			if err != nil {
				return err
			}
		}
		if u.name == "" {
			return errAt(n, path+".name", "missing")
		}
		if s.users[u.name] != nil {
			return errAt(n, path+".name", "duplicate user %q", u.name)
		}
		named := func(err error) error {
			var pe *ParseError
			if errors.As(err, &pe) {
				pe.User = u.name
			}
			return err
		}
		if pw != nil {
			v, err := scalar(pw, path+".password")
			if err != nil {
				return named(err)
			}
			if u.hash, err = parseHash(v); err != nil {
				return named(&ParseError{Line: pw.Line, Path: path + ".password", Err: err})
			}
			if s.decoyOf == nil {
				s.decoyOf = u.hash
			}
		}
		if sc != nil {
			v, err := scalar(sc, path+".scram")
			if err != nil {
				return named(err)
			}
			if u.scram, err = ParseScramCredential(v); err != nil {
				return named(&ParseError{Line: sc.Line, Path: path + ".scram", Err: err})
			}
		}
		if u.hash == nil && u.scram == nil {
			return named(errAt(n, path+".password", "missing (a hash from gateway passwd, or a scram credential)"))
		}
		s.users[u.name] = u
	}
	return nil
}

func (s *Store) parseACL(seq *yaml.Node) error {
	if seq.Kind != yaml.SequenceNode {
		return errAt(seq, "acl", "want a list")
	}
	for i, n := range seq.Content {
		path := fmt.Sprintf("acl[%d]", i)
		if n.Kind != yaml.MappingNode {
			return errAt(n, path, "want a mapping with allow or deny, topic, users, groups")
		}
		r := &rule{index: i}
		effects := 0
		var topic *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			var err error
			switch k.Value {
			case "allow", "deny":
				effects++
				r.deny = k.Value == "deny"
				r.actions, err = actions(v, path+"."+k.Value)
			case "topic":
				topic = v
			case "users":
				r.users, err = names(v, path+".users")
			case "groups":
				r.groups, err = names(v, path+".groups")
			default:
				err = errAt(k, path+"."+k.Value, "unknown key (allow, deny, topic, users, groups)")
			}
			if err != nil {
				return err
			}
		}
		if effects != 1 {
			return errAt(n, path, "want exactly one of allow or deny")
		}
		if topic == nil {
			return errAt(n, path+".topic", "missing")
		}
		f, err := scalar(topic, path+".topic")
		if err != nil {
			return err
		}
		if err := r.setFilter(f); err != nil {
			return errAt(topic, path+".topic", "%q: %v", f, err)
		}
		s.acl.add(r)
	}
	return nil
}

// setFilter validates an ACL topic filter and records its specificity.
func (r *rule) setFilter(f string) error {
	if err := core.ValidateFilter(f); err != nil {
		return err
	}
	if core.IsShared(f) {
		return errors.New("a $share/ filter: write the filter it shares")
	}
	for rest, more := f, true; more; {
		var level string
		level, rest, more = cutLevel(rest)
		switch level {
		case "#":
			r.hasHash = true
		case "+":
			r.plus++
		default:
			r.literals++
			for p := level; ; {
				i := strings.IndexByte(p, '%')
				if i < 0 {
					break
				}
				if i+1 >= len(p) || p[i+1] != 'u' && p[i+1] != 'c' {
					return errors.New("'%' must start %u (user name) or %c (client id)")
				}
				r.pattern = true
				p = p[i+2:]
			}
		}
	}
	r.filter = f
	return nil
}

func scalar(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", errAt(n, path, "want a string")
	}
	return n.Value, nil
}

// names reads a list of names, or a single name.
func names(n *yaml.Node, path string) ([]string, error) {
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" {
			return nil, errAt(n, path, "empty name")
		}
		return []string{n.Value}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, errAt(n, path, "want a list of names")
	}
	out := make([]string, 0, len(n.Content))
	for i, e := range n.Content {
		v, err := scalar(e, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, errAt(e, fmt.Sprintf("%s[%d]", path, i), "empty name")
		}
		out = append(out, v)
	}
	return out, nil
}

// actions reads publish, subscribe or both, alone or as a list.
func actions(n *yaml.Node, path string) (Action, error) {
	list := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		list = n.Content
	}
	var a Action
	for i, e := range list {
		p := path
		if n.Kind == yaml.SequenceNode {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		v, err := scalar(e, p)
		if err != nil {
			return 0, err
		}
		switch v {
		case "publish":
			a |= Publish
		case "subscribe":
			a |= Subscribe
		case "both":
			a |= Publish | Subscribe
		default:
			return 0, errAt(e, p, "%q: want publish, subscribe or both", v)
		}
	}
	if a == 0 {
		return 0, errAt(n, path, "no action")
	}
	return a, nil
}
