package holder

import (
	"fmt"

	"github.com/fencedlease/fencedlease/internal/record"
)

// FenceFromResourceVersion derives the fence of a grant from the Lease's
// resourceVersion after the grant write (record.FenceFromResourceVersion).
func FenceFromResourceVersion(rv string) (int64, error) { return record.FenceFromResourceVersion(rv) }

// RegressionError says that a new grant's fence is not greater than a fence
// published before: the API server went back in time (a storage restore, or
// storage whose resourceVersions are not ordered). Such a grant must never be
// published.
type RegressionError struct {
	Fence int64
	Floor int64
}

func (e *RegressionError) Error() string {
	return fmt.Sprintf("new fence %d is not greater than fence %d already published", e.Fence, e.Floor)
}

// CheckIncreases verifies that the resourceVersion of a grant write is
// greater than floor, the highest fence published before. It compares as
// KEP-5504 orders resourceVersions.
func CheckIncreases(rv string, floor int64) (int64, error) {
	fence, err := FenceFromResourceVersion(rv)
	if err != nil {
		return 0, err
	}
	if floor <= 0 {
		return fence, nil
	}
	cmp, ok := record.CompareVersions(rv, record.FormatFence(floor))
	if !ok {
		return 0, fmt.Errorf("resourceVersion %q cannot be ordered against fence %d", rv, floor)
	}
	if cmp <= 0 {
		return 0, &RegressionError{Fence: fence, Floor: floor}
	}
	return fence, nil
}

// MaxFence returns the largest of the fences.
func MaxFence(fences ...int64) int64 {
	var m int64
	for _, f := range fences {
		if f > m {
			m = f
		}
	}
	return m
}
