package relist

import (
	"container/list"
	"sync"
)

// recentFindings is how many findings' figures a detector keeps for the
// Merge that follows its evaluation (see recent): far more than one
// evaluation finds, so a merge finds what its evaluation stored.
const recentFindings = 1024

// recent keeps values by key for the latest evaluations, at most limit of
// them: storing one more drops the least recently stored or read. A
// detector's figures of a finding (what its text says beyond subjects
// and evidence) are needed by the Merge right after the evaluation that
// found it, not for as long as serve runs. Safe for concurrent use.
type recent[V any] struct {
	mu    sync.Mutex
	limit int
	byKey map[string]*list.Element
	order list.List // of *recentEntry[V], most recent first
}

type recentEntry[V any] struct {
	key string
	val V
}

func newRecent[V any](limit int) *recent[V] {
	return &recent[V]{limit: limit, byKey: map[string]*list.Element{}}
}

// Store sets key's value.
func (r *recent[V]) Store(key string, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.byKey[key]; ok {
		e.Value.(*recentEntry[V]).val = v
		r.order.MoveToFront(e)
		return
	}
	r.byKey[key] = r.order.PushFront(&recentEntry[V]{key: key, val: v})
	for r.order.Len() > r.limit {
		last := r.order.Back()
		r.order.Remove(last)
		delete(r.byKey, last.Value.(*recentEntry[V]).key)
	}
}

// Load returns key's value, if it is still kept.
func (r *recent[V]) Load(key string) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	r.order.MoveToFront(e)
	return e.Value.(*recentEntry[V]).val, true
}

// Len is how many values are kept.
func (r *recent[V]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.order.Len()
}
