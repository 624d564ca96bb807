package writelog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Outcomes of a write, as the example controller logs them.
const (
	// Accepted: the API server stored it.
	Accepted = "accepted"
	// Rejected: an admission webhook denied it.
	Rejected = "rejected"
	// Refused: the fencing client did not send it: no valid grant.
	Refused = "refused"
	// Conflict: the object changed since it was read.
	Conflict = "conflict"
	// Failed: anything else.
	Failed = "error"
)

// Write is one line "Write" of the example controller's log.
type Write struct {
	Widget struct{ Name, Namespace string } `json:"widget"`
	// Part is spec or status, Verb update or patch.
	Part string `json:"part"`
	Verb string `json:"verb"`
	// Result is one of the outcomes above.
	Result string `json:"result"`
	Fence  int64  `json:"fence"`
	// Late says the write was one of --late-writes, made on purpose after
	// the manager stopped.
	Late bool      `json:"late"`
	Sent time.Time `json:"sent"`
	Done time.Time `json:"done"`
	// Error is the API server's or the client's answer, if not accepted.
	Error string `json:"error"`
}

// Parse reads a line of the log; ok is false for any other line.
func Parse(line string) (w Write, ok bool) {
	if !strings.Contains(line, `"msg":"Write"`) {
		return Write{}, false
	}
	if err := json.Unmarshal([]byte(line), &w); err != nil {
		return Write{}, false
	}
	return w, true
}

// Read parses every Write line of a log.
func Read(r io.Reader) ([]Write, error) {
	var out []Write
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		if w, ok := Parse(sc.Text()); ok {
			out = append(out, w)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the controller's log: %w", err)
	}
	return out, nil
}

// SentAfter are the writes sent after t.
func SentAfter(ws []Write, t time.Time) []Write {
	var out []Write
	for _, w := range ws {
		if w.Sent.After(t) {
			out = append(out, w)
		}
	}
	return out
}

// Tally counts writes by outcome.
type Tally map[string]int

// Count tallies the writes.
func Count(ws []Write) Tally {
	t := Tally{}
	for _, w := range ws {
		t[w.Result]++
	}
	return t
}

func (t Tally) String() string {
	return fmt.Sprintf("%d accepted, %d rejected by the webhook, %d refused by the client, %d conflicts, %d other errors",
		t[Accepted], t[Rejected], t[Refused], t[Conflict], t[Failed])
}
