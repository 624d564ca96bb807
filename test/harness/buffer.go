package harness

import (
	"bytes"
	"sync"
)

// SyncBuffer collects what a process or a server writes (its stdout and
// stderr at once, from their goroutines) for a test to read while it runs
// and to print when it fails.
type SyncBuffer struct {
	// Max, if positive, caps how many bytes are kept: later writes are
	// dropped (and reported written), so that a chatty server run for long
	// cannot fill the memory.
	Max int
	mu  sync.Mutex
	b   bytes.Buffer
}

// Write keeps p, or what of it fits under Max.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := p
	if s.Max > 0 {
		keep = p[:max(0, min(len(p), s.Max-s.b.Len()))]
	}
	s.b.Write(keep)
	return len(p), nil
}

// String is everything kept so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
