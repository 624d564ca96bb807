package invariant

import "testing"

// status is FencedLease db's status with the fence, transitions and holder
// pod ("" for none).
func status(fence int64, transitions int32, pod string) Status {
	st := Status{FencedLease: "db", UID: "uid-db", Fence: fence, Transitions: transitions}
	if pod != "" {
		st.HolderUID, st.HolderName = "uid-"+pod, pod
	}
	return st
}

func TestStatusesClean(t *testing.T) {
	s := NewStatuses()
	for _, st := range []Status{status(0, 0, ""), status(10, 1, "a"), status(10, 1, "a"), status(10, 1, ""), status(20, 2, "b")} {
		expect(t, s.Observe(st))
	}
	// Created again: a new UID starts from nothing.
	again := status(5, 1, "c")
	again.UID = "uid-db-2"
	expect(t, s.Observe(again))
}

func TestStatusesViolations(t *testing.T) {
	tests := []struct {
		name   string
		before []Status
		st     Status
		want   string
	}{
		{name: "fence went back", before: []Status{status(20, 2, "b")}, st: status(10, 2, "a"),
			want: "status of FencedLease db went back from fence 20 to 10"},
		{name: "transitions went back", before: []Status{status(20, 2, "b")}, st: status(20, 1, "b"),
			want: "status of FencedLease db went back from 2 transitions to 1"},
		{name: "an ended grant named again", before: []Status{status(10, 1, "a"), status(10, 1, "")}, st: status(10, 1, "a"),
			want: "status of FencedLease db names holder a with fence 10 again, after it recorded the end of that grant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			feed(t, NewStatuses().Observe, tc.before, tc.st, tc.want)
		})
	}
}
