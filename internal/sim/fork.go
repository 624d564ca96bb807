package sim

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// Concurrently runs fns as the reconciler runs them at once (its
// Concurrently hook): each is an actor of its own, whose API calls the
// scheduler interleaves with every other call, so that every order of
// their writes, lost replies and crashes between them included, is
// explored; the reconcile waits until they have all returned. Outside a
// reconcile, or on a crashed replica, they run one after the other.
func (s *Sim) Concurrently(ctx context.Context, fns ...func(context.Context)) {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil || a.crashed || len(fns) < 2 {
		for _, fn := range fns {
			fn(ctx)
		}
		return
	}
	c := &call{desc: "fork", fork: fns, ctx: ctx, reply: make(chan error)}
	a.calls <- c
	if err := <-c.reply; err != nil {
		panic(fmt.Sprintf("a fork answered %v: only its children's calls can fail", err))
	}
}

// fork starts the children of a reconcile that runs functions at once,
// each up to its first call; the reconcile waits on them (childDone).
func (s *Sim) fork(a *actor, c *call) {
	s.stats.Forks++
	s.tracef("  %s runs %d steps at once", a.key, len(c.fork))
	a.next, a.forkReply = nil, c.reply
	for i := range c.fork {
		child := &actor{rep: a.rep, key: types.NamespacedName{Namespace: a.key.Namespace, Name: fmt.Sprintf("%s/%d", a.key.Name, i)},
			calls: make(chan *call), done: make(chan struct{}), parent: a, crashed: a.crashed}
		a.children = append(a.children, child)
		a.rep.running[child.key] = child
	}
	// Each starts and runs up to its first call alone: only one goroutine
	// ever runs at a time.
	for i, child := range append([]*actor(nil), a.children...) {
		ctx, fn := context.WithValue(c.ctx, actorKey{}, child), c.fork[i]
		go func() {
			defer close(child.done)
			fn(ctx)
		}()
		s.await(child)
	}
}

// childDone lets a reconcile go on once the last of the functions it runs
// at once has returned.
func (s *Sim) childDone(child *actor) {
	p := child.parent
	if p == nil {
		return
	}
	for i, c := range p.children {
		if c == child {
			if i > 0 && !p.overtaken {
				p.overtaken = true
				s.stats.Overtaken++
			}
			p.children = append(p.children[:i], p.children[i+1:]...)
			break
		}
	}
	if len(p.children) > 0 {
		return
	}
	p.overtaken = false
	reply := p.forkReply
	p.forkReply = nil
	reply <- nil
	s.await(p)
}

// runner is the actor whose call runs next for a: a itself, or while a
// waits on the functions it runs at once, the first of them that waits on
// a call.
func (a *actor) runner() *actor {
	if a == nil || a.next != nil {
		return a
	}
	for _, c := range a.children {
		if r := c.runner(); r != nil && r.next != nil {
			return r
		}
	}
	return a
}
