package embedded

import (
	"time"
)

// Lazy operations: removals and delivery states need no commit of their
// own. A lost one costs a redelivery or a smaller delivery count, never a
// message (queue.Log.Remove, queue.StateLog.SetState), so they wait, off
// the writer's queue, for the next commit an Append causes, and ride it
// for free. Without that, a consumer's acknowledgement started a commit
// (a log write and an fdatasync) of its own, and the next append waited
// behind it: a synchronous producer (a JMS PERSISTENT send) paid two
// commits per message where one holds both (docs/queues.md, "Group commit").
//
// So that they are not held for ever when no append comes, the first one
// arms a timer (lazyDelay) that asks the writer for a commit; so does a
// backlog of maxBatch of them. Close commits them too. They are in the
// overlay (wal.go) the moment they are made: reads never wait for them.

// lazyDelay bounds how long a removal waits for an append to ride with
// (Backend.lazyDelay; tests change it): the acknowledgements a crash may
// lose (delivered again) are those of this long.
const lazyDelay = 20 * time.Millisecond

// addLazy queues o for the next commit without starting one.
func (b *Backend) addLazy(o op) {
	b.lazyMu.Lock()
	b.lazy = append(b.lazy, o)
	n := len(b.lazy)
	arm := !b.lazyArmed
	b.lazyArmed = true
	b.lazyMu.Unlock()
	switch {
	case n >= maxBatch:
		b.loop.Add(op{}) // a flush: commit what waits now
	case arm:
		time.AfterFunc(b.lazyDelay, func() { b.loop.Add(op{}) })
	}
}

// takeLazy takes the lazy operations queued so far, for the writer's
// commit; it hands back the list the previous commit took, to be reused.
// On the writer goroutine.
func (b *Backend) takeLazy() []op {
	b.lazyMu.Lock()
	defer b.lazyMu.Unlock()
	ops := b.lazy
	b.lazy = b.lazySpare[:0]
	b.lazySpare = nil
	b.lazyArmed = false
	return ops
}

// giveLazy hands the list back once its operations are applied. On the
// writer goroutine.
func (b *Backend) giveLazy(ops []op) {
	clear(ops)
	b.lazyMu.Lock()
	b.lazySpare = ops[:0]
	b.lazyMu.Unlock()
}
