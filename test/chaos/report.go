//go:build chaos

package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Summary is what a run explored and found.
type Summary struct {
	Seed     int64
	Duration time.Duration
	Attempts int
	Accepted int
	Unknown  int
	// Rejected counts rejections by reason.
	Rejected map[string]int
	// BySource counts attempts and outcomes by what the writer believed:
	// "stale/rejected" and so on.
	BySource map[string]int
	Faults   map[string]int
	// StatusAttacks counts the status writes that tried to change a
	// protected object's metadata, StatusAttempts them by change, source
	// and reason.
	StatusAttacks  int
	StatusAttempts map[string]int
	// Handoffs is the number of distinct fences published to pods.
	Handoffs int
	// Beliefs counts the beliefs of renewal Holder processes,
	// BeliefHandoffs the times a lease's belief passed to another pod.
	Beliefs, BeliefHandoffs int
	// Releases counts release calls by kind/outcome; Released, LateNoop
	// and ReleaseUnknown are the releases written, the late releases that
	// changed nothing, and those of unknown outcome.
	Releases                           map[string]int
	Released, LateNoop, ReleaseUnknown int
	// Shards counts the writes to the shards' objects and the shards'
	// moves; the figures above are the FencedLeases' alone.
	Shards     ShardSummary
	Violations int
	Result     *Result
}

// staleReasons are the denials that prove a stale or impostor writer was
// fenced off.
var staleReasons = map[string]bool{"stale_fence": true, "object_fence_regression": true, "not_holder": true,
	"no_holder": true, "unknown_fence": true}

// StaleRejections counts rejections of stale and impostor writes for a
// fencing reason.
func (s *Summary) StaleRejections() int {
	n := 0
	for k, v := range s.BySource {
		src, reason, ok := strings.Cut(k, "/")
		if ok && src != string(SourceFresh) && staleReasons[reason] {
			n += v
		}
	}
	return n
}

// Summarize counts a checked history.
func Summarize(seed int64, d time.Duration, h *History, r *Result) *Summary {
	s := &Summary{Seed: seed, Duration: d, Rejected: map[string]int{}, BySource: map[string]int{}, Faults: h.Faults, Result: r}
	for _, a := range h.Attempts {
		if a.Set != "" {
			continue // counted in s.Shards
		}
		s.Attempts++
		s.BySource[string(a.Source)]++
		switch a.Outcome {
		case Accepted:
			s.Accepted++
			s.BySource[string(a.Source)+"/accepted"]++
		case Unknown:
			s.Unknown++
			s.BySource[string(a.Source)+"/unknown"]++
		case Rejected:
			s.Rejected[a.Reason]++
			s.BySource[string(a.Source)+"/"+a.Reason]++
		}
	}
	fences := map[string]bool{}
	for _, hd := range h.Holdings {
		if hd.Via == ViaPod && !IsShard(hd.Lease) {
			fences[fmt.Sprintf("%s/%d", hd.Lease, hd.Fence)] = true
		}
	}
	s.Handoffs = len(fences)
	s.Releases = map[string]int{}
	for _, rel := range h.Releases {
		s.Releases[string(rel.Kind)+"/"+rel.Outcome]++
		switch {
		case rel.Outcome == ReleaseReleased:
			s.Released++
		case rel.Outcome == ReleaseUnknown:
			s.ReleaseUnknown++
		case rel.Kind == ReleaseLate && rel.Outcome == ReleaseNoop:
			s.LateNoop++
		}
	}
	last := map[string]Belief{}
	for _, b := range h.Beliefs { // sorted by From
		s.Beliefs++
		if prev, ok := last[b.Lease]; ok && prev.PodUID != b.PodUID {
			s.BeliefHandoffs++
		}
		last[b.Lease] = b
	}
	s.StatusAttempts = map[string]int{}
	for _, a := range h.StatusAttempts {
		s.StatusAttempts[a.Change+"/"+string(a.Source)+"/"+a.Reason]++
		s.StatusAttacks++
	}
	s.Shards = summarizeShards(h)
	s.Violations = len(r.Violations)
	return s
}

// String is the report, a few lines a person reads at the end of a run.
func (s *Summary) String() string {
	var b strings.Builder
	rejected := 0
	for _, v := range s.Rejected {
		rejected += v
	}
	fmt.Fprintf(&b, "chaos seed=%d duration=%s: attempts=%d accepted=%d rejected=%d unknown=%d handoffs=%d violations=%d\n",
		s.Seed, s.Duration.Round(time.Second), s.Attempts, s.Accepted, rejected, s.Unknown, s.Handoffs, s.Violations)
	fmt.Fprintf(&b, "  rejected by reason: %s\n", counts(s.Rejected))
	b.WriteString(s.Shards.String())
	fmt.Fprintf(&b, "  by source: %s\n", counts(s.BySource))
	fmt.Fprintf(&b, "  faults: %s\n", counts(s.Faults))
	fmt.Fprintf(&b, "  status writes changing a protected object's metadata: %d; by change/source/reason: %s\n", s.StatusAttacks, counts(s.StatusAttempts))
	fmt.Fprintf(&b, "  holder renewal: beliefs=%d belief-handoffs=%d released=%d late-release-no-op=%d release-unknown=%d; releases: %s\n",
		s.Beliefs, s.BeliefHandoffs, s.Released, s.LateNoop, s.ReleaseUnknown, counts(s.Releases))
	if r := s.Result; r != nil {
		fmt.Fprintf(&b, "  unknown outcomes applied=%d not applied=%d; accepted in the admission window=%d (max %s after the holding ended); accepted while only the status named the pod=%d\n",
			r.UnknownApplied, r.UnknownLost, r.InWindow, r.MaxLateness.Round(10*time.Microsecond), r.StatusOnly)
		fmt.Fprintf(&b, "  shortest gap between two renewal Holder beliefs of a lease: %s\n", r.MinBeliefGap.Round(10*time.Microsecond))
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  VIOLATION: %s\n", v)
		}
	}
	return b.String()
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// WriteHistory writes the history as JSON, for a person to read next to the
// visualisation.
func WriteHistory(h *History, path string) error {
	data, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return fmt.Errorf("encode the history: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write the history: %w", err)
	}
	return nil
}

// ArtifactDir is $CHAOS_ARTIFACTS, created if needed, or else a new
// temporary directory that outlives the test (t.TempDir would be removed
// with the very files a failure needs).
func ArtifactDir() (string, error) {
	if dir := os.Getenv("CHAOS_ARTIFACTS"); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		return abs, os.MkdirAll(abs, 0o755)
	}
	return os.MkdirTemp("", "chaos-")
}
