// SPDX-License-Identifier: MIT

package mqtt

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// The topic index before gateway patch 43 (each level found by walking the
// topic or filter from its start with isolateParticle), kept here to compare
// the index with, operation by operation.

func (x *TopicsIndex) oldSet(topic string, d int) *particle {
	var key string
	var hasNext = true
	n := x.root
	for hasNext {
		key, hasNext = isolateParticle(topic, d)
		d++
		p := n.particles.get(key)
		if p == nil {
			p = newParticle(key, n)
			n.particles.add(p)
		}
		n = p
	}
	return n
}

func (x *TopicsIndex) oldSeek(filter string, d int) *particle {
	var key string
	var hasNext = true
	n := x.root
	for hasNext {
		key, hasNext = isolateParticle(filter, d)
		n = n.particles.get(key)
		d++
		if n == nil {
			return nil
		}
	}
	return n
}

func (x *TopicsIndex) oldSubscribe(client string, subscription packets.Subscription) bool {
	x.root.Lock()
	defer x.root.Unlock()
	var existed bool
	prefix, _ := isolateParticle(subscription.Filter, 0)
	if strings.EqualFold(prefix, SharePrefix) {
		group, _ := isolateParticle(subscription.Filter, 1)
		n := x.oldSet(subscription.Filter, 2)
		_, existed = n.shared.Get(group, client)
		n.shared.Add(group, client, subscription)
	} else {
		n := x.oldSet(subscription.Filter, 0)
		_, existed = n.subscriptions.Get(client)
		n.subscriptions.Add(client, subscription)
	}
	return !existed
}

func (x *TopicsIndex) oldUnsubscribe(filter, client string) bool {
	x.root.Lock()
	defer x.root.Unlock()
	var d int
	prefix, _ := isolateParticle(filter, 0)
	shareSub := strings.EqualFold(prefix, SharePrefix)
	if shareSub {
		d = 2
	}
	particle := x.oldSeek(filter, d)
	if particle == nil {
		return false
	}
	if shareSub {
		group, _ := isolateParticle(filter, 1)
		particle.shared.Delete(group, client)
	} else {
		particle.subscriptions.Delete(client)
	}
	x.trim(particle)
	return true
}

func (x *TopicsIndex) oldInlineSubscribe(subscription InlineSubscription) bool {
	x.root.Lock()
	defer x.root.Unlock()
	n := x.oldSet(subscription.Filter, 0)
	_, existed := n.inlineSubscriptions.Get(subscription.Identifier)
	n.inlineSubscriptions.Add(subscription)
	return !existed
}

func (x *TopicsIndex) oldInlineUnsubscribe(id int, filter string) bool {
	x.root.Lock()
	defer x.root.Unlock()
	particle := x.oldSeek(filter, 0)
	if particle == nil {
		return false
	}
	particle.inlineSubscriptions.Delete(id)
	if particle.inlineSubscriptions.Len() == 0 {
		x.trim(particle)
	}
	return true
}

func (x *TopicsIndex) oldRetainMessage(pk packets.Packet) int64 {
	x.root.Lock()
	defer x.root.Unlock()
	n := x.oldSet(pk.TopicName, 0)
	n.Lock()
	defer n.Unlock()
	if len(pk.Payload) > 0 {
		n.retainPath = pk.TopicName
		x.Retained.Add(pk.TopicName, pk)
		return 1
	}
	var out int64
	if pke, ok := x.Retained.Get(pk.TopicName); ok && len(pke.Payload) > 0 && pke.FixedHeader.Retain {
		out = -1
	}
	n.retainPath = ""
	x.Retained.Delete(pk.TopicName)
	x.trim(n)
	return out
}

func (x *TopicsIndex) oldMessages(filter string) []packets.Packet {
	return x.oldScanMessages(filter, 0, nil, []packets.Packet{})
}

func (x *TopicsIndex) oldScanMessages(filter string, d int, n *particle, pks []packets.Packet) []packets.Packet {
	if n == nil {
		n = x.root
	}
	if len(filter) == 0 || x.Retained.Len() == 0 {
		return pks
	}
	if !strings.ContainsRune(filter, '#') && !strings.ContainsRune(filter, '+') {
		if pk, ok := x.Retained.Get(filter); ok {
			pks = append(pks, pk)
		}
		return pks
	}
	key, hasNext := isolateParticle(filter, d)
	if key == "+" || key == "#" || d == -1 {
		for _, adjacent := range n.particles.getAll() {
			if d == 0 && adjacent.key == SysPrefix {
				continue
			}
			if !hasNext {
				if adjacent.retainPath != "" {
					if pk, ok := x.Retained.Get(adjacent.retainPath); ok {
						pks = append(pks, pk)
					}
				}
			}
			if hasNext || (d >= 0 && key == "#") {
				pks = x.oldScanMessages(filter, d+1, adjacent, pks)
			}
		}
		return pks
	}
	if particle := n.particles.get(key); particle != nil {
		if hasNext {
			return x.oldScanMessages(filter, d+1, particle, pks)
		}
		if pk, ok := x.Retained.Get(particle.retainPath); ok {
			pks = append(pks, pk)
		}
	}
	return pks
}

func (x *TopicsIndex) oldSubscribers(topic string) *Subscribers {
	return x.oldScanSubscribers(topic, 0, nil, &Subscribers{
		Subscriptions: map[string]packets.Subscription{},
	})
}

func (x *TopicsIndex) oldScanSubscribers(topic string, d int, n *particle, subs *Subscribers) *Subscribers {
	if n == nil {
		n = x.root
	}
	if len(topic) == 0 {
		return subs
	}
	key, hasNext := isolateParticle(topic, d)
	for _, partKey := range []string{key, "+"} {
		if particle := n.particles.get(partKey); particle != nil {
			if hasNext {
				x.oldScanSubscribers(topic, d+1, particle, subs)
			} else {
				x.gatherSubscriptions(topic, particle, subs)
				x.gatherSharedSubscriptions(particle, subs)
				x.gatherInlineSubscriptions(particle, subs)
				if wild := particle.particles.get("#"); wild != nil && partKey != "+" {
					x.gatherSubscriptions(topic, wild, subs)
					x.gatherSharedSubscriptions(wild, subs)
					x.gatherInlineSubscriptions(particle, subs)
				}
			}
		}
	}
	if particle := n.particles.get("#"); particle != nil {
		x.gatherSubscriptions(topic, particle, subs)
		x.gatherSharedSubscriptions(particle, subs)
		x.gatherInlineSubscriptions(particle, subs)
	}
	return subs
}

// dump is the index's tree, keys and what each particle holds, sorted.
func dumpIndex(n *particle, path string, out *[]string) {
	n.Lock()
	rp := n.retainPath
	n.Unlock()
	var subs, shared, inline []string
	if n.subscriptions == nil || n.shared == nil || n.inlineSubscriptions == nil {
		for _, c := range n.particles.getAll() {
			dumpIndex(c, path+"\x00"+c.key, out)
		}
		return
	}
	for c, s := range n.subscriptions.GetAll() {
		subs = append(subs, c+"="+s.Filter)
	}
	for g, m := range n.shared.GetAll() {
		for c, s := range m {
			shared = append(shared, g+":"+c+"="+s.Filter)
		}
	}
	for id := range n.inlineSubscriptions.GetAll() {
		inline = append(inline, fmt.Sprint(id))
	}
	sort.Strings(subs)
	sort.Strings(shared)
	sort.Strings(inline)
	*out = append(*out, fmt.Sprintf("%q rp=%q s=%v sh=%v in=%v", path, rp, subs, shared, inline))
	for _, c := range n.particles.getAll() {
		dumpIndex(c, path+"\x00"+c.key, out)
	}
}

func dumpSorted(x *TopicsIndex) []string {
	var out []string
	dumpIndex(x.root, "", &out)
	sort.Strings(out)
	return out
}

var diffLevels = []string{"", "a", "b", "+", "#", "$SYS", "$sys", "$share", "$SHARE", "g", "ü", "日本", "a+", "b#", "$x", " ", "/"}

func randLevels(r *rand.Rand, wild bool) string {
	n := 1 + r.Intn(6)
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte('/')
		}
		l := diffLevels[r.Intn(len(diffLevels))]
		if !wild {
			l = strings.NewReplacer("+", "p", "#", "h").Replace(l)
		}
		b.WriteString(l)
	}
	return b.String()
}

func subsKey(s *Subscribers) string {
	var parts []string
	for c, sub := range s.Subscriptions {
		parts = append(parts, fmt.Sprintf("S %s %+v", c, sub))
	}
	for f, m := range s.Shared {
		for c, sub := range m {
			parts = append(parts, fmt.Sprintf("H %s %s %+v", f, c, sub))
		}
	}
	for id, in := range s.InlineSubscriptions {
		parts = append(parts, fmt.Sprintf("I %d %+v", id, in.Subscription))
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

func msgsKey(pks []packets.Packet) []string {
	var out []string
	for _, pk := range pks {
		out = append(out, pk.TopicName+"="+string(pk.Payload))
	}
	sort.Strings(out)
	return out
}

// TestTopicIndexSameAsBeforePatch43 runs the same random subscribes,
// unsubscribes, inline subscriptions and retained messages (filters and
// topics with empty levels, +, #, $SYS, $share, unicode; valid or not)
// through the index and through its code before patch 43, and compares
// the trees, every topic's subscribers and every valid filter's retained
// messages.
func TestTopicIndexSameAsBeforePatch43(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewSource(seed))
		nw, od := NewTopicsIndex(), NewTopicsIndex()
		var filters, topics []string
		for i := 0; i < 80; i++ {
			switch op := r.Intn(7); op {
			case 0, 1:
				f := randLevels(r, true)
				if r.Intn(3) == 0 {
					f = "$share/" + randLevels(r, true)
				}
				filters = append(filters, f)
				c := fmt.Sprint("c", r.Intn(4))
				sub := packets.Subscription{Filter: f, Qos: byte(r.Intn(3)), Identifier: r.Intn(3)}
				if a, b := nw.Subscribe(c, sub), od.oldSubscribe(c, sub); a != b {
					t.Fatalf("seed %d: Subscribe(%q, %q) %v, before %v", seed, c, f, a, b)
				}
			case 2:
				if len(filters) == 0 {
					continue
				}
				f := filters[r.Intn(len(filters))]
				if r.Intn(4) == 0 {
					f = randLevels(r, true)
				}
				c := fmt.Sprint("c", r.Intn(4))
				if a, b := nw.Unsubscribe(f, c), od.oldUnsubscribe(f, c); a != b {
					t.Fatalf("seed %d: Unsubscribe(%q, %q) %v, before %v", seed, f, c, a, b)
				}
			case 3:
				tp := randLevels(r, false)
				topics = append(topics, tp)
				pk := packets.Packet{TopicName: tp, FixedHeader: packets.FixedHeader{Retain: true}}
				if r.Intn(4) != 0 {
					pk.Payload = []byte(fmt.Sprint(i))
				}
				if a, b := nw.RetainMessage(pk), od.oldRetainMessage(pk); a != b {
					t.Fatalf("seed %d: RetainMessage(%q) %v, before %v", seed, tp, a, b)
				}
			case 4:
				f := randLevels(r, true)
				filters = append(filters, f)
				in := InlineSubscription{Subscription: packets.Subscription{Filter: f, Identifier: 1 + r.Intn(3)}}
				if a, b := nw.InlineSubscribe(in), od.oldInlineSubscribe(in); a != b {
					t.Fatalf("seed %d: InlineSubscribe(%q) %v, before %v", seed, f, a, b)
				}
			case 5:
				if len(filters) == 0 {
					continue
				}
				f := filters[r.Intn(len(filters))]
				id := 1 + r.Intn(3)
				if a, b := nw.InlineUnsubscribe(id, f), od.oldInlineUnsubscribe(id, f); a != b {
					t.Fatalf("seed %d: InlineUnsubscribe(%d, %q) %v, before %v", seed, id, f, a, b)
				}
			case 6:
				topics = append(topics, randLevels(r, false))
			}
		}
		if a, b := dumpSorted(nw), dumpSorted(od); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: trees differ:\n%s\nbefore:\n%s", seed, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
		for j := 0; j < 40; j++ {
			topics = append(topics, randLevels(r, false))
		}
		for _, tp := range topics {
			if a, b := subsKey(nw.Subscribers(tp)), subsKey(od.oldSubscribers(tp)); a != b {
				t.Fatalf("seed %d: Subscribers(%q):\n%s\nbefore:\n%s", seed, tp, a, b)
			}
		}
		for j := 0; j < 40; j++ {
			filters = append(filters, randLevels(r, true))
		}
		for _, f := range append(filters, topics...) {
			if !IsValidFilter(f, false) {
				continue
			}
			if a, b := msgsKey(nw.Messages(f)), msgsKey(od.oldMessages(f)); !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d: Messages(%q) %q, before %q", seed, f, a, b)
			}
		}
	}
}
