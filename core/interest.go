package core

// Interest summary for a cluster (docs/cluster.md, "Interest-based
// forwarding"): which filters this gateway's consumers hold, so that other
// gateways send it only messages it can deliver.

// FilterSource is implemented by a subscriber that fans out to consumers
// of its own behind one broad subscription (the MQTT front-end's "#": mochi
// holds the MQTT sessions' filters). The router reports its consumers'
// filters instead of its own.
type FilterSource interface {
	// Filters calls fn with every filter a consumer behind the subscriber
	// holds; repeats are allowed. It must not call the router.
	Filters(fn func(filter string))
}

// Filters calls fn with the filter of every subscription that consumes
// messages: LocalOnly ones (the cluster, outbound bridges) forward what
// entered here and are left out, and so are Fallback ones (alternates); a FilterSource subscriber's consumers'
// filters are reported instead of its own. A shared subscription is
// reported as $share/g/f: a cluster spreads its group's messages across
// gateways (shared.go). fn may see a filter twice.
func (r *Router) Filters(fn func(filter string)) {
	var plain []string
	sources := map[FilterSource]struct{}{}
	add := func(s *Subscription) {
		if s.Options.LocalOnly || s.Options.Fallback {
			// A fallback (an alternate's) consumes only what reaches
			// nobody: it is no reason for another gateway to send here.
			return
		}
		if fs, ok := s.Subscriber.(FilterSource); ok {
			sources[fs] = struct{}{}
			return
		}
		if s.Options.Group != "" {
			plain = append(plain, ShareFilter(s.Options.Group, s.Filter))
			return
		}
		plain = append(plain, s.Filter)
	}
	var walk func(n *snode)
	walk = func(n *snode) {
		for _, s := range n.subs {
			add(s)
		}
		for _, g := range n.groups {
			for _, s := range g.members {
				add(s)
			}
		}
		n.kids.each(func(c *snode) bool { walk(c); return true })
	}
	r.mu.RLock()
	walk(&r.root)
	r.mu.RUnlock()
	// Outside the lock: a source takes its own locks.
	for _, f := range plain {
		fn(f)
	}
	for fs := range sources {
		fs.Filters(fn)
	}
}

// WatchFilters sets fn, called with a filter before a consuming
// subscription on it takes effect (Subscribe, FilterAdded), and with ""
// after one is removed. One watcher (the cluster); nil removes it. fn runs
// on the subscriber's goroutine and must not block or call the router.
func (r *Router) WatchFilters(fn func(filter string)) {
	if fn == nil {
		r.watch.Store(nil)
		return
	}
	r.watch.Store(&fn)
}

// FilterAdded tells the watcher that a consumer behind a FilterSource
// subscriber is about to hold filter: the MQTT front-end calls it when a
// SUBSCRIBE arrives, before mochi indexes the filter and answers SUBACK,
// so that other gateways send the new subscriber its messages at once.
func (r *Router) FilterAdded(filter string) {
	if w := r.watch.Load(); w != nil {
		(*w)(filter) // $share/g/f kept: the cluster serves the group (shared.go)
	}
}

// FiltersRemoved tells the watcher that consumers behind a FilterSource
// subscriber dropped filters (after the fact: a late summary is larger
// than the truth, never smaller).
func (r *Router) FiltersRemoved() {
	if w := r.watch.Load(); w != nil {
		(*w)("")
	}
}

// filterRemoved tells the watcher a consuming subscription went.
func (r *Router) filterRemoved(opts SubOptions) {
	if !opts.LocalOnly {
		r.FiltersRemoved()
	}
}
