package bridge

// STOPGAP until branch bridge-map lands (subject.go, headers.go): the
// smallest topic ⇄ subject and header mapping the link needs, so that it
// can be built and tested. Deleted on merge; nats.go calls only
// newRuleMapping, toNATS and fromNATS.

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tolsey/tolsey/core"
)

type ruleMapping struct {
	localPrefix  string // literal levels of the local filter before a wildcard, with trailing "/"
	remotePrefix string // the same for the remote subject, with trailing "."
}

func literalPrefix(s string, sep byte) string {
	toks := strings.Split(s, string(sep))
	var out []string
	for _, t := range toks {
		if t == "+" || t == "#" || t == "*" || t == ">" {
			break
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return ""
	}
	if len(out) == len(toks) {
		return strings.Join(out, string(sep))
	}
	return strings.Join(out, string(sep)) + string(sep)
}

func newRuleMapping(r *Rule) *ruleMapping {
	return &ruleMapping{localPrefix: literalPrefix(r.Local, '/'), remotePrefix: literalPrefix(r.Remote, '.')}
}

var errUnmappable = errors.New("not expressible as a NATS subject")

func topicToSubject(t string) (string, error) {
	if t == "" || strings.ContainsAny(t, " \t\r\n*>") {
		return "", errUnmappable
	}
	levels := strings.Split(t, "/")
	for i, l := range levels {
		if l == "" {
			return "", errUnmappable
		}
		levels[i] = strings.ReplaceAll(l, ".", "//")
	}
	return strings.Join(levels, "."), nil
}

func subjectToTopic(s string) (string, error) {
	if s == "" || strings.ContainsAny(s, "+#") {
		return "", errUnmappable
	}
	s = strings.ReplaceAll(s, "//", "\x00")
	toks := strings.Split(s, ".")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(t, "\x00", ".")
	}
	return strings.Join(toks, "/"), nil
}

// Out maps a topic matching the rule's local filter to its subject.
func (m *ruleMapping) Out(topic string) (string, error) {
	rest, ok := strings.CutPrefix(topic, m.localPrefix)
	if !ok {
		return "", errUnmappable
	}
	if rest == "" {
		return strings.TrimSuffix(m.remotePrefix, "."), nil
	}
	s, err := topicToSubject(rest)
	if err != nil {
		return "", err
	}
	return m.remotePrefix + s, nil
}

// In maps a subject matching the rule's remote pattern to its topic.
func (m *ruleMapping) In(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, m.remotePrefix)
	if !ok {
		return "", errUnmappable
	}
	if rest == "" {
		return strings.TrimSuffix(m.localPrefix, "/"), nil
	}
	t, err := subjectToTopic(rest)
	if err != nil {
		return "", err
	}
	return m.localPrefix + t, nil
}

const (
	hdrPath          = "Tolsey-Path"
	hdrRetain        = "Tolsey-Retain"
	hdrContentType   = "Content-Type"
	hdrExpiry        = "Tolsey-Expiry"
	hdrUserPrefix    = "Tolsey-Prop-"
	hdrResponseTopic = "Tolsey-Response-Subject"
	hdrCorrelation   = "Tolsey-Correlation"
	hdrFormat        = "Tolsey-Payload-Format"
)

// toNATS builds the NATS message of m, its hop path being ours.
func toNATS(subject string, m *core.Message, node string, now time.Time) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = m.Payload
	msg.Header.Set(hdrPath, node)
	if m.Retain {
		msg.Header.Set(hdrRetain, "1")
	}
	if m.ContentType != "" {
		msg.Header.Set(hdrContentType, m.ContentType)
	}
	if s, ok := m.RemainingExpiry(now); ok {
		msg.Header.Set(hdrExpiry, strconv.FormatUint(uint64(s), 10))
	}
	if m.ResponseTopic != "" {
		if s, err := topicToSubject(m.ResponseTopic); err == nil {
			msg.Header.Set(hdrResponseTopic, s)
		}
	}
	if m.CorrelationData != nil {
		msg.Header.Set(hdrCorrelation, string(m.CorrelationData))
	}
	if m.PayloadFormat != 0 {
		msg.Header.Set(hdrFormat, "1")
	}
	for _, p := range m.UserProperties {
		msg.Header.Add(hdrUserPrefix+p.Key, p.Value)
	}
	return msg
}

// fromNATS reads a NATS message into a core.Message (Topic left empty) and
// its hop path.
func fromNATS(msg *nats.Msg, now time.Time) (*core.Message, []string) {
	m := &core.Message{Payload: msg.Data}
	h := msg.Header
	if h == nil {
		return m, nil
	}
	m.Retain = h.Get(hdrRetain) == "1"
	m.ContentType = h.Get(hdrContentType)
	if s := h.Get(hdrExpiry); s != "" {
		if n, err := strconv.ParseUint(s, 10, 32); err == nil {
			m.Expiry = now.Add(time.Duration(n) * time.Second)
		}
	}
	if s := h.Get(hdrResponseTopic); s != "" {
		if t, err := subjectToTopic(s); err == nil {
			m.ResponseTopic = t
		}
	}
	if s, ok := h[hdrCorrelation]; ok && len(s) > 0 {
		m.CorrelationData = []byte(s[0])
	}
	if h.Get(hdrFormat) == "1" {
		m.PayloadFormat = 1
	}
	for k, vs := range h {
		if name, ok := strings.CutPrefix(k, hdrUserPrefix); ok {
			for _, v := range vs {
				m.UserProperties = append(m.UserProperties, core.UserProperty{Key: name, Value: v})
			}
		}
	}
	var path []string
	for _, p := range strings.Split(h.Get(hdrPath), ",") {
		if p != "" {
			path = append(path, p)
		}
	}
	return m, path
}
