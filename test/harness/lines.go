package harness

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// LineLog collects a process's output line by line, each with the time it
// reached this process: the tests read what a process said, and when.
type LineLog struct {
	mu      sync.Mutex
	partial []byte
	lines   []TimedLine
}

// TimedLine is one line of output and when it arrived.
type TimedLine struct {
	At   time.Time
	Text string
}

// Write takes output as a process writes it; a line counts once its
// newline has arrived.
func (l *LineLog) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, TimedLine{At: now, Text: string(l.partial[:i])})
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// Lines returns the complete lines so far.
func (l *LineLog) Lines() []TimedLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// Contains says whether a line so far contains s.
func (l *LineLog) Contains(s string) bool {
	return slices.ContainsFunc(l.Lines(), func(t TimedLine) bool { return strings.Contains(t.Text, s) })
}

// String is the output so far, each line after its time of arrival.
func (l *LineLog) String() string {
	var b strings.Builder
	for _, t := range l.Lines() {
		fmt.Fprintf(&b, "%s %s\n", t.At.Format("15:04:05.000000"), t.Text)
	}
	return b.String()
}
