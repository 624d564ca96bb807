package pace

import (
	"container/heap"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// admitted counts the first grants admitted when asked n times at now.
func admitted(p *Pace, now time.Time, n int) int {
	count := 0
	for range n {
		if ok, _ := p.Admit(now); ok {
			count++
		}
	}
	return count
}

// stretchedAt brings a pace of two workers to full stretch, then holds the
// renewals' share at share for a minute, and returns the time.
func stretchedAt(p *Pace, now time.Time, share float64) time.Time {
	now = run(p, now, 15*time.Second, 100*time.Millisecond, 200*time.Millisecond)
	return run(p, now, time.Minute, 100*time.Millisecond, time.Duration(share*float64(200*time.Millisecond)))
}

func TestAQuietOperatorAdmitsABurstAtOnce(t *testing.T) {
	p := New(32)
	now := time.Unix(1000, 0)
	if got := admitted(p, now, 100); got != 100 {
		t.Fatalf("a new operator admitted %d of 100 first grants at once, want all", got)
	}
	if ok, why := p.Admit(now); ok || !strings.Contains(why, "a second") {
		t.Fatalf("the 101st in the same instant: admitted %v (%q), want it to wait for the budget", ok, why)
	}
	if got := admitted(p, now.Add(100*time.Millisecond), 100); got != 10 {
		t.Fatalf("100 ms later: %d admitted, want 10 (100 a second)", got)
	}
}

// TestConcurrentAdmissionsTakeNoMoreThanTheBudget asks for 400 first grants
// from 8 goroutines at one instant, with 100 in the budget: exactly 100 are
// admitted, and those given back are admitted again. (Reading the budget and
// spending from it apart let workers deciding at once overdraw it.)
func TestConcurrentAdmissionsTakeNoMoreThanTheBudget(t *testing.T) {
	p := New(32)
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	count := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			n := admitted(p, now, 50)
			mu.Lock()
			count += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if count != 100 {
		t.Fatalf("400 first grants asked for at once with 100 in the budget: %d admitted, want 100", count)
	}
	for range 3 {
		p.GiveBack(now)
	}
	if got := admitted(p, now, 10); got != 3 {
		t.Fatalf("after 3 admissions given back: %d admitted, want 3", got)
	}
	for range 500 {
		p.GiveBack(now)
	}
	if got := admitted(p, now, 200); got != 100 {
		t.Fatalf("after 500 given back: %d admitted, want the budget's 100 at most", got)
	}
}

func TestFirstGrantsWaitWithAMarginBeforeSaturation(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  bool
	}{
		{0.55, true},
		// Above Headroom, below Full: not saturated, but no first grant.
		{0.72, false},
		{0.9, false},
	} {
		p := New(2)
		now := stretchedAt(p, time.Unix(1000, 0), tc.share)
		st := p.Status()
		if st.Stretch != 1 {
			t.Fatalf("share %.2f: %+v, want full stretch", tc.share, st)
		}
		ok, why := p.Admits(now)
		if ok != tc.want {
			t.Errorf("share %.2f (measured %.2f, saturated %v): admits %v (%q), want %v", tc.share, st.Share, st.Saturated, ok, why, tc.want)
		}
		if !ok && !strings.Contains(why, "workers' time") {
			t.Errorf("share %.2f: reason %q does not name the share", tc.share, why)
		}
	}
}

func TestALateRenewalClosesAdmissionForAWhile(t *testing.T) {
	p := New(2)
	now := time.Unix(1000, 0)
	p.Worked(now, 0, false)
	// One renewal 40 % into its slack, the others on time.
	p.Late(now, 4*time.Second, 10*time.Second)
	for range 20 {
		p.Late(now, 0, 10*time.Second)
	}
	if ok, why := p.Admits(now.Add(time.Second)); ok || !strings.Contains(why, "into its slack") {
		t.Fatalf("a second after a renewal 40%% into its slack: admits %v (%q), want no", ok, why)
	}
	// The peak decays over the window: 0.4 e^(-t/10 s) < 0.25 after 4.7 s.
	if ok, why := p.Admits(now.Add(6 * time.Second)); !ok {
		t.Fatalf("6 s later: %q, want admitted", why)
	}
	if st := p.Status(); st.Saturated || st.Late > lateLimit {
		t.Fatalf("one late renewal saturated the pace: %+v", st)
	}
}

func TestAnExpiryClosesAdmissionForTheCooldownAndHalvesTheRate(t *testing.T) {
	p := New(2)
	now := time.Unix(1000, 0)
	p.Worked(now, 0, false)
	p.Expired(now)
	for _, d := range []time.Duration{time.Second, cooldown - time.Second} {
		if ok, why := p.Admits(now.Add(d)); ok || why != "a held grant expired unrenewed" {
			t.Fatalf("%s after an expiry: admits %v (%q), want the expiry named", d, ok, why)
		}
	}
	at := now.Add(cooldown + time.Second)
	if ok, why := p.Admits(at); !ok {
		t.Fatalf("after the cooldown: %q, want admitted", why)
	}
	if r := p.Status().Rate; r > maxRate/2+2 {
		t.Fatalf("rate after an expiry: %.1f, want halved from %.0f", r, maxRate)
	}
	// A burst of expiries halves it once each, down to the floor.
	for range 10 {
		p.Expired(at)
	}
	if r := p.Status().Rate; r != minRate {
		t.Fatalf("rate after 10 more expiries: %.2f, want %.0f", r, minRate)
	}
	// It grows back by rateGrowth a second while open, not at once.
	ok, _ := p.Admits(at.Add(cooldown))
	later := at.Add(cooldown + 10*time.Second)
	p.Admits(later)
	if r := p.Status().Rate; !ok || r < 9 || r > 12 {
		t.Fatalf("10 s after reopening: rate %.1f (open %v), want about 11", r, ok)
	}
	if got := admitted(p, later, 100); got > 12 {
		t.Fatalf("admitted %d at once at a rate of about 11 a second", got)
	}
}

func TestTakeoversSpendTheFirstGrantsBudget(t *testing.T) {
	p := New(2)
	now := time.Unix(1000, 0)
	p.Worked(now, 0, false)
	p.Expired(now) // rate 50 a second
	now = now.Add(cooldown)
	p.Admits(now)
	for range 200 {
		p.Spend(now)
	}
	if ok, why := p.Admit(now.Add(500 * time.Millisecond)); ok {
		t.Fatalf("half a second after 200 takeovers at a rate of about 50: admitted, want to wait (%q)", why)
	}
	// The debt is at most a second of admissions: two seconds repay it.
	if ok, why := p.Admit(now.Add(2500 * time.Millisecond)); !ok {
		t.Fatalf("2.5 s after the takeovers: %q, want admitted", why)
	}
}

func TestOscillatingAtTheLimitSlowsAdmission(t *testing.T) {
	p := New(2)
	now := time.Unix(1000, 0)
	p.Worked(now, 0, false)
	for i := range 8 {
		now = now.Add(3 * time.Second)
		p.Late(now, 3*time.Second, 10*time.Second) // 30 % into the slack
		if ok, _ := p.Admits(now); ok {
			t.Fatalf("round %d: admitted right after a late renewal", i)
		}
		now = now.Add(10 * time.Second)
		if ok, why := p.Admits(now); !ok {
			t.Fatalf("round %d: not reopened: %q", i, why)
		}
	}
	if r := p.Status().Rate; r > 20 {
		t.Fatalf("rate after 8 closures in 104 s: %.1f, want it well below the %.0f it started at", r, maxRate)
	}
}

// TestRefusedFirstGrantsComeBackInTurn: first grants refused for want of
// budget are told to look again one token apart, so that those refused
// together come back as fast as they can be admitted, and each is then
// admitted; refused while admission is closed, they wait the longest.
func TestRefusedFirstGrantsComeBackInTurn(t *testing.T) {
	p, now, lease := New(32), time.Unix(1000, 0), 15*time.Second
	admitted(p, now, 100)
	var turns []time.Duration
	for range 300 {
		if ok, _ := p.Admit(now); ok {
			t.Fatal("admitted with the budget spent")
		}
		turns = append(turns, p.Retry(fmt.Sprint(len(turns)), now, lease))
	}
	for i, d := range turns {
		want := time.Duration(i+1) * 10 * time.Millisecond
		if d < want-time.Millisecond || d > want+time.Millisecond {
			t.Fatalf("refused FencedLease %d looks again after %v, want %v (its turn at 100 a second)", i, d, want)
		}
	}
	// Each comes back at its turn and is admitted.
	for i, d := range turns {
		if ok, why := p.Admit(now.Add(d)); !ok {
			t.Fatalf("refused FencedLease %d, back at its turn %v: refused again (%s)", i, d, why)
		}
	}
	// A held grant expired: admission closes; the refused wait the longest.
	later := now.Add(turns[len(turns)-1] + time.Second)
	p.Expired(later)
	if ok, _ := p.Admit(later); ok {
		t.Fatal("admitted right after a held grant expired")
	}
	if d := p.Retry("late", later, lease); d != lease {
		t.Errorf("refused while admission is closed: looks again after %v, want %v", d, lease)
	}
	// Never longer than the longest.
	p2 := New(32)
	admitted(p2, now, 100)
	for i := range 5000 {
		if d := p2.Retry(fmt.Sprint(i), now, lease); d > lease {
			t.Fatalf("looks again after %v, more than the longest %v", d, lease)
		}
	}
}

// TestManyRefusedFirstGrantsAreAllAdmittedAtTheRate: ten thousand
// FencedLeases refused at once, each looked at once more right after (a pod
// event), come back at their turns and are admitted at the admission rate:
// all of them in about n/rate seconds. Turns booked for the looks that are
// told to wait the longest anyway, or booked twice for one FencedLease,
// would push every later turn back until each waits a lease duration per
// look. The queue is a work queue's: a FencedLease waits for the earliest
// look asked of it.
func TestManyRefusedFirstGrantsAreAllAdmittedAtTheRate(t *testing.T) {
	const n = 10000
	p, start, lease := New(32), time.Unix(1000, 0), 15*time.Second
	admitted(p, start, 100)
	q := &lookQueue{}
	next := map[string]time.Time{} // the earliest look of each waiting FencedLease
	for i := range n {
		key := fmt.Sprintf("ns/lease-%05d", i)
		heap.Push(q, look{start, key})
		heap.Push(q, look{start.Add(time.Millisecond), key})
	}
	admittedAt := map[string]time.Time{}
	var last time.Time
	for q.Len() > 0 {
		l := heap.Pop(q).(look)
		if _, done := admittedAt[l.key]; done {
			continue
		}
		if at, ok := next[l.key]; ok && !at.Equal(l.at) && l.at.After(start.Add(time.Millisecond)) {
			continue // replaced by an earlier look
		}
		if l.at.Sub(start) > 10*time.Minute {
			t.Fatalf("%d of %d still refused after 10 minutes", n-len(admittedAt), n)
		}
		if ok, _ := p.Admit(l.at); ok {
			admittedAt[l.key], last = l.at, l.at
			continue
		}
		back := l.at.Add(p.Retry(l.key, l.at, lease))
		if at, ok := next[l.key]; ok && at.After(l.at) && !at.After(back) {
			continue // an earlier look is queued
		}
		next[l.key] = back
		heap.Push(q, look{back, l.key})
	}
	if took, want := last.Sub(start), time.Duration(n/100)*time.Second+lease; took > want {
		t.Errorf("all %d admitted after %v, want at most %v (n/rate and a lease duration)", n, took, want)
	}
}

type look struct {
	at  time.Time
	key string
}

// lookQueue is a heap of looks, earliest first.
type lookQueue []look

func (q lookQueue) Len() int           { return len(q) }
func (q lookQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q lookQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *lookQueue) Push(x any)        { *q = append(*q, x.(look)) }
func (q *lookQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	*q = old[:len(old)-1]
	return l
}

// TestAForgottenFencedLeaseKeepsNoTurn: a FencedLease that waits for its
// turn and is then deleted leaves no entry behind; looked at again (a new
// one of the same name), it is given a turn of its own after the ones
// given since, not the one it had.
func TestAForgottenFencedLeaseKeepsNoTurn(t *testing.T) {
	p, now, lease := New(32), time.Unix(1000, 0), 15*time.Second
	admitted(p, now, 100)
	first := p.Retry("db", now, lease)
	if again := p.Retry("db", now, lease); again != first {
		t.Fatalf("looked at again before its turn: %v, want its turn %v", again, first)
	}
	p.Forget("db")
	if len(p.admission.turns) != 0 {
		t.Fatalf("turns after Forget: %v", p.admission.turns)
	}
	if next := p.Retry("db", now, lease); next <= first {
		t.Fatalf("after Forget: turn %v, want one after the forgotten %v", next, first)
	}
}
