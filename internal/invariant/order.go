package invariant

// Write is one accepted write to a destination, with the fence it
// presented; Of is the feeder's record of it, handed back to name it in a
// message.
type Write[T any] struct {
	Fence int64
	Of    T
}

// Order is the write-order rule, per destination key: the fences of the
// writes accepted never go back. A write whose fence is below the highest
// fence accepted before it is stale, and must have been refused.
//
// "Before" is the feeder's order: the order the destination applied the
// writes (Accept), or, when only call and return times are known, every
// write that returned before this one was called (Record each such write,
// then Check this one).
type Order[T any] struct {
	highest map[string]Write[T]
}

// NewOrder returns the rule with no write accepted.
func NewOrder[T any]() *Order[T] { return &Order[T]{highest: map[string]Write[T]{}} }

// Check says whether a write to key accepted with w's fence is stale: it
// returns the write with the highest fence accepted before, when w's fence
// is below it.
func (o *Order[T]) Check(key string, w Write[T]) (Write[T], bool) {
	h, ok := o.highest[key]
	return h, ok && w.Fence < h.Fence
}

// Record counts w as accepted before every write checked from now on. Of
// writes with equal fences, the first recorded is kept.
func (o *Order[T]) Record(key string, w Write[T]) {
	if h, ok := o.highest[key]; !ok || w.Fence > h.Fence {
		o.highest[key] = w
	}
}

// Accept checks w, then records it: the writes are fed in the order the
// destination applied them.
func (o *Order[T]) Accept(key string, w Write[T]) (Write[T], bool) {
	h, stale := o.Check(key, w)
	o.Record(key, w)
	return h, stale
}
