package writelog

import (
	"fmt"
	"time"
)

// SplitBrain is what one run of a paused and resumed replica counted.
type SplitBrain struct {
	// Late are the writes the resumed replica made on purpose after its
	// manager had stopped (--late-writes); Own those its controller made
	// after it was resumed, before its manager stopped.
	Late, Own Tally
	// InFlight are writes the replica had begun before it was paused and
	// finished after: sent before the pause or after the resume, nobody
	// can tell.
	InFlight Tally
	// Overwritten counts the Widgets whose slot the resumed replica
	// changed (a slot from its stale view, 1000 and above).
	Overwritten int
	Paused      time.Duration
	// Noticed is how long after it was resumed the replica's manager
	// reported the lost grant or election; OwnFor how long after it was
	// resumed its own controller's last write was answered (0: none).
	Noticed, OwnFor time.Duration
}

// Judge sorts the writes of a replica paused at pausedAt and resumed at
// resumedAt; those answered before the resume are not counted. Overwritten
// and Noticed are left to the caller, who can see the Widgets and the log.
func Judge(ws []Write, pausedAt, resumedAt time.Time) SplitBrain {
	run := SplitBrain{Paused: resumedAt.Sub(pausedAt), Late: Tally{}, Own: Tally{}, InFlight: Tally{}}
	for _, w := range ws {
		switch {
		case w.Done.Before(resumedAt):
		case w.Sent.Before(pausedAt):
			run.InFlight[w.Result]++
		case w.Late:
			run.Late[w.Result]++
		default:
			run.Own[w.Result]++
			run.OwnFor = max(run.OwnFor, w.Done.Sub(resumedAt))
		}
	}
	return run
}

func (r SplitBrain) String() string {
	return fmt.Sprintf("a paused %s; its manager reported the loss %s after a was resumed; after the resume: late writes: %s; its controller's own writes (the last %s after the resume): %s; in flight across the pause: %s; Widgets whose slot a overwrote: %d",
		r.Paused.Round(time.Millisecond), r.Noticed.Round(time.Millisecond), r.Late, r.OwnFor.Round(time.Millisecond), r.Own, r.InFlight, r.Overwritten)
}
