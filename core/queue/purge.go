package queue

import (
	"context"
	"fmt"
)

// purgeBatch bounds the records Purge reads from the log at a time.
const purgeBatch = 1000

// Purge removes the queue's ready messages: those stored and not in
// flight to a consumer (an operator's purge, POST
// /api/v1/queues/{name}/purge). Messages in flight stay with their
// consumers: acknowledged, they go as usual; given back, they are
// delivered again. It removes at most as many messages as the queue held
// when it began, so that publishers that go on cannot keep it running;
// what they put meanwhile may go too. It returns how many it removed,
// or ctx's error when ctx ends while it waits for a loader's Read.
//
// On a shared Log (Redis, several gateways), the budget is taken from the
// Log's own counts first: other gateways' puts do not pass through this
// engine.
func (q *Queue) Purge(ctx context.Context) (int, error) {
	if q.shared() {
		q.resync()
	}
	q.mu.Lock()
	// Purge reads the log as the loader does: it takes the loader's
	// place, so that no loader puts into the window a record it removes,
	// and no Put goes straight to the window meanwhile. A loader stuck in
	// a Read (a store that does not answer) is waited for as long as ctx
	// lets.
	if q.loading && !q.deleted {
		stop := context.AfterFunc(ctx, func() {
			q.mu.Lock()
			q.loaded.Broadcast()
			q.mu.Unlock()
		})
		for q.loading && !q.deleted && ctx.Err() == nil {
			q.loaded.Wait()
		}
		stop()
		if err := ctx.Err(); err != nil && q.loading && !q.deleted {
			q.mu.Unlock()
			return 0, fmt.Errorf("queue %q: purge: waiting for the loader: %w", q.name, err)
		}
	}
	if q.deleted {
		q.mu.Unlock()
		return 0, fmt.Errorf("%w: %q", ErrNotFound, q.name)
	}
	q.loading = true
	budget := q.messages
	// The window's ready messages; those in flight are in entries only.
	ids := make([]uint64, 0, len(q.ready))
	for _, e := range q.ready {
		q.removeLocked(e)
		ids = append(ids, e.rec.ID)
	}
	clear(q.ready) // the entries go with their records
	q.ready = q.ready[:0]
	budget -= len(ids)
	after := q.through
	q.mu.Unlock()
	if len(ids) > 0 {
		q.log.Remove(ids...)
	}
	n := len(ids)

	// Then the records the window has not read yet. A shared Log may
	// return a record again (its reclaim of what another reader held), a
	// removal here being asynchronous: each is removed and counted once.
	removed := make(map[uint64]struct{}, len(ids))
	for _, id := range ids {
		removed[id] = struct{}{}
	}
	var err error
	for budget > 0 {
		var recs []Record
		recs, err = q.log.Read(ctx, after, min(budget, purgeBatch))
		if err != nil || len(recs) == 0 {
			break
		}
		ids = ids[:0]
		q.mu.Lock()
		for _, r := range recs {
			after = max(after, r.ID)
			if _, in := q.entries[r.ID]; in {
				continue // in the window already (a shared Log's once-more)
			}
			if _, gone := removed[r.ID]; gone {
				continue
			}
			removed[r.ID] = struct{}{}
			q.messages--
			q.bytes -= int64(r.Msg.Size())
			q.emptyHoldsNoBytesLocked()
			ids = append(ids, r.ID)
		}
		q.through = max(q.through, after)
		q.mu.Unlock()
		if len(ids) > 0 {
			q.log.Remove(ids...)
		}
		n += len(ids)
		budget -= len(recs)
	}

	q.mu.Lock()
	// The log may hold what was put meanwhile, or what the budget left.
	q.more, q.loading = true, false
	q.loaded.Broadcast()
	q.mu.Unlock()
	q.fill()
	if err != nil {
		return n, fmt.Errorf("queue %q: purge: %w", q.name, err)
	}
	return n, nil
}
