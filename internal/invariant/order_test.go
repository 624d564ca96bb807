package invariant

import "testing"

// write is an accepted write with fence f, named name.
func write(name string, f int64) Write[string] { return Write[string]{Fence: f, Of: name} }

func TestOrderClean(t *testing.T) {
	o := NewOrder[string]()
	for _, w := range []Write[string]{write("a1", 10), write("a2", 10), write("b1", 20)} {
		if h, stale := o.Accept("k", w); stale {
			t.Fatalf("%s is stale after %s", w.Of, h.Of)
		}
	}
	// Another key has an order of its own.
	if _, stale := o.Accept("other", write("a3", 10)); stale {
		t.Fatal("a write to another key is stale")
	}
}

func TestOrderStaleWriteAccepted(t *testing.T) {
	o := NewOrder[string]()
	o.Accept("k", write("a1", 10))
	o.Accept("k", write("b1", 20))
	h, stale := o.Accept("k", write("a2", 10))
	if !stale || h.Of != "b1" || h.Fence != 20 {
		t.Fatalf("a2 with fence 10 after b1 with fence 20: stale %v after %+v", stale, h)
	}
	// The highest stays: a later write between the two is stale too.
	if h, stale := o.Accept("k", write("c1", 15)); !stale || h.Of != "b1" {
		t.Fatalf("c1 with fence 15 after b1 with fence 20: stale %v after %+v", stale, h)
	}
}

// TestOrderCheckThenRecord: writes known by call and return only. A write
// checked before the higher one is recorded (they overlapped) is not stale.
func TestOrderCheckThenRecord(t *testing.T) {
	o := NewOrder[string]()
	if _, stale := o.Check("k", write("a1", 10)); stale {
		t.Fatal("the first write is stale")
	}
	o.Record("k", write("b1", 20))
	o.Record("k", write("b2", 20))
	if h, stale := o.Check("k", write("a1", 10)); !stale || h.Of != "b1" {
		t.Fatalf("checked after b1 was recorded: stale %v after %+v, want after b1, the first of fence 20", stale, h)
	}
}
