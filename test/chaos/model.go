//go:build chaos

package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// register is the state of one protected object in the model: the fence of
// its last accepted writer and the value it wrote. The fencing webhook makes
// every object such a register: a write with fence f is applied only if f is
// not lower than the stored fence.
type register struct {
	Fence int64
	Value string
}

// opInput is a write (with the fence it presents and its unique value) or the
// final read of an object.
type opInput struct {
	Object string
	Read   bool
	Fence  int64
	Value  string
	// Attempt is the ID of the write, -1 for the read; Process who wrote.
	Attempt int
	Process string
}

// opOutput is the outcome of a write, or what the read returned.
type opOutput struct {
	Outcome Outcome
	Read    register
}

// fencedRegister is the porcupine model, partitioned per object.
//
//   - An accepted write with fence f is legal only if f is not lower than the
//     state's fence; it becomes the state.
//   - A write whose outcome is unknown may have been applied or not. It is
//     given the end of the run as its return time, so the checker may place
//     it after the final read, where it changes nothing observable; placed
//     earlier, it is applied when its fence allows (it may have been, and a
//     write that was not can always go last).
//   - The final read must return the state: every acknowledged write is
//     there unless a later accepted write replaced it.
//
// Rejected writes change nothing and are left out of the history.
var fencedRegister = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byObject := map[string][]porcupine.Operation{}
		for _, op := range history {
			o := op.Input.(opInput).Object
			byObject[o] = append(byObject[o], op)
		}
		keys := make([]string, 0, len(byObject))
		for k := range byObject {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byObject[k])
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(register), input.(opInput), output.(opOutput)
		switch {
		case in.Read:
			return out.Read == s, s
		case out.Outcome == Accepted:
			if in.Fence < s.Fence {
				return false, s
			}
			return true, register{Fence: in.Fence, Value: in.Value}
		default: // Unknown
			if in.Fence < s.Fence {
				return true, s
			}
			return true, register{Fence: in.Fence, Value: in.Value}
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(opInput), output.(opOutput)
		if in.Read {
			return fmt.Sprintf("read %s -> fence %d, %q", in.Object, out.Read.Fence, out.Read.Value)
		}
		return fmt.Sprintf("#%d %s: write fence %d, %q -> %s", in.Attempt, in.Process, in.Fence, in.Value, out.Outcome)
	},
	DescribeState: func(state any) string {
		s := state.(register)
		return fmt.Sprintf("fence %d, %q", s.Fence, s.Value)
	},
}

// operations turns a history into porcupine operations: accepted and unknown
// writes, and the final reads. ClientId numbers the processes, for the
// visualisation.
func operations(h *History) []porcupine.Operation {
	clients := map[string]int{}
	client := func(name string) int {
		if id, ok := clients[name]; ok {
			return id
		}
		clients[name] = len(clients)
		return clients[name]
	}
	var ops []porcupine.Operation
	for _, a := range h.Attempts {
		if a.Outcome == Rejected {
			continue
		}
		ret := a.Return
		if a.Outcome == Unknown {
			ret = h.End
		}
		ops = append(ops, porcupine.Operation{ClientId: client(a.Process),
			Input:  opInput{Object: a.Object, Fence: a.Fence, Value: a.Value, Attempt: a.ID, Process: a.Process},
			Output: opOutput{Outcome: a.Outcome}, Call: int64(a.Call), Return: int64(ret)})
	}
	for _, r := range h.Final {
		ops = append(ops, porcupine.Operation{ClientId: client("final-read"),
			Input:  opInput{Object: r.Object, Read: true, Attempt: -1, Process: "final-read"},
			Output: opOutput{Read: register{Fence: r.Fence, Value: r.Value}}, Call: int64(r.Call), Return: int64(r.Return)})
	}
	return ops
}

// checkLinearizable checks the writes and final reads of every object against
// the fenced register. On a violation (or a check that did not finish in
// time) it writes porcupine's HTML visualisation to visualization and
// returns a message; "" means linearizable.
func checkLinearizable(h *History, timeout time.Duration, visualization string) (string, error) {
	res, info := porcupine.CheckOperationsVerbose(fencedRegister, operations(h), timeout)
	if res == porcupine.Ok {
		return "", nil
	}
	if err := porcupine.VisualizePath(fencedRegister, info, visualization); err != nil {
		return "", fmt.Errorf("write the porcupine visualisation: %w", err)
	}
	if res == porcupine.Unknown {
		return fmt.Sprintf("porcupine could not decide within %s whether the writes are linearizable (visualisation: %s)", timeout, visualization), nil
	}
	return fmt.Sprintf("the writes are not linearizable as a fenced register: some object took an older fence after a newer one, or lost an acknowledged write (visualisation: %s)", visualization), nil
}
