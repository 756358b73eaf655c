package queue

import (
	"context"
	"sort"
	"sync"

	"github.com/tolsey/tolsey/core"
)

// Memory is a Backend that keeps everything in memory: temporary queues
// live here, and tests use it. "Durable" means taken, before Append's done.
type Memory struct {
	mu   sync.Mutex
	logs map[string]*memLog
	cfgs map[string]Config
}

// NewMemory returns an empty memory backend.
func NewMemory() *Memory {
	return &Memory{logs: map[string]*memLog{}, cfgs: map[string]Config{}}
}

// Declared implements Backend.
func (b *Memory) Declared(context.Context) ([]Config, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Config, 0, len(b.cfgs))
	for _, c := range b.cfgs {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Open implements Backend.
func (b *Memory) Open(_ context.Context, cfg Config) (Log, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cfgs[cfg.Name] = cfg
	l := b.logs[cfg.Name]
	if l == nil {
		l = &memLog{}
		b.logs[cfg.Name] = l
	}
	return l, nil
}

// Drop implements Backend.
func (b *Memory) Drop(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.logs[name]; l != nil {
		l.mu.Lock()
		l.recs, l.bytes = nil, 0
		l.mu.Unlock()
	}
	delete(b.logs, name)
	delete(b.cfgs, name)
	return nil
}

// Close implements Backend.
func (b *Memory) Close() error { return nil }

// memLog is a Log in a slice ordered by ID.
type memLog struct {
	mu    sync.Mutex
	next  uint64
	recs  []Record
	bytes int64
}

func (l *memLog) Append(m *core.Message, done func(uint64, error)) {
	l.mu.Lock()
	l.next++
	id := l.next
	l.recs = append(l.recs, Record{ID: id, Msg: m})
	l.bytes += int64(m.Size())
	l.mu.Unlock()
	done(id, nil)
}

func (l *memLog) Read(_ context.Context, after uint64, max int) ([]Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.recs), func(i int) bool { return l.recs[i].ID > after })
	end := min(len(l.recs), i+max)
	return append([]Record(nil), l.recs[i:end]...), nil
}

func (l *memLog) Browse(ctx context.Context, after uint64, max int) ([]Record, error) {
	return l.Read(ctx, after, max)
}

func (l *memLog) Remove(ids ...uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		i := sort.Search(len(l.recs), func(i int) bool { return l.recs[i].ID >= id })
		if i < len(l.recs) && l.recs[i].ID == id {
			l.bytes -= int64(l.recs[i].Msg.Size())
			l.recs = append(l.recs[:i], l.recs[i+1:]...)
		}
	}
}

func (l *memLog) Stats(context.Context) (int, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs), l.bytes, nil
}
